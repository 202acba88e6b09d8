"""benchmarks/gpu/run.py: a quick run on the CPU (a logical GPU declared to a local Ray) through the
real search driver; packing 1 runs one trial on the GPU at a time (every k takes the same path),
the fill modes, at a quarter of a GPU a trial, search the families one after another and then at
once. A smoke test of the script, not a measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.gpu import run as gpu
from pipeline.config import XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_quick_run_packs_trials_and_fills_the_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(ROOT)  # Ray's workers import the benchmarks package from the driver's directory
    data = tmp_path / "data"
    save_dataset(data, build(gpu.DATASET, XorParams(kind="xor", n_train=48, n_test=16, seed=2)))
    report = gpu.main(["--quick", "--data", str(data), "--out", str(tmp_path / "out")])
    assert json.loads((tmp_path / "out" / "gpu.json").read_text())["modes"] == json.loads(json.dumps(report["modes"]))
    md = (tmp_path / "out" / "gpu.md").read_text()
    assert "QUICK SMOKE RUN" in md and "no CUDA device" in md
    modes = {m["mode"]: m for m in report["modes"]}
    assert list(modes) == ["pack1", "fill-before", "fill-after"]
    s = gpu.QUICK
    m = modes["pack1"]
    assert m["n_trials"] == s.trials == 2 and m["n_failed"] == 0 and m["gpu_per_trial"] == 1
    assert m["peak_running"] == 1  # each trial asks the whole GPU: the two ran one after the other
    assert m["trials_per_hour"] == pytest.approx(m["n_trials"] / m["wall_s"] * 3600)
    assert "Trials per hour against one trial per GPU: pack1: 1.00x." in md
    before, after = modes["fill-before"], modes["fill-after"]
    for m in (before, after):
        assert m["n_trials"] == len(s.fill_families) * s.fill_trials and m["n_failed"] == 0
        assert 0 < m["fill"] <= 1 and m["peak_running"] <= s.fill_slots
    assert before["families_at_once"] == 1  # one search after another
    assert before["sequential"] and not after["sequential"]
