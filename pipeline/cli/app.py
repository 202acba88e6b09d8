"""`ctsweep`: one subcommand per DVC stage, each a thin wrapper over the stage's function."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from pipeline.config import Params, dataset_params, load_params, read_yaml
from pipeline.config.dvc_params import check_dvc_params, run_by_dvc
from pipeline.errors import ConfigError, excerpt
from pipeline.names import check_name
from pipeline.runtime.output import check_log_place, quiet_libraries
from pipeline.stores.paths import processed_dir, project_root, raw_dir, raw_lock_path
from pipeline.cli.postgres_commands import postgres_app
from pipeline.cli.stage import ROOT, stage as _stage
from pipeline.cli.usage import OneLineGroup

app = typer.Typer(help="Hyperparameter search for continuous-time sequence models: "
                       "prepare -> search -> final -> report -> promote.", no_args_is_help=True,
                  pretty_exceptions_enable=False, cls=OneLineGroup)

def _names(**given: str) -> None:
    """Dataset and family arguments are names, never paths: checked before anything else runs."""
    for what, value in given.items():
        check_name(value, f"argument {what.upper()}")


def _params(root: Optional[Path]) -> tuple[Path, Params]:
    base = project_root(root)
    params = load_params(base / "params.yaml")
    if run_by_dvc():  # a section dvc.yaml lists and params.yaml lacks: this line, not DVC's stages later
        check_dvc_params(base, read_yaml(base / "params.yaml"), base / "params.yaml")
    return base, params


def _check(name: str, valid: list[str], key: str) -> None:
    if name not in valid:
        raise ConfigError(f"{name!r} is not in params.yaml `{key}`; valid: {valid}")


def _spaces(base: Path, families: list[str]) -> None:
    """Each family's search space read and checked as a file (keys, values, the model's arguments):
    a mistake there is one line before torch, Ray or MLflow is imported (pipeline/spaces reads the
    built-in families' arguments from a table). What needs the data and the model (the corners) is
    checked later, before Ray starts."""
    from pipeline.spaces import load_space, space_path

    for family in families:
        load_space(space_path(base, family), family)


def _verified(base: Path, datasets: list[str]) -> None:
    """A prepared dataset without digest.json is unverified: refused in one line naming `ctsweep
    prepare`, before torch, Ray or MLflow load and before any result is replaced (a sibling a
    stage takes on is checked as it loads: pipeline.data.contract.load_dataset)."""
    from pipeline.data.identity import require_digest

    for name in datasets:
        require_digest(processed_dir(base, name))


DATASET = typer.Argument(..., help="A key of `prepare` in params.yaml.")
LISTED_DATASET = typer.Argument(..., help="A dataset of params.yaml `datasets`.")
SOURCE = typer.Option(
    None, "--source", envvar="CTSWEEP_DATA_SOURCE",
    help="A local directory, file or http(s) URL prefix holding the raw files by name (a mirror).",
)
# Not Typer's envvar=: a value it cannot read as a flag ("maybe") would get its usage box; the
# environment variable is read, and a bad value refused in one line, by pipeline.data.download.accept_unverified.
UNVERIFIED_COPY = typer.Option(
    False, "--unverified-copy",
    help="Use a mirror's copy (--source) that the publisher's checksums cannot vouch for (no checksum list "
         "there, or a rebuilt archive), marked unverified in data/raw.lock and in every result made from it. "
         "CTSWEEP_UNVERIFIED_COPY=1 says the same (for dvc repro).",
)


@app.command()
@_stage
def fetch(dataset: str = DATASET, source: Optional[str] = SOURCE, unverified_copy: bool = UNVERIFIED_COPY,
          root: Path = ROOT) -> None:
    """Download (or verify) the raw files of DATASET into data/raw/DATASET."""
    _names(dataset=dataset)
    from pipeline.data.download import accept_unverified
    from pipeline.data.prepare import fetch as run, unverified_raw_files

    accept = accept_unverified(unverified_copy, source)
    base, params = _params(root)
    p = dataset_params(params, dataset)
    paths = run(p, raw_dir(base, dataset), raw_lock_path(base), source, accept)
    unverified = unverified_raw_files(p, raw_lock_path(base))
    if not unverified:
        typer.echo(f"fetched {dataset}: {len(paths)} raw file(s) verified in {raw_dir(base, dataset)}")
        return
    typer.echo(f"fetched {dataset}: {len(paths)} raw file(s) in {raw_dir(base, dataset)}, {len(unverified)} of them "
               f"unverified copies ({', '.join(sorted(unverified))}: see {raw_lock_path(base)})")


@app.command()
@_stage
def prepare(dataset: str = DATASET, source: Optional[str] = SOURCE, unverified_copy: bool = UNVERIFIED_COPY,
            root: Path = ROOT) -> None:
    """Build data/processed/DATASET from its params.yaml section (fetching raw files if missing)."""
    _names(dataset=dataset)
    from pipeline.data.download import accept_unverified
    from pipeline.data.prepare import prepare as run

    accept = accept_unverified(unverified_copy, source)
    base, params = _params(root)
    meta = run(dataset, dataset_params(params, dataset), processed_dir(base, dataset), raw_dir(base, dataset),
               raw_lock_path(base), source, accept)
    typer.echo(f"prepared {dataset}: {meta.sizes} -> {processed_dir(base, dataset)}"
               + (f" (data: {meta.provenance})" if meta.provenance else ""))


@app.command()
@_stage
def classical(dataset: str = DATASET, root: Path = ROOT) -> None:
    """Train aeon's strongest classifier that accepts DATASET on one core (MiniRocket, or 1-NN DTW for
    unequal lengths) -> results/DATASET/classical.json, the report's classical reference row."""
    _names(dataset=dataset)
    base, params = _params(root)
    _check(dataset, list(params.prepare), "prepare")  # before aeon and torch are imported
    _verified(base, [dataset])
    check_log_place(base, "classical")
    from pipeline.classical.stage import run, summary

    quiet_libraries(base, "classical")  # their informational lines: .ctsweep/logs/
    typer.echo(summary(run(base, dataset, params.classical)))


