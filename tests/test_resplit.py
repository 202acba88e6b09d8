"""`final.validation: per_seed` (issue 29): each seed redraws its validation series from the
training and validation series together, stratified, with its own seed; test untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from pipeline.config import FinalParams, XorParams
from pipeline.data.contract import Dataset, Split, save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.data.resplit import per_seed_validation
from pipeline.final.stage import final
from pipeline.stores import tracking
from pipeline.stores.paths import processed_dir, search_result_path
from tests.test_step_budget import CONFIG


def _ids(split: Split) -> set[bytes]:
    """Each series by its observed values and times: the same series wherever it lands."""
    return {np.nan_to_num(x[m]).tobytes() + t[m].tobytes() for x, t, m in zip(split.x, split.t, split.mask)}


def test_each_seed_redraws_the_validation_series_and_keeps_test(tmp_path: Path) -> None:
    data = build_xor("x", XorParams(kind="xor", n_train=60, n_test=20, seed=3))
    pool = _ids(data.splits["train"]) | _ids(data.splits["val"])
    a, b, again = (per_seed_validation(data, s) for s in (0, 1, 0))
    for d in (a, b):
        assert len(d.splits["train"]) == len(data.splits["train"]) and len(d.splits["val"]) == len(data.splits["val"])
        assert _ids(d.splits["train"]) | _ids(d.splits["val"]) == pool
        assert not _ids(d.splits["train"]) & _ids(d.splits["val"])
        assert d.splits["test"] is data.splits["test"] and d.folder is None
        # stratified: each class keeps its share of the validation series (within one series)
        for c in (0, 1):
            assert abs((d.splits["val"].y == c).sum() - (data.splits["val"].y == c).sum()) <= 1
    assert _ids(a.splits["val"]) != _ids(b.splits["val"])
    assert _ids(a.splits["val"]) == _ids(again.splits["val"])  # the seed decides, nothing else


def test_splits_of_different_lengths_are_padded_as_the_contract_pads() -> None:
    data = build_xor("x", XorParams(kind="xor", n_train=40, n_test=10, seed=3))
    val = data.splits["val"]
    short = Split(val.x[:, :3], val.t[:, :3], val.mask[:, :3], val.y)
    joined = per_seed_validation(Dataset(data.meta, {**data.splits, "val": short}), 0)
    length = data.splits["train"].x.shape[1]
    for s in (joined.splits["train"], joined.splits["val"]):
        assert s.x.shape[1] == length and s.mask.shape[1] == length
        padded = ~s.mask
        assert np.isnan(s.x[padded]).all()
        # padding repeats the last valid time
        assert (np.diff(s.t, axis=1) >= 0).all()


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch, local_ray: None) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "tiny"), build_xor("tiny", XorParams(kind="xor", n_train=40, n_test=20, seed=3)))
    record = {"dataset": "tiny", "family": "cfc", "metric": "accuracy", "mode": "max", "best_config": CONFIG,
              "best_val": 0.5, "trial_seed": 1000, "n_trials": 1, "n_failed": 0, "status": "ok", "trials": []}
    path = search_result_path(project, "tiny", "cfc")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return project


@pytest.mark.slow
def test_the_final_stage_trains_each_seed_on_its_own_validation_series(root: Path) -> None:
    own = final(root, "tiny", "cfc", FinalParams(seeds=[1], epochs=1, validation="per_seed"))
    prepared = final(root, "tiny", "cfc", FinalParams(seeds=[1], epochs=1))
    assert own["status"] == prepared["status"] == "ok"
    assert own["validation"] == "per_seed" and prepared["validation"] == "prepared"
    # the same seed, other training and validation series: other losses
    [a], [b] = own["seeds"], prepared["seeds"]
    assert a["val_loss_curve"] != b["val_loss_curve"] and a["train_loss_curve"] != b["train_loss_curve"]
    client = MlflowClient(tracking.tracking_uri(root))
    assert client.get_run(a["mlflow_run_id"]).data.params["validation"] == "per_seed"
