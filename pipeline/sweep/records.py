"""What a search's trials came to: one record per trial from Ray Tune's results and MLflow, the
MLflow runs closed with the status Tune's outcome gives them, and the search's own record (the
best configuration, or why every trial failed). Used per family after a (multi-family) search.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.config import SearchParams
from pipeline.errors import TrialFailedError
from pipeline.stores import staleness, tracking
from pipeline.sweep import run_lookup, sensitivity
from pipeline.sweep.families import FamilyScheduler, FamilySearcher, without_family
from pipeline.sweep.plans import FamilyPlan
from pipeline.training.loop import is_better

METRIC = "val_metric"
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


def trial_records(results: list[Any], mode: str, seed: int, client: tracking.MlflowClient, exp_id: str,
                  parent: str) -> list[dict[str, Any]]:
    """One record per trial (Tune's `Result`s of one family): its config without the family key,
    best score, epochs, status and error, and MLflow run id."""
    records = []
    for result in results:
        history = result.metrics_dataframe
        values = ({} if history is None or METRIC not in history
                  else dict(zip(history["epoch"], history[METRIC])))  # by epoch: a retry may report one twice
        trial_id = result.metrics.get("trial_id") if result.metrics else None
        run_id = result.metrics.get("mlflow_run_id") if result.metrics else None
        if not run_id and trial_id:  # it never reported (failed in its first epoch): found by its trial id
            found = run_lookup.find_child_run(client, exp_id, parent, "ray_trial_id", trial_id)
            run_id = found.info.run_id if found else None
        if run_id:  # Tune's table of a trial retried from a checkpoint can lack the epochs before it;
            values.update(run_lookup.metric_steps(client, run_id, METRIC))  # its MLflow run has them all
        scores = [v for v in values.values() if v == v]
        best = (max if mode == "max" else min)(scores) if scores else None
        error = _trial_error(result, scores, run_id, client)
        records.append({
            "trial_id": trial_id, "config": without_family(result.config), "seed": seed, "best_val": best, "epochs": len(scores),
            "status": "error" if error else "ok", "error": error, "mlflow_run_id": run_id,
        })
    return records


def close_runs(client: tracking.MlflowClient, records: list[dict[str, Any]], epochs: int) -> None:
    """Give every trial's MLflow run the status and outcome Tune's outcome says.

    Tune stops a trial's process as soon as it reports its last epoch (max_t) or ASHA stops it,
    so the trial cannot close its own run. A trial that did not fail ends FINISHED: tagged
    `outcome: completed` when it reached `epochs`, else `outcome: stopped_early` (and
    `early_stopped`: ASHA, patience or the time limit stopped it; nothing went wrong, so MLflow's
    UI must not show it failed). Failed trials end FAILED, `outcome: failed`. Tune's view wins: a
    data-parallel trial interrupted by that stop may have marked its run FAILED on the way out
    although Tune counts it as a success.
    """
    for r in records:
        run_id = r["mlflow_run_id"]
        if not run_id:
            continue
        run = client.get_run(run_id)
        if r["status"] == "error":
            if run.info.status == "RUNNING":
                tracking.finish(client, run_id, RuntimeError(r["error"] or "trial process died"),
                                outcome=tracking.FAILED_OUTCOME)
            elif run.data.tags.get(tracking.OUTCOME_TAG) != tracking.FAILED_OUTCOME:
                tracking.set_tags(client, run_id, {tracking.OUTCOME_TAG: tracking.FAILED_OUTCOME})
            continue
        outcome = tracking.COMPLETED if r["epochs"] >= epochs else tracking.STOPPED_EARLY
        if run.info.status == "FINISHED" and run.data.tags.get(tracking.OUTCOME_TAG) == outcome:
            continue
        if "error" in run.data.tags:
            client.delete_tag(run_id, "error")
        if outcome == tracking.STOPPED_EARLY:
            tracking.set_tags(client, run_id, {"early_stopped": "true"})
        tracking.finish(client, run_id, outcome=outcome)


def close_orphans(client: tracking.MlflowClient, exp_id: str, parent: str, records: list[dict[str, Any]]) -> None:
    """Close the runs of trials the Ray experiment does not know.

    A driver killed between a trial's start and Tune's next snapshot of the experiment state
    leaves a run whose trial the restored experiment never had (its few seconds of work are
    lost; the restored search proposes another trial in its place). Such runs end KILLED,
    tagged `orphaned`, so no run stays RUNNING forever.
    """
    known = {r["trial_id"] for r in records}
    for run in run_lookup.children(client, exp_id, parent):
        if run.data.tags.get("ray_trial_id") not in known and run.info.status == "RUNNING":
            tracking.set_tags(client, run.info.run_id, {"orphaned": "true"})
            tracking.terminate(client, run.info.run_id, "KILLED")


def summarise(dataset: str, family: str, metric: str, mode: str, space: Any, p: SearchParams,
              records: list[dict[str, Any]], parent: str) -> dict[str, Any]:
    """The search record: "ok" with the best trial and the space, or "failed" with the reasons."""
    # By trial id, so a tie is decided the same way however Tune (or the grid of a resumed search)
    # lists the trials; a trial that failed later does not win on its earlier epochs.
    ordered = sorted(records, key=lambda r: str(r["trial_id"]))
    best = None
    for r in ordered:
        if r["status"] == "ok" and r["best_val"] is not None and is_better(r["best_val"], best and best["best_val"], mode):
            best = r
    if best is None:
        outcome = {"status": "failed", "best_config": None, "best_val": None, "errors": failure_reasons(ordered)}
    else:  # sampled values plus the fixed ones
        outcome = {"status": "ok", "best_config": dict(best["config"]), "best_val": best["best_val"],
                   "space": space_record(space)}
    return {
        "dataset": dataset, "family": family, "metric": metric, "mode": mode, **outcome,
        "trial_seed": p.trial_seed, "sampler_seed": p.sampler_seed,
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


def family_record(root: Path, dataset: str, p: SearchParams, meta: Any, plan: FamilyPlan,
                   client: tracking.MlflowClient, exp_id: str, path: str, searcher: FamilySearcher,
                   scheduler: FamilyScheduler, results: list[Any]) -> dict[str, Any]:
    """One family's record from its trials' results; closes their runs, persists its study."""
    family, parent = plan.family, plan.parent
    records = trial_records(results, meta.mode, p.trial_seed, client, exp_id, parent)
    close_runs(client, records, p.epochs)
    close_orphans(client, exp_id, parent, records)
    study_searcher = searcher.study_searcher(family)
    states = optuna_states(study_searcher)
    study = _persist(root, dataset, family, p, meta.metric, parent, study_searcher, records)  # failed searches too
    tracking.set_tags(client, parent, {"optuna_states": json.dumps(states, sort_keys=True), **study})
    record = summarise(dataset, family, meta.metric, meta.mode, plan.space, p, records, parent)
    record.update(optuna_states=states, ray_experiment_path=path, resumed=plan.resumed,
                  asha_rungs={f"{m:g}": n for m, n in sorted(scheduler.of(family).rung_sizes().items())}, **study,
                  importance=sensitivity.importances(study["optuna_storage"], study["optuna_study"],
                                                     min(p.asha.grace_period, p.epochs), p.sampler_seed),
                  searched_with=sorted(searcher.families), **{staleness.DIGEST_KEY: plan.digest})
    return record


def _persist(root: Path, dataset: str, family: str, p: SearchParams, metric: str, parent: str,
             searcher: Any, records: list[dict[str, Any]]) -> dict[str, str]:
    """Copy the family's study to the project's Optuna storage; returns where it went. Each
    trial carries its MLflow run id and Ray trial id, a failed one its failure reason too."""
    url = sensitivity.storage_url(root, p.optuna_storage)
    name = sensitivity.persist_study(searcher._ot_study, url, sensitivity.study_name(dataset, family, parent),
                                     {"dataset": dataset, "family": family, "metric": metric,
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