@app.command()
@_stage
def search(
    dataset: str = LISTED_DATASET,
    family: Optional[str] = typer.Argument(None, help="One family; omitted: every family of params.yaml "
                                                      "`families` at once, skipping those whose result is current."),
    root: Path = ROOT,
    fresh: bool = typer.Option(False, "--fresh", help="Start a new search even if an interrupted one with "
                                                        "the same params, space and data could be resumed."),
) -> None:
    """Ray Tune + Optuna search on DATASET -> results/DATASET/search/FAMILY.json per family.

    Without FAMILY every family of params.yaml `families` is searched in one Ray Tune run, each
    with its own study, ASHA rungs and budget, sharing the cluster's trial slots; a family whose
    result file was written from the same params, space, data and code is skipped (this is what
    `dvc repro` runs). With RAY_ADDRESS set (or under `ray job submit`) the trials run on that
    cluster. An interrupted search (driver killed, Ctrl-C) is resumed by running the same command again.
    """
    _names(dataset=dataset, **({"family": family} if family is not None else {}))
    base, params = _params(root)
    _check(dataset, params.datasets, "datasets")
    if family is not None:
        _check(family, params.families, "families")
    families = [family] if family is not None else list(params.families)
    _spaces(base, families)
    _verified(base, [dataset])
    check_log_place(base, "search")
    # Late: Ray Tune, torch, MLflow and Optuna load once the names, params.yaml and the spaces have passed.
    from pipeline.cli.lines import say_searched
    from pipeline.cli.sharing import siblings
    from pipeline.sweep.search import search_datasets

    quiet_libraries(base, "search")  # their informational lines: .ctsweep/logs/
    others = siblings(base, params.datasets, dataset, params.search.share_datasets and family is None)
    records = search_datasets(base, [dataset], families, params.search, fresh=fresh, only_stale=family is None,
                              optional=others)
    for name, by_family in records.items():
        for family_name, record in by_family.items():
            if name == dataset or not record.get("up_to_date"):  # a sibling's current results go unmentioned
                say_searched(name, family_name, record)


