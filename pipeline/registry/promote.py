"""The `promote` stage: register each dataset's best final model and decide on alias `champion`.

Per dataset the candidate is the family with the best mean validation metric among those that
did not fail. It is registered as a version of `ctsweep-<dataset>` (once: running the stage
again reuses the version of the same final run) carrying its metrics, per-seed scores, config
and git commit as tags; a model trained on data that is not the publisher's as published (an
unverified local copy, missing records) says so in its description and tag `data_provenance`. The
registered model's description says what its models take and return: series in original units (not
the standardised data/processed splits), the channels and static channels, and the label of each
output column. The alias moves when a person asks for it (`force`, or promoting a
family by hand) or when the rule in params.yaml says the candidate is better than the current
champion:

    mean validation better by more than `promote.min_improvement`, and, when
    `promote.max_p_value` is set, Welch's t-test on the two models' per-seed validation scores
    below it (so a lucky seed does not replace a champion).

A family with fewer final seeds than `promote.seeds_required` is refused, whoever asks. A family
whose every search trial failed is never a candidate (if all of a dataset's did, nothing is
promoted), and a candidate marked not converged, mostly failed (pipeline.reporting.marks) or, in
reports/metrics.json, no better than trivial (pipeline.reporting.trivial) is refused unless `force`
is given; refusals are decisions, not errors, so the stage still succeeds.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline.runtime.output import printed_to_log
from pipeline.stores import tracking
from pipeline.config import PromoteParams
from pipeline.errors import CtsweepError
from pipeline.stores.files import write_json
from pipeline.stores.paths import reports_dir
from pipeline.reporting.marks import (MOSTLY_FAILED, NO_BETTER_THAN_TRIVIAL, NOT_CONVERGED, Mark, failed_detail,
                                      is_failed, mostly_failed, not_converged)
from pipeline.reporting.status import datasets, read_metrics
from pipeline.reporting.provenance import git_commit
from pipeline.reporting.records import read_final
from pipeline.comparison.ties import best_family
from pipeline.reporting.stats import welch
from pipeline.reporting.tables import fmt
from pipeline.stores.schema import DATA_PROVENANCE, FINAL_FOR_PROMOTE

log = logging.getLogger(__name__)

SUMMARY = ("dataset", "family", "metric", "mode", "val_mean", "val_std", "test_mean", "test_std", "n_seeds",
           "model_seed")


def _champion(client: MlflowClient, name: str) -> Any | None:
    try:
        return client.get_model_version_by_alias(name, tracking.ALIAS)
    except MlflowException:
        return None


def version_tags(record: dict[str, Any], commit: str) -> dict[str, str]:
    """What a registered version carries: metrics, per-seed scores, config and where it came from."""
    tags = {k: str(record[k]) for k in SUMMARY}
    tags.update(config=json.dumps(record.get("model_config", record["config"]), sort_keys=True),  # the model's repeat's
                val_scores=json.dumps([s["val"] for s in record.get("seeds", [])]),
                test_scores=json.dumps([s["test"] for s in record.get("seeds", [])]),
                model_uri=record["model_uri"], final_run_id=str(record.get("mlflow_parent_run_id", "")),
                git_commit=commit)
    if record.get(DATA_PROVENANCE):  # an unverified copy, missing records: whoever loads the model sees it
        tags[DATA_PROVENANCE] = record[DATA_PROVENANCE]
    return tags


def model_description(record: dict[str, Any]) -> str:
    """The registered model's description: what it is, then what its models take and return (the
    units, channels, static channels and output labels), from the MLmodel metadata of the model
    being registered (pipeline/serving/outputs.py writes it when the final stage logs a model)."""
    try:
        inputs = (mlflow.models.get_model_info(record["model_uri"]).metadata or {}).get("description")
    except (MlflowException, OSError):
        inputs = None
    inputs = inputs or ("Input: series in original units, as in the raw data, NOT the standardised "
                        "data/processed splits (x * norm_std + norm_mean undoes them). This version was logged "
                        "before models recorded their channels and labels; `ctsweep final` logs them.")
    return f"ctsweep: the best model found for {record['dataset']}. {inputs}"


def _register(client: MlflowClient, name: str, record: dict[str, Any], commit: str) -> Any:
    """The version holding `record`'s model: the existing one if already registered, else a new one.
    The registered model's description is (re)written from `record`'s model (model_description)."""
    description = model_description(record)
    try:
        client.create_registered_model(name, tags={"dataset": record["dataset"]}, description=description)
    except MlflowException:  # already registered: models registered before carry the same words too
        client.update_registered_model(name, description=description)
    for v in client.search_model_versions(f"name = '{name}'"):
        if v.tags.get("model_uri") == record["model_uri"]:
            return v
    metric = record["metric"]
    description = (f"{record['family']}: validation {metric} {fmt(record['val_mean'], record['val_std'], metric)}, "
                   f"test {fmt(record['test_mean'], record['test_std'], metric)} over {record['n_seeds']} seeds"
                   + (f"; data: {record[DATA_PROVENANCE]}" if record.get(DATA_PROVENANCE) else ""))
    with printed_to_log(log):  # "Registered model ... already exists": created just above, by us
        version = mlflow.register_model(record["model_uri"], name, tags=version_tags(record, commit))
    client.update_model_version(name, version.version, description=description)
    return version


def judge(candidate: dict[str, Any], champion: dict[str, str] | None, p: PromoteParams) -> tuple[bool, str]:
    """(better by the rule, why). candidate: a final record; champion: the champion version's tags."""
    if champion is None:
        return True, "no champion yet"
    mode, metric = candidate["mode"], candidate["metric"]
    ours, theirs = candidate["val_mean"], float(champion["val_mean"])
    gain = ours - theirs if mode == "max" else theirs - ours
    shown = f"validation {fmt(ours, None, metric)} vs {fmt(theirs, None, metric)}"
    if gain <= p.min_improvement:
        return False, f"not better by more than promote.min_improvement = {p.min_improvement:g} ({shown})"
    if p.max_p_value is not None:
        theirs_scores = json.loads(champion.get("val_scores", "[]"))
        test = welch([s["val"] for s in candidate["seeds"]], theirs_scores)
        if math.isnan(test.p) or test.p >= p.max_p_value:
            return False, (f"better on average but Welch p = {test.p:.3f} is not below promote.max_p_value = "
                           f"{p.max_p_value:g} ({shown})")
        return True, f"better ({shown}, Welch p = {test.p:.3f})"
    return True, f"better ({shown})"


