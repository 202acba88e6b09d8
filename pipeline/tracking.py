"""MLflow conventions: one experiment per dataset, parent runs per search or final evaluation,
a child run per trial or seed, tags dataset / family / stage / seed on every run.

Everything goes through an explicit MlflowClient with an absolute tracking URI, because Ray trial
processes change their working directory and share no fluent-API state with the driver.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

PARENT_TAG = "mlflow.parentRunId"


def tracking_uri(root: Path) -> str:
    """MLFLOW_TRACKING_URI if set, else an SQLite file at the project root (absolute path)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def experiment_id(root: Path, dataset: str) -> tuple[MlflowClient, str]:
    """Open the store (creating it here, once, before any trial starts) and the dataset's experiment.

    Many processes opening a fresh SQLite store at once race on its schema migration, so the
    driver creates it before Ray starts any trial. Artifacts go to an absolute folder beside it.
    """
    client = MlflowClient(tracking_uri(root))
    name = f"ctsweep/{dataset}"
    found = client.get_experiment_by_name(name)
    if found is not None:
        return client, found.experiment_id
    location = (root / "mlartifacts").as_uri() if "MLFLOW_TRACKING_URI" not in os.environ else None
    return client, client.create_experiment(name, artifact_location=location, tags={"dataset": dataset})


def start_run(client: MlflowClient, exp_id: str, name: str, tags: dict[str, Any],
              parent_run_id: str | None = None) -> str:
    """Create a run with string tags (and the parent link) and return its id."""
    all_tags = {k: str(v) for k, v in tags.items()}
    if parent_run_id:
        all_tags[PARENT_TAG] = parent_run_id
    return client.create_run(exp_id, run_name=name, tags=all_tags).info.run_id


def log_params(client: MlflowClient, run_id: str, params: dict[str, Any]) -> None:
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in sorted(params.items())])


def log_metrics(client: MlflowClient, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])


def set_tags(client: MlflowClient, run_id: str, tags: dict[str, Any]) -> None:
    client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def finish(client: MlflowClient, run_id: str, error: BaseException | None = None) -> None:
    """Mark a run FINISHED, or FAILED with the error message as a tag."""
    if error is not None:
        set_tags(client, run_id, {"error": f"{type(error).__name__}: {error}"[:4000]})
    client.set_terminated(run_id, "FAILED" if error is not None else "FINISHED")