@app.command()
@_stage
def final(
    dataset: str = LISTED_DATASET,
    family: Optional[str] = typer.Argument(None, help="One family; omitted: every family of params.yaml "
                                                      "`families` at once, skipping those whose result is current."),
    root: Path = ROOT,
) -> None:
    """Retrain the best config over the final seeds -> results/DATASET/final/FAMILY.json per family.

    Without FAMILY the seeds of every family of params.yaml `families` train at once, sharing the
    cluster; a family whose result file was written from the same searched configuration, params,
    data and code is skipped (this is what `dvc repro` runs).
    """
    _names(dataset=dataset, **({"family": family} if family is not None else {}))
    base, params = _params(root)
    _check(dataset, params.datasets, "datasets")
    if family is not None:
        _check(family, params.families, "families")
    families = [family] if family is not None else list(params.families)
    _verified(base, [dataset])
    check_log_place(base, "final")
    # Late: Ray, torch and MLflow load once the names and params.yaml have passed.
    from pipeline.cli.lines import say_evaluated
    from pipeline.cli.sharing import siblings
    from pipeline.final.stage import final_datasets

    quiet_libraries(base, "final")  # their informational lines: .ctsweep/logs/
    others = siblings(base, params.datasets, dataset, params.final.share_datasets and family is None)
    records = final_datasets(base, [dataset], families, params.final, only_stale=family is None, optional=others)
    for name, by_family in records.items():
        for family_name, r in by_family.items():
            if name == dataset or not r.get("up_to_date"):  # a sibling's current results go unmentioned
                say_evaluated(name, family_name, r)


@app.command()
@_stage
def report(root: Path = ROOT) -> None:
    """Write reports/results.md (and results.html), reports/metrics.json, the DVC metrics under
    reports/metrics/ and the plots. The last line names the
    failed and the not-converged cells, if any."""
    base, params = _params(root)
    _verified(base, params.datasets)
    check_log_place(base, "report")
    from pipeline.reporting.report import report as run
    from pipeline.reporting.status import cells, summary

    quiet_libraries(base, "report")  # their informational lines: .ctsweep/logs/
    metrics = run(base, params.datasets, params.families)
    typer.echo((base / "reports" / "results.md").read_text())
    last = summary(cells(metrics), "ctsweep report")
    if last:
        typer.echo(last)


@app.command("status")
@_stage
def status_command(root: Path = ROOT) -> None:
    """Each dataset's verdict (the best family, or those tied at the top and whether they are
    equivalent), then one line per failed or marked cell of reports/metrics.json (every mark of
    docs/explanation/marks.md); exit status 1 if a cell failed, else 0. While a search or final
    stage runs (from any terminal), its progress line first, read from MLflow."""
    from pipeline.reporting.status import status

    lines, code = status(project_root(root))
    for line in lines:
        typer.echo(line)
    if code:
        raise typer.Exit(code)


COMPARE_LINES = 50


@app.command("compare")
@_stage
def compare_command(
    a: Path = typer.Argument(..., metavar="A", help="Project root A."),
    b: Path = typer.Argument(..., metavar="B", help="Project root B."),
    tolerance: float = typer.Option(0.0, min=0.0, help="Absolute tolerance for floats, for GPU runs (0: bit for bit)."),
    every: bool = typer.Option(False, "--all", help=f"Print every difference (at most {COMPARE_LINES} lines)."),
) -> None:
    """Compare two roots' results/**/*.json and reports/metrics.json, ignoring run ids, paths
    inside each root and wall-clock times. Exit 0 if identical, else print the first difference
    and exit 1."""
    from pipeline.reporting.compare import compare_runs, compared_files

    base_a, base_b = project_root(a), project_root(b)
    found = compare_runs(base_a, base_b, tolerance)
    if not found:
        files = compared_files(base_a, base_b)
        results = sum(f.startswith("results/") for f in files)
        parts = [f"{results} under results/"] if results else []
        parts += ["reports/metrics.json"] if "reports/metrics.json" in files else []
        typer.echo(f"identical: {len(files)} files compared ({', '.join(parts)})")
        return
    shown = found[:COMPARE_LINES] if every else found[:1]
    for difference in shown:
        typer.echo(str(difference))
    if len(found) > len(shown):
        more = len(found) - len(shown)
        typer.echo(f"... and {more} more difference{'s' if more > 1 else ''}" + ("" if every else "; --all lists them"))
    raise typer.Exit(1)


