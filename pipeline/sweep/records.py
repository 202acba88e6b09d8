"""What a search's trials came to: one record per trial from Ray Tune's results and MLflow, the
MLflow runs closed with the status Tune's outcome gives them, and the search's own record (the
best configuration, or why every trial failed). Used per family after a (multi-family) search.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pipeline.config import SearchParams
from pipeline.data.provenance import provenance_fields
from pipeline.errors import TrialFailedError
from pipeline.runtime import machine
from pipeline.stores import staleness, tracking
from pipeline.stores.database_url import masked
from pipeline.sweep import run_lookup, sensitivity
from pipeline.sweep.families import FamilyScheduler, FamilySearcher, repeat_of, trial_number_of, without_family
from pipeline.sweep.plans import FamilyPlan
from pipeline.training.selection import TIE_RULE, best_index, kept_epoch

METRIC = "val_metric"
LOSS = "val_loss"
MAX_REASONS = 10  # distinct failure reasons kept in a failed record


def _error_message(error: BaseException) -> str:
    """The trial's own exception, not Ray's wrapper around it (RayTaskError keeps it as cause)."""
    cause = getattr(error, "cause", None) or error
    lines = [line for line in str(cause).splitlines() if line.strip()]
    name, last = type(cause).__name__, lines[-1] if lines else ""
    # A traceback's last line already names the type ("TrialFailedError: ..."): not twice.
    return (last if last.startswith(f"{name}: ") else f"{name}: {last}")[:300]


def _trial_error(result: Any, scores: list[float], run_id: str | None, client: tracking.MlflowClient) -> str | None:
    """Why a trial failed, or None when it did not.

    Ray's error first. A trial that reported no score failed too, even when Ray hands back no
    error: Ray reads a trial's error back from its error file in the Tune storage, a copy the
    driver syncs from its staging folder, and returns None where that copy is missing; the
    trial's MLflow run keeps the error it closed with.
    """
    if result.error:
        return _error_message(result.error)
    if scores:
        return None
    logged = client.get_run(run_id).data.tags.get("error") if run_id else None
    return (logged or "the trial ended without reporting an epoch (no error recorded)")[:300]


def _by_epoch(history: Any, key: str) -> dict[int, float]:
    """{epoch: value} of one reported key from Tune's table of a trial (a retry may report one twice)."""
    if history is None or key not in history:
        return {}
    return {int(e): float(v) for e, v in zip(history["epoch"], history[key])}


def trial_records(results: list[Any], mode: str, seed: int, client: tracking.MlflowClient, exp_id: str,
                  parent: str, threads: int = 1) -> list[dict[str, Any]]:
    """One record per trial (Tune's `Result`s of one search), in trial-number order: its config
    without the bookkeeping keys, its number and repeat, its kept epoch (pipeline.training.selection)
    with the validation score and loss there, epochs, status and error, and MLflow run id.
    `threads`: trials read from MLflow at once (each trial's metric histories are round trips)."""
    return sorted(each_in_threads(lambda result: _trial_record(result, mode, seed, client, exp_id, parent), results, threads),
                  key=_trial_order)


def _trial_record(result: Any, mode: str, seed: int, client: tracking.MlflowClient, exp_id: str,
                  parent: str) -> dict[str, Any]:
    history = result.metrics_dataframe
    values, losses = _by_epoch(history, METRIC), _by_epoch(history, LOSS)
    trial_id = result.metrics.get("trial_id") if result.metrics else None
    run_id = result.metrics.get("mlflow_run_id") if result.metrics else None
    if not run_id and trial_id:  # it never reported (failed in its first epoch): found by its trial id
        found = run_lookup.find_child_run(client, exp_id, parent, "ray_trial_id", trial_id)
        run_id = found.info.run_id if found else None
    if run_id:  # Tune's table of a trial retried from a checkpoint can lack the epochs before it;
        values.update(run_lookup.metric_steps(client, run_id, METRIC))  # its MLflow run has them all
        losses.update(run_lookup.metric_steps(client, run_id, LOSS))
    values = {e: v for e, v in values.items() if v == v}
    steps = _by_epoch(history, "steps")  # optimiser steps so far, per epoch (absent before issue 29)
    kept = kept_epoch(values, losses, mode)
    error = _trial_error(result, list(values.values()), run_id, client)
    return {
        "trial_id": trial_id, "number": trial_number_of(result.config), "repeat": repeat_of(result.config),
        "config": without_family(result.config), "seed": seed + repeat_of(result.config),  # repeat r: seed + r
        "best_val": None if kept is None else values[kept], "best_val_loss": losses.get(kept),
        "best_epoch": kept, "epochs": len(values), "steps": int(max(steps.values())) if steps else None,
        "status": "error" if error else "ok", "error": error,
        "mlflow_run_id": run_id,
    }


