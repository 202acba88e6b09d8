"""Each family's MLflow parent run of a search: opened, or found again by the search's fingerprint
and resumed with its Ray experiment; closed with the outcome once the record is written.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from ray import tune

from pipeline.errors import TrialFailedError
from pipeline.stores import tracking
from pipeline.sweep import run_lookup
from pipeline.sweep.plans import FamilyPlan

COMPLETE_TAG = "search_complete"  # set once the search's outcome is final: never resumed after
ALL_FAILED_TAG = "all_trials_failed"  # on the parent run of a search whose every trial failed


def experiment_path(storage: str, datasets: list[str], keys: list[str]) -> str:
    """A new Ray experiment's path: named for its dataset and family when it has one of each, for
    the dataset and the set of families, or for the set of datasets and cells when datasets share it."""
    label = keys[0] if len(keys) == 1 else "families-" + hashlib.sha256(",".join(keys).encode()).hexdigest()[:8]
    head = datasets[0] if len(datasets) == 1 else f"{len(datasets)}-datasets"
    return f"{storage.rstrip('/')}/{head}__{label}__{time.strftime('%Y%m%d-%H%M%S')}"


Group = tuple[str, str, list[FamilyPlan]]  # (MLflow experiment id, dataset, its families' plans)


def open_parents(client: tracking.MlflowClient, groups: list[Group], storage: str, fresh: bool) -> tuple[str, bool]:
    """(Ray experiment path, resumed) of one Ray experiment holding every plan of `groups` (one
    group per dataset, each in its dataset's MLflow experiment); sets each plan's parent run.

    Resumed when every family's unfinished search with its fingerprint names the same Ray
    experiment and that experiment can be restored; otherwise a new experiment with a new parent
    run per family (an unfinished parent it replaces ends KILLED, tagged `superseded`).
    """
    entries = [(exp_id, plan, {"dataset": dataset, "family": plan.family, "stage": "search",
                               "search_fingerprint": plan.fingerprint})
               for exp_id, dataset, plans in groups for plan in plans]
    previous = [None if fresh else run_lookup.find_unfinished_parent(client, exp_id, tags, COMPLETE_TAG)
                for exp_id, _, tags in entries]
    paths = {run.data.tags.get("ray_experiment_path", "") for run in previous if run is not None}
    if None not in previous and len(paths) == 1:
        path = paths.pop()
        if path and tune.Tuner.can_restore(path):
            for (_, plan, _), run in zip(entries, previous):
                plan.parent, plan.resumed = run.info.run_id, True
                client.update_run(run.info.run_id, status="RUNNING")
                tracking.set_tags(client, run.info.run_id, {"attempts": int(run.data.tags.get("attempts", "1")) + 1,
                                                            tracking.RUN_LEVEL_TAG: tracking.PARENT_LEVEL})
                if "interrupted" in run.data.tags:  # it is running again; the interrupt stays in `attempts`
                    client.delete_tag(run.info.run_id, "interrupted")
            return path, True
    path = experiment_path(storage, [dataset for _, dataset, _ in groups], [plan.key for _, plan, _ in entries])
    for (exp_id, plan, tags), old in zip(entries, previous):
        if old is not None and old.info.status == "RUNNING":
            tracking.set_tags(client, old.info.run_id, {"superseded": "true"})
            tracking.terminate(client, old.info.run_id, "KILLED")
        plan.parent = tracking.start_run(client, exp_id, f"search/{plan.family}", {**tags, "ray_experiment_path": path})
    return path, False


def close_parent(client: tracking.MlflowClient, parent: str, record: dict[str, Any]) -> None:
    """End the parent run once its record is written: FINISHED, or FAILED with the reasons when
    every trial failed. Either way the outcome is final (COMPLETE_TAG): never resumed."""
    if record["status"] == "ok":
        tracking.set_tags(client, parent, {COMPLETE_TAG: "true"})
        tracking.finish(client, parent)
        return
    tracking.set_tags(client, parent, {COMPLETE_TAG: "true", ALL_FAILED_TAG: "true"})
    tracking.finish(client, parent, TrialFailedError(f"every trial failed: {'; '.join(record['errors'])}"))


def log_outcome(client: tracking.MlflowClient, parent: str, record: dict[str, Any]) -> None:
    """The outcome on the parent run, once the result file holds it: MLflow params cannot change,
    and an attempt whose result could not be written is resumed and summarised again."""
    counts = {"n_trials": record["n_trials"], "n_failed": record["n_failed"]}
    if record["status"] == "failed":  # no best value or configuration to log
        tracking.log_metrics(client, parent, counts)
        return
    tracking.log_metrics(client, parent, {"best_val": record["best_val"], **counts})
    tracking.log_params(client, parent, {"best." + k: v for k, v in record["best_config"].items()})