def side_by_side(name: str, champion: Any | None, record: dict[str, Any]) -> str:
    """A two-column text table: the current champion and the candidate."""
    metric = record["metric"]
    cand = {k: str(v) for k, v in version_tags(record, "").items()}
    champ = dict(champion.tags) if champion is not None else {}
    head = f"v{champion.version}" if champion is not None else "(none)"

    def score(tags: dict[str, str], what: str) -> str:
        return fmt(float(tags[f"{what}_mean"]), float(tags[f"{what}_std"]), metric) if tags else "—"

    rows = [("", f"champion {head}", "candidate"), ("family", champ.get("family", "—"), cand["family"]),
            (f"validation {metric}", score(champ, "val"), score(cand, "val")),
            (f"test {metric}", score(champ, "test"), score(cand, "test")),
            ("seeds", champ.get("n_seeds", "—"), cand["n_seeds"])]
    champ_cfg = json.loads(champ.get("config", "{}"))
    config = record.get("model_config", record["config"])  # with search repeats: the best seed's repeat's
    for key in sorted(set(config) | set(champ_cfg)):
        a, b = champ_cfg.get(key, "—"), config.get(key, "—")
        rows.append((f"{'* ' if a != b and champ else ''}{key}", str(a), str(b)))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{name}"] + ["  " + "  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows]
    return "\n".join(lines)


def _read_final(root: Path, dataset: str, family: str) -> dict[str, Any]:
    return read_final(root, dataset, family, FINAL_FOR_PROMOTE)


def _nothing_to_promote(dataset: str, finals: dict[str, dict[str, Any]], current: Any | None) -> dict[str, Any]:
    """The decision for a dataset whose every family failed: no candidate, the alias stays."""
    why = "; ".join(f"{f}: {failed_detail(r)}" for f, r in finals.items())
    name = tracking.registered_name(dataset)
    version = int(current.version) if current is not None else None
    return {"dataset": dataset, "registered_model": name, "candidate_family": None, "candidate_version": None,
            "champion_version": version, "better_by_rule": False, "by_hand": False, "by_force": False,
            "dry_run": False, "alias_moved": False, "refused": "failed",
            "reason": f"nothing promoted: every family failed ({why})",
            "table": f"{name}\n  no candidate: every family of {dataset} failed"}


_ADVICE = {NOT_CONVERGED: "raise final.epochs or final.min_steps (or final.time_limit_s)",
           MOSTLY_FAILED: "fix what fails its trials (results/<dataset>/search/<family>.json `trials`)",
           NO_BETTER_THAN_TRIVIAL: "give it more search trials, epochs or seeds (reports/results.md has the baseline)"}


def reported_marks(root: Path, record: dict[str, Any]) -> list[Mark]:
    """The candidate's marks that only the report can judge (no_better_than_trivial needs the
    processed data), read from reports/metrics.json; none where the report has no cell for this
    record (not run yet, or run before this record was written: its test mean differs)."""
    if not (reports_dir(root) / "metrics.json").is_file():
        return []
    cell = datasets(read_metrics(root)).get(record["dataset"], {}).get(record["family"], {})
    if cell.get("test_mean") != record["test_mean"] or cell.get("n_seeds") != record["n_seeds"]:
        return []
    return [Mark(m["mark"], m["detail"]) for m in cell.get("marks", []) if m["mark"] == NO_BETTER_THAN_TRIVIAL]