def each_in_threads(fn: Callable[[Any], Any], items: Sequence[Any], threads: int) -> list[Any]:
    """[fn(item) for item in items], in up to `threads` threads (one: in this one), in order."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="ctsweep-records") as pool:
        return list(pool.map(fn, items))


def _trial_order(record: dict[str, Any]) -> tuple[int, int, str]:
    """Repeat, then Optuna trial number; a trial without a number (an experiment started before it
    was kept) after the numbered ones, by its Ray trial id."""
    number = record.get("number")
    return record.get("repeat", 0), (1 << 30) if number is None else number, str(record["trial_id"])


def close_runs(client: tracking.MlflowClient, records: list[dict[str, Any]], epochs: int,
               runs: dict[str, Any] | None = None, threads: int = 1) -> None:
    """Give every trial's MLflow run the status and outcome Tune's outcome says.

    Tune stops a trial's process as soon as it reports its last epoch (max_t) or ASHA stops it,
    so the trial cannot close its own run. A trial that did not fail ends FINISHED: tagged
    `outcome: completed` when it reached `epochs`, else `outcome: stopped_early` (and
    `early_stopped`: ASHA, patience or the time limit stopped it; nothing went wrong, so MLflow's
    UI must not show it failed). Failed trials end FAILED, `outcome: failed`. Tune's view wins: a
    data-parallel trial interrupted by that stop may have marked its run FAILED on the way out
    although Tune counts it as a success. `runs`: {run id: the run as read now} (one search for
    the family's runs instead of one read per trial; a run missing from it is read alone);
    `threads`: runs closed at once.
    """
    def close(r: dict[str, Any]) -> None:
        run_id = r["mlflow_run_id"]
        if not run_id:
            return
        run = (runs or {}).get(run_id) or client.get_run(run_id)
        # the wall-clock guard cut it: its epochs depend on the machine's load (docs/explanation/reproducibility.md)
        r["time_limited"] = run.data.tags.get("time_limited") == "true"
        if r["status"] == "error":
            if run.info.status == "RUNNING":
                tracking.finish(client, run_id, RuntimeError(r["error"] or "trial process died"),
                                outcome=tracking.FAILED_OUTCOME)
            elif run.data.tags.get(tracking.OUTCOME_TAG) != tracking.FAILED_OUTCOME:
                tracking.set_tags(client, run_id, {tracking.OUTCOME_TAG: tracking.FAILED_OUTCOME})
            return
        outcome = tracking.COMPLETED if r["epochs"] >= epochs else tracking.STOPPED_EARLY
        if run.info.status == "FINISHED" and run.data.tags.get(tracking.OUTCOME_TAG) == outcome:
            return
        if "error" in run.data.tags:
            client.delete_tag(run_id, "error")
        # early_stopped in the same write as the outcome (one round trip fewer a trial)
        tracking.finish(client, run_id, outcome=outcome,
                        tags={"early_stopped": "true"} if outcome == tracking.STOPPED_EARLY else None)

    each_in_threads(close, records, threads)


def close_orphans(client: tracking.MlflowClient, exp_id: str, parent: str, records: list[dict[str, Any]],
                  runs: list[Any] | None = None) -> None:
    """Close the runs of trials the Ray experiment does not know.

    A driver killed between a trial's start and Tune's next snapshot of the experiment state
    leaves a run whose trial the restored experiment never had (its few seconds of work are
    lost; the restored search proposes another trial in its place). Such runs end KILLED,
    tagged `orphaned`, so no run stays RUNNING forever. `runs`: the parent's child runs, when
    already read.
    """
    known = {r["trial_id"] for r in records}
    for run in run_lookup.children(client, exp_id, parent) if runs is None else runs:
        if run.data.tags.get("ray_trial_id") not in known and run.info.status == "RUNNING":
            tracking.set_tags(client, run.info.run_id, {"orphaned": "true"})
            tracking.terminate(client, run.info.run_id, "KILLED")


def best_trial(records: list[dict[str, Any]], mode: str) -> dict[str, Any] | None:
    """The best of a search's trials by the selection rule (TIE_RULE): its kept validation score,
    then its validation loss there, then the lower trial number. A failed trial never wins, even
    on the epochs it reported before failing. `records` in trial-number order (trial_records)."""
    ok = [r for r in records if r["status"] == "ok" and r["best_val"] is not None]
    i = best_index([(r["best_val"], r.get("best_val_loss")) for r in ok], mode)
    return None if i is None else ok[i]


def summarise(dataset: str, family: str, metric: str, mode: str, space: Any, p: SearchParams,
              records: list[dict[str, Any]], parent: str, repeat: int = 0) -> dict[str, Any]:
    """One search's record: "ok" with the best trial and the space, or "failed" with the reasons."""
    best = best_trial(records, mode)
    if best is None:
        outcome = {"status": "failed", "best_config": None, "best_val": None, "errors": failure_reasons(records)}
    else:  # sampled values plus the fixed ones
        outcome = {"status": "ok", "best_config": dict(best["config"]), "best_val": best["best_val"],
                   "best_val_loss": best.get("best_val_loss"), "best_trial": best.get("number"),
                   "space": space_record(space)}
    sampler_seed, trial_seed = p.sampler_seed + repeat, p.trial_seed + repeat
    return {
        "dataset": dataset, "family": family, "metric": metric, "mode": mode, **outcome,
        "trial_seed": trial_seed, "sampler_seed": sampler_seed, "repeat": repeat, "selection": TIE_RULE,
        "min_steps": p.min_steps,
        **({"saturation": p.saturation.model_dump()} if p.saturation.enabled else {}),
        "n_trials": len(records), "n_failed": sum(r["status"] == "error" for r in records),
        "reference": space.reference_for(dataset), "mlflow_parent_run_id": parent, "trials": records,
    }


def failure_reasons(records: list[dict[str, Any]]) -> list[str]:
    """The distinct errors of the failed trials, most frequent first, as "REASON (k trials)"
    (at most MAX_REASONS). Our own TrialFailedError's type name says nothing a user needs."""
    reasons = Counter(r["error"].removeprefix(f"{TrialFailedError.__name__}: ")
                      for r in records if r["status"] == "error" and r["error"])
    return [f"{reason} ({n} trial{'' if n == 1 else 's'})" for reason, n in reasons.most_common(MAX_REASONS)]


def space_record(space: Any) -> dict[str, dict[str, Any]]:
    """The searched keys' ranges (fixed keys are not searched): a reader can tell a best value
    that sits on a bound of its range without the space file as it was then."""
    ranges: dict[str, dict[str, Any]] = {}
    for name, spec in space.params.items():
        if spec.distribution == "categorical":
            ranges[name] = {"type": "categorical", "choices": list(spec.choices)}
        elif spec.distribution == "int":
            ranges[name] = {"type": "int", "low": int(spec.low), "high": int(spec.high), "log": spec.log,
                            "step": spec.step}
        else:
            ranges[name] = {"type": "float", "low": spec.low, "high": spec.high,
                            "log": spec.distribution == "loguniform"}
    return ranges


def optuna_states(searcher: Any) -> dict[str, int]:
    """How Optuna saw the trials: failed trials must be FAIL, never left RUNNING."""
    states: dict[str, int] = {}
    for trial in searcher._ot_study.get_trials(deepcopy=False):  # the study OptunaSearch told
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    return states


RECORD_WORKERS = 8  # families whose records are built at once when both stores are database servers
# A family's trials read and closed at once in its record, when both stores are database servers:
# each trial is 3-4 round trips to `mlflow server` (its metric histories, its run's outcome and
# status), 0.3-0.5 s a trial one after another, most of a family's record (measured 2026-11-28,
# 32-trial families through `mlflow server` on PostgreSQL).
TRIAL_THREADS = 8


def record_workers(optuna_url: str, tracking_uri: str, families: int) -> int:
    """How many families' records (closing their trials' MLflow runs, copying their Optuna
    studies, fANOVA) to build at once after a search. Copying a study and closing runs are
    round trips to the stores: after a 12-family search through `mlflow server` on PostgreSQL
    they took most of the 214 s between the last trial's end and the search's return, one family
    after another, with every trial slot idle (benchmarks/results/fill-postgres-r8-flight2).
    A database server takes them at once; an SQLite file has one writer, so there one at a time."""
    one_writer = [u for u in (optuna_url, tracking_uri) if u.startswith("sqlite") or "://" not in u]
    return 1 if one_writer else max(1, min(RECORD_WORKERS, families))


def family_record(root: Path, dataset: str, p: SearchParams, meta: Any, plan: FamilyPlan,
                   client: tracking.MlflowClient, exp_id: str, path: str, searcher: FamilySearcher,
                   scheduler: FamilyScheduler, results: list[Any]) -> dict[str, Any]:
    """One family's record from its trials' results (every repeat); closes their runs, persists
    each repeat's study.

    The record's top level is the first repeat that found a configuration (repeat 0 unless it
    failed), as a single search's record always was; with `search.repeats` > 1, `repeats` lists
    every repeat's best (the final stage trains each) and `trials` holds every repeat's trials.
    """
    parent = plan.parent
    threads = record_workers(sensitivity.storage_url(root, p.optuna_storage), client.tracking_uri, TRIAL_THREADS)
    records = trial_records(results, meta.mode, p.trial_seed, client, exp_id, parent, threads)
    runs = run_lookup.children(client, exp_id, parent)  # read after every trial ended: their last state
    machines = _with_machines(records, {run.info.run_id: run for run in runs})
    close_runs(client, records, p.epochs, {run.info.run_id: run for run in runs}, threads)
    close_orphans(client, exp_id, parent, records, runs)
    repeats = [_repeat_record(root, dataset, p, meta, plan, searcher, scheduler, repeat,
                              [r for r in records if r["repeat"] == repeat], client)
               for repeat in range(p.repeats)]
    head = next((r for r in repeats if r["status"] == "ok"), repeats[0])
    record = {**{k: v for k, v in head.items() if k != "trials"}, "trials": records,
              "n_trials": len(records), "n_failed": sum(r["status"] == "error" for r in records)}
    if p.repeats > 1:
        record["repeats"] = [{k: v for k, v in r.items() if k in REPEAT_KEYS} for r in repeats]
        if record["status"] == "failed":  # every repeat failed: the reasons of them all
            record["errors"] = failure_reasons(records)
    record.update(machines=machines, ray_experiment_path=path, resumed=plan.resumed,
                  searched_with=sorted(searcher.families),
                  **provenance_fields(meta), **{staleness.DIGEST_KEY: plan.digest})
    return record


def _with_machines(records: list[dict[str, Any]], runs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Give each trial record the machine (its fingerprint) and threads its run was tagged with
    (pipeline.runtime.machine; None for a run without the tags) and return the machines named."""
    described = {r["mlflow_run_id"]: machine.from_tags(runs[r["mlflow_run_id"]].data.tags)
                 if r.get("mlflow_run_id") in runs else (None, None) for r in records}
    machines = machine.Machines([d for d, _ in described.values()])
    for r in records:
        found, threads = described[r.get("mlflow_run_id")]
        r.update(machine=machines.name(found), threads=threads)
    return machines.described


# What the record keeps of each repeat (its trials are in the record's `trials`, tagged `repeat`).
REPEAT_KEYS = ("repeat", "status", "best_config", "best_val", "best_val_loss", "best_trial", "sampler_seed",
               "trial_seed", "n_trials", "n_failed", "errors", "optuna_study", "optuna_states", "asha_rungs")


def _repeat_record(root: Path, dataset: str, p: SearchParams, meta: Any, plan: FamilyPlan, searcher: FamilySearcher,
                   scheduler: FamilyScheduler, repeat: int, records: list[dict[str, Any]],
                   client: tracking.MlflowClient) -> dict[str, Any]:
    """One repeat's search record: its best trial, its study persisted, its ASHA rungs."""
    family, parent = plan.family, plan.parent
    study_searcher = searcher.study_searcher(plan.key, repeat)
    states = optuna_states(study_searcher)
    study = _persist(root, dataset, family, p, meta.metric, parent, study_searcher, records, repeat)  # failed too
    # A password typed into `search.optuna_storage` stays out of the record and the tags (shown as ***)
    shown = {**study, "optuna_storage": masked(study["optuna_storage"])}
    if repeat == 0:
        tracking.set_tags(client, parent, {"optuna_states": json.dumps(states, sort_keys=True), **shown})
    record = summarise(dataset, family, meta.metric, meta.mode, plan.space, p, records, parent, repeat)
    record.update(optuna_states=states, **shown,
                  asha_rungs={f"{m:g}": n for m, n in sorted(scheduler.of(plan.key, repeat).rung_sizes().items())},
                  importance=sensitivity.importances(study["optuna_storage"], study["optuna_study"],
                                                     min(p.asha.grace_period, p.epochs), p.sampler_seed + repeat))
    return record


def _persist(root: Path, dataset: str, family: str, p: SearchParams, metric: str, parent: str,
             searcher: Any, records: list[dict[str, Any]], repeat: int = 0) -> dict[str, str]:
    """Copy one repeat's study to the project's Optuna storage; returns where it went. Each
    trial carries its MLflow run id and Ray trial id, a failed one its failure reason too."""
    url = sensitivity.storage_url(root, p.optuna_storage)
    label = family if repeat == 0 else f"{family}-repeat-{repeat}"
    name = sensitivity.persist_study(searcher._ot_study, url, sensitivity.study_name(dataset, label, parent),
                                     {"dataset": dataset, "family": family, "metric": metric, "repeat": repeat,
                                      "mlflow_parent_run_id": parent, "epochs": p.epochs},
                                     _trial_attrs(searcher, records))
    return {"optuna_storage": url, "optuna_study": name}


def _trial_attrs(searcher: Any, records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """{Optuna trial number: user attributes} from the trials' records (by their Ray trial id)."""
    attrs: dict[int, dict[str, Any]] = {}
    for r in records:
        number = searcher.trial_number(r["trial_id"]) if r["trial_id"] else None
        if number is None:
            continue
        attrs[number] = {"ray_trial_id": r["trial_id"],
                         **({"mlflow_run_id": r["mlflow_run_id"]} if r["mlflow_run_id"] else {}),
                         **({"fail_reason": r["error"]} if r["status"] == "error" and r["error"] else {})}
    return attrs


FAILED_SUFFIX = ".failed.json"  # beside a kept good result: a later search whose every trial failed


def failed_path(out: Path) -> Path:
    """Where a search whose every trial failed is written when `out` holds a good result:
    results/<dataset>/search/<family>.failed.json (a family name has no dot: never another's)."""
    return out.with_name(out.name.removesuffix(".json") + FAILED_SUFFIX)


def kept_result(out: Path) -> bool:
    """Whether the result file `out` holds a good result (an earlier search's best configuration)
    that a failed search must not replace (issue 31). A missing, unreadable or failed one may be."""
    try:
        record = json.loads(out.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("status", "ok") == "ok" and record.get("best_config") is not None