@app.command()
@_stage
def promote(
    dataset: Optional[str] = typer.Option(None, help="Only this dataset (all of params.yaml `datasets` if omitted)."),
    family: Optional[str] = typer.Option(None, help="Promote this family by hand (needs --dataset): the alias "
                                                    "moves whatever the rule says."),
    force: bool = typer.Option(False, "--force", help="Move the alias to the candidate even if the rule says no "
                                                      "or the candidate is marked not converged (†), mostly "
                                                      "failed (§) or no better than trivial (∅)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show champion and candidate; register and move nothing."),
    root: Path = ROOT,
) -> None:
    """Show each dataset's champion and candidate side by side; register the candidate and move
    alias `champion` when the rule in params.yaml (`promote`) says it is better, or when asked."""
    _names(**{k: v for k, v in {"dataset": dataset, "family": family}.items() if v is not None})
    base, params = _params(root)
    if family is not None and dataset is None:
        raise ConfigError("--family needs --dataset: a family is promoted by hand for one dataset")
    if dataset is not None:
        _check(dataset, params.datasets, "datasets")
    check_log_place(base, "promote")
    # Late: MLflow loads once the names and params.yaml have passed.
    from pipeline.registry.promote import promote as run_all, promote_dataset

    quiet_libraries(base, "promote")  # their informational lines: .ctsweep/logs/
    if dataset is None and not (force or dry_run):
        decisions = run_all(base, params.datasets, params.families, params.promote)
    else:
        names = [dataset] if dataset else params.datasets
        decisions = [promote_dataset(base, d, params.families, params.promote, family=family, force=force,
                                     dry_run=dry_run) for d in names]
    for d in decisions:
        typer.echo(d["table"])
        typer.echo(f"  decision: {_verdict(d)}: {d['reason']}{' (by hand)' if d['by_hand'] else ''}\n")
    for d in decisions:  # last: what a refusal left unpromoted, for a reader of `dvc repro`'s output
        if d.get("refused"):
            typer.echo(f"ctsweep promote: {d['dataset']}: not promoted: {d['reason']}")


def _verdict(d: dict[str, Any]) -> str:
    if d.get("refused"):
        return "alias " + (f"stays on v{d['champion_version']}" if d["champion_version"] else "not set")
    if d["dry_run"]:
        return f"would {'move' if d['better_by_rule'] or d['by_hand'] else 'not move'} the alias"
    if d["alias_moved"]:
        return f"alias `champion` -> v{d['champion_version']}" + (" (by --force)" if d.get("by_force") else "")
    return f"alias stays on v{d['champion_version']}"


@app.command()
@_stage
def predict(
    dataset: str = typer.Argument(..., help="The dataset whose registered model (ctsweep-DATASET) predicts."),
    series: Path = typer.Argument(..., help="A .npz (x, t, optional mask/ids) or a long .csv (series, time, "
                                            "one column per channel) of series in original units."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the predictions to this new .csv file "
                                       "(default: print them); never the input or a project file."),
    force: bool = typer.Option(False, "--force", help="Let --out replace an existing file of yours."),
    # A string, read by _version: Typer's own int type answers "abc" with its six-line usage box.
    version: Optional[str] = typer.Option(None, metavar="N", help="A registered version instead of the champion."),
    root: Path = ROOT,
) -> None:
    """Run the champion model of DATASET (from the MLflow Model Registry) on a file of series."""
    _names(dataset=dataset)
    number = _version(version, dataset)
    from pipeline.serving.predict import predict_command

    text, to_stderr = predict_command(_params(root)[0], dataset, series, out, number, force)
    typer.echo(text, err=to_stderr, nl=False)


def _version(text: Optional[str], dataset: str) -> Optional[int]:
    """--version as the registry numbers versions (1, 2, ...); anything else is one line."""
    if text is None:
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,17}", text):
        raise ConfigError(f"option --version: {excerpt(text)} is not a version number; allowed: a version of the "
                          f"registered model ctsweep-{dataset}, a whole number from 1 (e.g. --version 3), or no "
                          f"--version for the champion")
    return int(text)


@app.command("profile")
@_stage
def profile_command(
    name: Optional[str] = typer.Argument(None, help="A profile; none: list them."),
    write: bool = typer.Option(False, "--write", help="Replace params.yaml (a hand-written one is kept as params.yaml.bak)."),
    root: Path = ROOT,
) -> None:
    """A paper's experiment as published: print (or --write) params.yaml with that profile over it."""
    from pipeline import profiles

    if name is None:
        for each in profiles.names():
            typer.echo(f"{each:22s} {profiles.describe(each)}")
        return
    base = project_root(root)
    target = base / "params.yaml"
    raw, params = profiles.load(name, target)
    pairs = profiles.check_spaces(name, params, base)
    text = profiles.to_yaml(name, raw)
    from pipeline.data.local_copy import partial_copies

    partial = partial_copies(base, params)  # said before any stage runs, whether written or printed
    if not write:
        typer.echo(text, nl=False)
        for line in partial:
            typer.echo(f"ctsweep: warning: {line}", err=True)
        return
    from pipeline.stores.files import write_text

    backup = base / "params.yaml.bak"
    current = target.read_text()
    if not current.startswith(profiles.HEADER):  # a profile's own output is not a user's file to keep
        write_text(backup, current)
    write_text(target, text)
    typer.echo(f"{target}: profile {name} ({len(params.datasets)} dataset(s), {len(params.families)} "
               f"families, {pairs} searches); your own params.yaml is kept as {backup}", err=True)
    for line in partial:
        typer.echo(f"ctsweep: warning: {line}", err=True)


