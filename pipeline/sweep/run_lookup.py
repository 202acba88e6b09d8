"""Finding MLflow runs again after a restart: a trial's run by its Ray trial id, a search's
unfinished parent run by the fingerprint of what it searched, and the per-epoch history a
restored scheduler needs. MLflow is the one store every node and every later attempt can reach.
"""

from __future__ import annotations

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.stores.tracking import PARENT_TAG


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def find_child_run(client: MlflowClient, exp_id: str, parent_run_id: str, tag: str, value: str) -> Run | None:
    """The child run of `parent_run_id` tagged `tag = value` (the oldest if several), or None."""
    runs = client.search_runs(
        [exp_id], filter_string=f"tags.`{PARENT_TAG}` = {_quote(parent_run_id)} and tags.`{tag}` = {_quote(value)}",
        order_by=["attributes.start_time ASC"], max_results=10)
    return runs[0] if runs else None


def children(client: MlflowClient, exp_id: str, parent_run_id: str) -> list[Run]:
    """Every child run of a parent run."""
    return list(client.search_runs([exp_id], filter_string=f"tags.`{PARENT_TAG}` = {_quote(parent_run_id)}",
                                   max_results=50000))


def find_unfinished_parent(client: MlflowClient, exp_id: str, tags: dict[str, str], done_tag: str) -> Run | None:
    """The newest top-level run carrying all `tags` and not `done_tag`, or None."""
    where = " and ".join(f"tags.`{k}` = {_quote(v)}" for k, v in tags.items())
    for run in client.search_runs([exp_id], filter_string=where, order_by=["attributes.start_time DESC"],
                                  max_results=20):
        if PARENT_TAG not in run.data.tags:
            return None if run.data.tags.get(done_tag) == "true" else run
    return None


def metric_steps(client: MlflowClient, run_id: str, key: str) -> dict[int, float]:
    """{step: value} of one metric's history (the last value logged at a step wins)."""
    return {m.step: m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp)}


def logged_epochs(client: MlflowClient, run_id: str) -> int:
    """The last epoch a trial's run holds: 0 for a new run; for a run an earlier attempt of the
    trial logged into (a resumed search, a retried trial), the epochs it logged, which this attempt
    trains again from its checkpoint or from the start (an interrupt can come between an epoch's
    log and Tune seeing its report)."""
    return int(client.get_run(run_id).data.metrics.get("epoch", 0))


def close_interrupted(client: MlflowClient, exp_id: str, parent: str, reason: str) -> None:
    """An interrupted search or final stage: its RUNNING child runs end KILLED (their processes were
    stopped), and the parent ends KILLED without the complete tag, so the next run of the stage
    finds it again and resumes it (a trial's run is reopened when its trial restarts)."""
    for run in children(client, exp_id, parent):
        if run.info.status == "RUNNING":
            tracking.set_tags(client, run.info.run_id, {"interrupted": reason})
            tracking.terminate(client, run.info.run_id, "KILLED")
    tracking.set_tags(client, parent, {"interrupted": reason})
    tracking.terminate(client, parent, "KILLED")
