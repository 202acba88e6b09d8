"""benchmarks/papers/next_step_leak.py: a per-step family's test error split by what follows each step,
and with the dropped steps' gaps hidden, from weights read back from a real MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from benchmarks.papers import next_step_leak
from benchmarks.papers.next_step_leak import DROPPED, KEPT, LAST, hidden_gaps, next_step_kind, summarise
from pipeline.data.contract import Dataset, Meta, Split, save_dataset
from pipeline.final.resume import save_state
from pipeline.stores import tracking
from pipeline.training.loop import build_model
from pipeline.training.metrics import score


def test_each_step_is_labelled_by_what_follows_it() -> None:
    t = np.array([[0, 1, 3, 4], [0, 1, 2, 2]], np.float32)
    mask = np.array([[True, True, True, True], [True, True, False, False]])
    assert next_step_kind(t, mask).tolist() == [[KEPT, DROPPED, KEPT, LAST], [KEPT, LAST, LAST, LAST]]
    assert hidden_gaps(t).tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    errors = np.array([[1.0, 3.0, 1.0, 5.0], [2.0, 4.0, 99.0, 99.0]])  # padding never scored
    found = summarise(errors, mask, next_step_kind(t, mask))
    assert found["mse"] == pytest.approx(16 / 6) and found["rmse"] == pytest.approx((16 / 6) ** 0.5)
    assert found[KEPT] == {"mse": pytest.approx(4 / 3), "share": pytest.approx(0.5)}
    assert found[DROPPED] == {"mse": 3.0, "share": pytest.approx(1 / 6)}
    assert found[LAST] == {"mse": 4.5, "share": pytest.approx(2 / 6)}


def _steps(rng: np.random.Generator, n: int, drop: bool) -> Split:
    """Per-step regression, 6 steps a series; with `drop`, a simulation step missing after step 2."""
    x = rng.normal(size=(n, 6, 2)).astype(np.float32)
    t = np.tile(np.arange(6, dtype=np.float32), (n, 1))
    if drop:
        t[:, 3:] += 1
    return Split(x=x, t=t, mask=np.ones((n, 6), bool), y=rng.normal(size=(n, 6, 2)).astype(np.float32))


def test_the_seeds_weights_come_back_from_mlflow_and_score_as_the_metric_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the project's own store, in tmp_path
    meta = Meta(name="steps", task="regression", per_step=True, output_size=2, metric="mse", channels=["a", "b"],
                source="hand-made")
    rng = np.random.default_rng(0)
    splits = {"train": _steps(rng, 4, False), "val": _steps(rng, 4, False), "test": _steps(rng, 10, True)}
    save_dataset(tmp_path / "data" / "processed" / "steps", Dataset(meta, splits))
    config = {"hidden_size": 4, "method": "euler", "lr": 0.01}  # lr: a training key, not the model's
    client = MlflowClient(tracking.tracking_uri(tmp_path))
    exp = client.create_experiment("ctsweep/steps")
    seeds, expected = [], []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = build_model("cdr_nde_heat", meta, 2, {"hidden_size": 4, "method": "euler"}).eval()
        run = client.create_run(exp).info.run_id
        save_state(client, run, model.state_dict())
        test = splits["test"]
        inputs = model.prepare_inputs(*(torch.from_numpy(a) for a in (test.x, test.t, test.mask)),
                                      hidden_size=4, method="euler")
        with torch.no_grad():
            expected.append(score(meta, model(**inputs), torch.from_numpy(test.y), torch.from_numpy(test.mask)))
        seeds.append({"seed": seed, "test": expected[-1], "mlflow_run_id": run})
    final = tmp_path / "results" / "steps" / "final" / "cdr_nde_heat.json"
    final.parent.mkdir(parents=True)
    final.write_text(json.dumps({"model_config": config, "seeds": seeds, "reads_later_steps": "the Laplacian"}))

    report = next_step_leak.main(["--root", str(tmp_path), "--dataset", "steps", "--family", "cdr_nde_heat",
                                  "--out", str(tmp_path / "out")])
    found = report["seeds"]
    assert [s["as prepared"]["mse"] for s in found] == pytest.approx(expected, rel=1e-5)
    assert found[0]["as prepared"][DROPPED]["share"] == pytest.approx(1 / 6)  # step 2 of 6: the gap after it is 2
    assert found[0]["as prepared"][LAST]["share"] == pytest.approx(1 / 6)
    # hiding the gap changes what the model computes: the depth-0 pass integrates over each gap
    assert all(s["gaps hidden"]["mse"] != pytest.approx(s["as prepared"]["mse"], rel=1e-6) for s in found)
    assert "| 0 | " in (tmp_path / "out" / "next_step_leak.md").read_text()