@app.command("optuna-dashboard")
@_stage
def optuna_dashboard_command(
    host: str = typer.Option("127.0.0.1", help="The address to serve on (the loopback: only this machine)."),
    port: int = typer.Option(8080, min=1, max=65535, help="The port to serve on."),
    root: Path = ROOT,
) -> None:
    """Serve every search's Optuna study from the store `search.optuna_storage` names (an SQLite
    file or a database URL such as postgresql://...) with optuna-dashboard; a store that cannot be
    opened is one line, as the search refuses it."""
    import os
    import shutil

    from pipeline.stores.database_url import masked
    from pipeline.sweep.sensitivity import check_optuna_storage

    base, params = _params(root)
    url = check_optuna_storage(base, params.search.optuna_storage)  # one line if it cannot be opened
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise ConfigError(f"params.yaml: key `search.optuna_storage`: no study store at {url.removeprefix('sqlite:///')} "
                          "yet (a search writes it); allowed: the store of a project that has searched")
    program = shutil.which("optuna-dashboard")
    if program is None:
        raise ConfigError("optuna-dashboard is not installed in this environment; allowed: `make install`")
    typer.echo(f"optuna-dashboard: the studies of {masked(url)} at http://{host}:{port}", err=True)
    os.execv(program, [program, url, "--host", host, "--port", str(port)])


@app.command("check")
@_stage
def check_command(root: Path = ROOT) -> None:
    """Validate params.yaml, the search space of every listed family (on each prepared dataset as
    the search checks it: the reference and the corners of the space built by the model) and the
    storages; start and write nothing. Prints "ok: ..." or the one-line error (exit status 2)."""
    from pipeline.cli.check import check_project

    typer.echo(check_project(project_root(root)))


@app.command("check-family")
@_stage
def check_family_command(
    name: str = typer.Argument(..., help="A family: built-in, declared under params.yaml `user_families`, "
                                         "or a `ctsweep.families` entry point."),
    root: Path = ROOT,
) -> None:
    """Check NAME against the model contract: input representation, output shapes per sequence and
    per step, padding, causality per step (no output reads a later input, unless the family says
    it does), one training step, save and reload as an MLflow model. Prints each check with PASS
    or the reason it failed; exit status 1 if one failed."""
    _names(name=name)
    from pipeline.families.check import check_family, summary

    base, _ = _params(root)  # declares the params.yaml families (an import error stops here, status 2)
    results = check_family(base, name, typer.echo)
    typer.echo(f"{name}: {summary(results)}")
    if not all(r.passed for r in results):
        raise typer.Exit(1)


@app.command("new-family")
@_stage
def new_family_command(
    name: str = typer.Argument(..., help="The new family's name (a letter, then letters, digits, '_' or '-')."),
    root: Path = ROOT,
) -> None:
    """Write a commented template model (my_families/NAME.py), its search space and its test, and
    declare it under params.yaml `user_families`; they pass `ctsweep check-family NAME` as written."""
    _names(name=name)
    from pipeline.families.template import new_family

    from pipeline.families.template import MODEL_STAGES, PACKAGE

    base = project_root(root)
    written = new_family(base, name)
    for path in written:
        typer.echo(f"wrote {path.relative_to(base)}")
    typer.echo(f"next: `ctsweep check-family {name}`, then add {name} to params.yaml `families` to search it "
               f"beside the others")
    if (base / "dvc.yaml").is_file() and base / "dvc.yaml" not in written:
        typer.echo(f"dvc.yaml: make sure the {' and '.join(MODEL_STAGES)} stages list {PACKAGE} under `deps`, so "
                   f"`dvc repro` reruns them when your model changes")


app.add_typer(postgres_app, name="postgres")


def main() -> None:
    app(prog_name="ctsweep")


if __name__ == "__main__":
    sys.exit(main())
