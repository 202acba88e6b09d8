"""The search stage's failure paths: bad input fails before Ray starts; failing trials end as
FAIL in Optuna and FAILED in MLflow while the search runs its other trials."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import ray
from mlflow.tracking import MlflowClient

from pipeline import tracking
from pipeline.config import SearchParams, XorParams
from pipeline.data.contract import Dataset, Split, save_dataset
from pipeline.data.xor import build as build_xor
from pipeline.errors import ConfigError, MissingInputError, TrialFailedError
from pipeline.paths import processed_dir, search_result_path
from pipeline.search import search


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return project


def _poisoned_dataset(root: Path, name: str) -> None:
    """A dataset with infinite training values: in epoch 1 every NCDE trial's loss turns NaN
    (fixed-step solvers) or its adaptive solver's step size underflows (dopri5)."""
    d = build_xor(name, XorParams(kind="xor", n_train=120, n_test=40, seed=3))
    train = d.splits["train"]
    x = train.x.copy()
    x[:, 0, 0] = np.inf
    save_dataset(processed_dir(root, name), Dataset(d.meta, {**d.splits, "train": Split(x, train.t, train.mask, train.y)}))


def test_missing_dataset_names_the_producing_stage(root: Path) -> None:
    with pytest.raises(MissingInputError, match="ctsweep prepare xor_event"):
        search(root, "xor_event", "cfc", SearchParams())
    assert not ray.is_initialized()


def test_bad_space_fails_before_ray_starts(root: Path) -> None:
    save_dataset(processed_dir(root, "x"), build_xor("x", XorParams(kind="xor", n_train=40, n_test=10)))
    space = root / "search_spaces" / "cfc.yaml"
    space.write_text(space.read_text().replace("  hidden_size: {", "  hiddn_size: {", 1))
    with pytest.raises(ConfigError, match="hiddn_size"):
        search(root, "x", "cfc", SearchParams())
    assert not ray.is_initialized()
    assert not (root / "mlflow.db").exists()


@pytest.mark.slow
def test_nan_trials_fail_cleanly_and_the_search_goes_on(root: Path) -> None:
    _poisoned_dataset(root, "poisoned")
    p = SearchParams(num_samples=3, max_concurrent=2, epochs=2, n_startup_trials=1)
    with pytest.raises(TrialFailedError, match="every trial of poisoned/ncde failed.*TrialFailedError"):
        search(root, "poisoned", "ncde", p)
    assert not search_result_path(root, "poisoned", "ncde").exists()  # nothing half-written
    client = MlflowClient(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name("ctsweep/poisoned")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 3  # every trial ran although the first ones failed
    for r in children:
        # rk4 trials see a NaN loss; dopri5 trials see the solver's step size underflow first
        error = r.data.tags.get("error", "")
        assert r.info.status == "FAILED" and ("non-finite" in error or "solver failed" in error), error
    assert len(parent) == 1 and parent[0].info.status == "FAILED"
    assert json.loads(parent[0].data.tags["optuna_states"]) == {"FAIL": 3}  # Optuna told; none RUNNING


def test_the_searched_dataset_s_reference_runs_first_with_its_fixed_values(root: Path) -> None:
    """CfC on a dataset named physionet2012 searches Table S2's configuration first, with its
    class weight (fixed for that dataset only) and the paper's AdamW and lr decay."""
    save_dataset(processed_dir(root, "physionet2012"),
                 build_xor("physionet2012", XorParams(kind="xor", n_train=60, n_test=20, seed=3)))
    record = search(root, "physionet2012", "cfc", SearchParams(num_samples=1, max_concurrent=1, epochs=1))
    [trial] = record["trials"]
    assert record["reference"]["optimizer"] == "adamw" and record["reference"]["hidden_size"] == 256
    assert trial["status"] == "ok"
    assert trial["config"] == {**record["reference"], "pos_weight": 11.69}
    run = MlflowClient(tracking.tracking_uri(root)).get_run(trial["mlflow_run_id"])
    assert run.data.params["pos_weight"] == "11.69" and run.data.params["lr_decay"] == "0.9"  # recorded


def test_a_class_weight_on_regression_is_refused_before_ray(root: Path) -> None:
    import dataclasses

    d = build_xor("physionet2012", XorParams(kind="xor", n_train=40, n_test=10))
    meta = dataclasses.replace(d.meta, task="regression", metric="mse")
    save_dataset(processed_dir(root, "physionet2012"), Dataset(meta, d.splits))
    with pytest.raises(ConfigError, match=r"cfc.yaml: key `fixed.pos_weight`: is set but the task is regression"):
        search(root, "physionet2012", "cfc", SearchParams(num_samples=1, epochs=1))
    assert not ray.is_initialized()
