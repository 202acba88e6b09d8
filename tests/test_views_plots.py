"""What a user opens shows what the results say: `dvc plots show` draws every family (coloured by
family, search trials and final seeds told apart, the y axis named for the metric), and the
report attached to MLflow runs links only images those runs have.

Both build their results files by hand (tests/test_report.py's helpers) and run the real report;
the first renders the real dvc.yaml's plots in a fresh `dvc init` project."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.stores import tracking
from pipeline.stores.paths import final_result_path, search_result_path
from pipeline.reporting.plots import DVC_TEMPLATES
from pipeline.reporting.report import PLOT_KINDS, report
from tests.conftest import REPO
from tests.test_report import _final, _search, _write

DVC = str(Path(sys.executable).parent / "dvc")
FAMILIES = {"a": 1e-3, "b": 3e-4, "c": 2e-3}  # family -> searched lr
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def _results(root: Path, datasets: tuple[str, ...] = ("d",), run_ids: dict[tuple[str, str], str] | None = None) -> None:
    for dataset in datasets:
        for i, (family, lr) in enumerate(FAMILIES.items()):
            vals = [0.9 - 0.1 * i, 0.8 - 0.1 * i, 0.85 - 0.1 * i]
            record = {**_final(family, vals, [v - 0.05 for v in vals], lr=lr, robust={0.5: [0.7, 0.72, 0.74]}),
                      "dataset": dataset}
            if run_ids:
                record["mlflow_parent_run_id"] = run_ids[dataset, family]
            _write(final_result_path(root, dataset, family), record)
            _write(search_result_path(root, dataset, family), _search([lr, lr * 3, lr / 4]))
    (root / "params.yaml").write_text(f"datasets: {list(datasets)}\nfamilies: {list(FAMILIES)}\n"
                                      f"prepare: {{{', '.join(f'{d}: {{kind: xor}}' for d in datasets)}}}\n")


def _run(root: Path, *cmd: str) -> str:
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def shown(tmp_path: Path) -> tuple[Path, dict]:
    """A fresh DVC project with the repository's dvc.yaml, a report of three families, and what
    `dvc plots show --json` makes of it: plot id -> its renderers."""
    _run(tmp_path, "git", "init", "-q")
    _run(tmp_path, DVC, "init", "-q")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    _results(tmp_path)
    report(tmp_path, ["d"], list(FAMILIES))
    out = json.loads(_run(tmp_path, DVC, "plots", "show", "--json"))
    assert not out.get("errors"), out["errors"]
    return tmp_path, out.get("data", out)


def _vega(shown: dict, plot_id: str) -> dict:
    [renderer] = shown[plot_id]
    assert renderer["type"] == "vega"
    return renderer["content"]


def _encodings(spec: dict) -> dict:
    """The spec's encodings, its layers' merged over its own."""
    merged = dict(spec.get("encoding", {}))
    for layer in spec.get("layer", []):
        merged.update(layer.get("encoding", {}))
    return merged


def test_the_learning_curve_chart_draws_every_family_and_names_the_metric(shown: tuple[Path, dict]) -> None:
    _, data = shown
    spec = _vega(data, "reports/curves/d.csv")
    rows = spec["data"]["values"]
    assert {r["family"] for r in rows} == set(FAMILIES)  # not only the last column's family
    assert {(r["family"], int(r["epoch"])) for r in rows} == {(f, e) for f in FAMILIES for e in (1, 2)}
    enc = _encodings(spec)
    assert spec["encoding"]["color"]["field"] == "family"
    assert enc["x"]["field"] == "epoch"
    assert enc["y"]["field"] == enc["y"]["title"] == "validation accuracy"  # the metric, not a family
    a2 = next(r for r in rows if (r["family"], r["epoch"]) == ("a", "2"))
    assert float(a2["validation accuracy"]) == pytest.approx(0.85)  # the mean of its seeds (0.9, 0.8, 0.85)


def test_the_learning_rate_scatter_is_coloured_by_family_with_search_and_final_apart(shown: tuple[Path, dict]) -> None:
    _, data = shown
    spec = _vega(data, "reports/lr/d.csv")
    enc = spec["encoding"]
    assert enc["color"]["field"] == "family" and enc["shape"]["field"] == "stage"
    assert enc["shape"]["scale"]["domain"] == ["search", "final"]
    assert len(set(enc["shape"]["scale"]["range"])) == 2  # two different marks
    assert enc["x"]["field"] == "lr" and enc["x"]["scale"]["type"] == "log"
    assert enc["y"]["field"] == enc["y"]["title"] == "validation accuracy"
    rows = spec["data"]["values"]
    by = {(r["family"], r["stage"]) for r in rows}
    assert by == {(f, s) for f in FAMILIES for s in ("search", "final")}
    finals = sorted((r["family"], r["lr_factor"], float(r["lr"])) for r in rows if r["stage"] == "final")
    assert finals[:2] == [("a", "0.5", pytest.approx(5e-4)), ("a", "1", pytest.approx(1e-3))]


def test_the_trials_chart_draws_every_family_s_expected_best_over_n_trials(shown: tuple[Path, dict]) -> None:
    _, data = shown
    spec = _vega(data, "reports/trials/d.csv")
    rows = spec["data"]["values"]
    assert {(r["family"], int(r["n"])) for r in rows} == {(f, n) for f in FAMILIES for n in (1, 2, 3)}  # 3 trials ok
    enc = _encodings(spec)
    assert spec["encoding"]["color"]["field"] == "family" and enc["x"]["field"] == "n"
    assert enc["y"]["field"] == enc["y"]["title"] == "expected best validation accuracy"
    band = spec["layer"][0]["encoding"]  # the bootstrap band
    assert (band["y"]["field"], band["y2"]["field"]) == ("low", "high")


def test_the_pngs_and_the_bars_stay_and_the_templates_come_from_the_report(shown: tuple[Path, dict]) -> None:
    root, data = shown
    for kind in ("curves", "lr", "test", "trials"):
        [image] = data[f"reports/plots/d_{kind}.png"]
        assert image["type"] == "image"
    assert {r["family"] for r in _vega(data, "reports/bars/d.csv")["data"]["values"]} == set(FAMILIES)
    for name, template in DVC_TEMPLATES.items():  # a fresh `dvc init` has no .dvc/plots: the report wrote them
        assert json.loads((root / ".dvc" / "plots" / f"{name}.json").read_text()) == template
    _run(root, DVC, "plots", "show")  # the page a user opens
    page = (root / "dvc_plots" / "index.html").read_text()
    assert '"field": "family"' in page and "validation accuracy" in page


def test_no_dvc_folder_no_templates(tmp_path: Path) -> None:
    _results(tmp_path)
    report(tmp_path, ["d"], list(FAMILIES))
    assert not (tmp_path / ".dvc").exists()  # a folder that is no DVC project is not made into one


def test_every_image_of_the_report_in_mlflow_is_an_artifact_of_that_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the project's own SQLite store
    datasets = ("d", "e")  # each dataset's runs get the whole report: the other dataset's images too
    runs = {}
    for dataset in datasets:
        client, exp_id = tracking.experiment_id(tmp_path, dataset)
        for family in FAMILIES:
            runs[dataset, family] = tracking.start_run(client, exp_id, f"final/{family}", {"stage": "final"})
    _results(tmp_path, datasets, runs)
    report(tmp_path, list(datasets), list(FAMILIES))
    assert client.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    for (dataset, family), run_id in runs.items():
        files = {f.path for f in client.list_artifacts(run_id, "report")}
        local = client.download_artifacts(run_id, "report/results.md", str(tmp_path / "downloaded" / run_id))
        links = IMAGE.findall(Path(local).read_text())
        assert len(links) == len(PLOT_KINDS) * len(datasets) + 1, links  # and the diagram across the datasets
        missing = [link for link in links if f"report/{link}" not in files]
        assert not missing, (dataset, family, missing, sorted(files))
    # the report in the repository links its own folder's plots/
    links = IMAGE.findall((tmp_path / "reports" / "results.md").read_text())
    assert links and all((tmp_path / "reports" / link).is_file() for link in links)
