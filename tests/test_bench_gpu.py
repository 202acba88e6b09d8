"""benchmarks/gpu/run.py: a quick run on the CPU (a logical GPU declared to a local Ray) through the
real search driver; packing k puts at most k trials on the GPU at once, the fill modes search
the families one after another and then at once. A smoke test of the script, not a measurement."""

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
    assert list(modes) == ["pack1", "pack2", "fill-before", "fill-after"]
    s = gpu.QUICK
    for k in s.packing:
        m = modes[f"pack{k}"]
        assert m["n_trials"] == s.trials and m["n_failed"] == 0 and m["gpu_per_trial"] == 1 / k
        assert 1 <= m["peak_running"] <= k  # a trial asking 1/k GPU: at most k at once on one GPU
        assert m["trials_per_hour"] == pytest.approx(m["n_trials"] / m["wall_s"] * 3600)
    before, after = modes["fill-before"], modes["fill-after"]
    for m in (before, after):
        assert m["n_trials"] == len(s.fill_families) * s.fill_trials and m["n_failed"] == 0
        assert 0 < m["fill"] <= 1 and m["peak_running"] <= s.fill_slots
    assert before["families_at_once"] == 1  # one search after another
    assert before["sequential"] and not after["sequential"]
