"""benchmarks/cluster/trial_timeline.py: a one-slot search's time trial by trial, read from a real MLflow store."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from benchmarks.cluster.trial_timeline import summary, timeline

# Two trials on one slot, times in ms: each epoch's metric logged when the epoch (and its validation) ended.
TRIALS = [  # (name, run start, [(epoch_seconds, logged at)])
    ("trial-0/search/cfc", 1_000_000, [(2.0, 1_003_000), (2.5, 1_005_700)]),   # 1 s setup, 0.2 s between
    ("trial-1/search/cfc", 1_006_200, [(1.0, 1_007_400)]),                    # 0.5 s hand-over, 0.2 s setup
]


@pytest.fixture
def client(tmp_path: Path) -> MlflowClient:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("ctsweep/xor")
    tags = {"stage": "search", "run_level": "child"}
    for name, start, epochs in reversed(TRIALS):  # created out of order: the timeline sorts by start
        run = client.create_run(exp, start_time=start, tags=tags, run_name=name)
        for step, (seconds, at) in enumerate(epochs, 1):
            client.log_metric(run.info.run_id, "epoch_seconds", seconds, timestamp=at, step=step)
    client.create_run(exp, start_time=900_000, tags={"stage": "search", "run_level": "parent"}, run_name="parent")
    return client


def test_the_timeline_splits_each_trial_into_setup_training_epochs_and_hand_over(client: MlflowClient) -> None:
    rows = timeline(client, [e.experiment_id for e in client.search_experiments()])
    assert [r["run"] for r in rows] == ["trial-0/search/cfc", "trial-1/search/cfc"]  # the parent left out
    first, second = rows
    assert first["setup"] == pytest.approx(1.0) and first["training"] == pytest.approx(4.5)
    assert first["between_epochs"] == pytest.approx(0.2) and first["hand_over"] == 0.0
    assert second["hand_over"] == pytest.approx(0.5) and second["setup"] == pytest.approx(0.2)
    s = summary(rows)
    assert s["trials"] == 2 and s["epochs"] == 3 and s["in_trials_s"] == pytest.approx(1.2 + 5.5 + 0.2 + 0.5)
    assert s["hand_over_per_trial_s"] == pytest.approx(0.5)