def _refusal(record: dict[str, Any], force: bool, reported: list[Mark]) -> tuple[str | None, str]:
    """(why the candidate is refused, or None; a note for the reason). A candidate that is not
    converged (†), whose search mostly failed (§) or that the report found no better than the
    trivial baseline (∅, in `reported`) is refused unless forced: its score says more about the
    budget, or about the few trials that survived, than about the family."""
    marks = [m for m in (not_converged(record), mostly_failed(record.get("n_trials", 0), record.get("n_failed", 0)),
                         *reported) if m is not None]
    if not marks:
        return None, ""
    what = "; ".join(f"{m.mark.replace('_', ' ')} ({m.detail})" for m in marks)
    if force:
        return None, f"; {what}, promoted by --force"
    advice = " and ".join(_ADVICE[m.mark] for m in marks)
    return marks[0].mark, (f"refused: {record['family']} is {what}; {advice} and rerun `ctsweep final "
                           f"{record['dataset']} {record['family']}`, or move the alias anyway with "
                           f"`ctsweep promote --force`")


def promote_dataset(root: Path, dataset: str, families: list[str], p: PromoteParams,
                    family: str | None = None, force: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Decide on the alias of `dataset`'s registered model; returns the decision with its reason.

    `family`: a person's choice of candidate (instead of the best on validation among the families
    that did not fail); `family` or `force` moves the alias whatever the rule says, but only
    `force` moves it to a not-converged candidate (then `by_force` is true). A failed family is
    never a candidate; when every family failed nothing is promoted (`refused`: "failed").
    `dry_run`: register nothing, move nothing.
    """
    if family is not None and family not in families:
        raise CtsweepError(f"family {family!r} is not in params.yaml `families` for {dataset}; valid: {families}")
    finals = {f: _read_final(root, dataset, f) for f in ([family] if family else families)}
    if family is not None and is_failed(finals[family]):
        raise CtsweepError(f"refusing to promote {dataset}/{family}: every search trial failed "
                           f"({failed_detail(finals[family])}); it has no model")
    chosen = family or best_family(finals)
    mlflow.set_tracking_uri(tracking.tracking_uri(root))
    client = MlflowClient()
    name = tracking.registered_name(dataset)
    current = _champion(client, name)
    if chosen is None:
        return _nothing_to_promote(dataset, finals, current)
    record = finals[chosen]
    if record["n_seeds"] < p.seeds_required:
        raise CtsweepError(f"refusing to promote {dataset}/{chosen}: {record['n_seeds']} final seeds, "
                           f"promote.seeds_required is {p.seeds_required} (add seeds to final.seeds and rerun "
                           f"`ctsweep final {dataset} {chosen}`)")
    same = current is not None and current.tags.get("model_uri") == record["model_uri"]
    better, why = (False, "the candidate is already the champion") if same else judge(
        record, dict(current.tags) if current is not None else None, p)
    # a champion already is what it is: only a new candidate is judged
    refused, note = (None, "") if same else _refusal(record, force, reported_marks(root, record))
    asked = family is not None or force
    moved = not same and (better or asked) and not dry_run and refused is None
    decision = {"dataset": dataset, "registered_model": name, "candidate_family": chosen,
                "candidate_val_mean": record["val_mean"], "candidate_n_seeds": record["n_seeds"],
                "previous_champion_version": int(current.version) if current is not None else None,
                "previous_champion_family": current.tags.get("family") if current is not None else None,
                "previous_champion_val_mean": float(current.tags["val_mean"]) if current is not None else None,
                "better_by_rule": better, "reason": note if refused else why + note, "by_hand": asked,
                "by_force": force and bool(note) and refused is None, "refused": refused, "dry_run": dry_run,
                "alias_moved": moved, "table": side_by_side(name, current, record)}
    if dry_run or refused:  # a refused candidate is not registered either: nothing about it is to be used
        return {**decision, "candidate_version": None,
                "champion_version": int(current.version) if current is not None else None}
    version = _register(client, name, record, git_commit(root))
    if moved:
        client.set_registered_model_alias(name, tracking.ALIAS, version.version)
    if moved and decision["by_force"]:  # whoever loads the champion can see it was forced past a mark
        client.set_model_version_tag(name, version.version, "promoted_by_force", decision["reason"])
    return {**decision, "candidate_version": int(version.version),
            "champion_version": int(version.version) if moved or same else int(current.version)}


def promote(root: Path, datasets: list[str], families: list[str], p: PromoteParams) -> list[dict[str, Any]]:
    """Apply the rule to every dataset; writes reports/promotion.json."""
    decisions = [promote_dataset(root, d, families, p) for d in datasets]
    write_json(reports_dir(root) / "promotion.json", [{k: v for k, v in d.items() if k != "table"} for d in decisions])
    return decisions
