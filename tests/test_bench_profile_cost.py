"""benchmarks/papers/profile_cost.py on a tiny prepared XOR dataset: each (dataset, family) of a paper
profile measured in its own process at the profile's configuration, and the core-hours of the
profile's seeds and epochs from it. A smoke test of the script, not a measurement."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.papers import profile_cost
from pipeline.config import XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_each_family_is_timed_at_the_profile_s_configuration(tmp_path: Path) -> None:
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    save_dataset(tmp_path / "data" / "processed" / "xor_event",
                 build("xor_event", XorParams(kind="xor", n_train=300, n_test=40, seed=1, event_based=True)))
    rows = profile_cost.main(["--root", str(tmp_path), "--profile", "cfc-xor", "--datasets", "xor_event",
                              "--families", "cfc,cf_s", "--budget-s", "0.5", "--out", str(tmp_path / "out")])
    assert [(r["dataset"], r["family"]) for r in rows] == [("xor_event", "cf_s"), ("xor_event", "cfc")]
    for r in rows:
        assert "error" not in r, r
        # Table S1's configuration (the space's xor_event reference), the profile's 200 epochs and 5 seeds
        assert r["epochs"] == 200 and r["seeds"] == 5
        assert 1 <= r["batches_timed"] <= r["batches_per_epoch"] and r["batch_s"] > 0 and r["val_s"] > 0
        assert r["epoch_s"] == pytest.approx(r["batch_s"] * r["batches_per_epoch"] + r["val_s"])
        assert r["table_core_h"] == pytest.approx(r["epoch_s"] * 200 * 5 / 3600)
    cfc = rows[1]["config"]
    assert (cfc["batch_size"], cfc["hidden_size"], cfc["optimizer"]) == (128, 192, "rmsprop")  # Table S1, CfC
    assert json.loads((tmp_path / "out" / "profile_cost.json").read_text()) == json.loads(json.dumps(rows))
    assert "| cfc-xor | xor_event | cfc |" in (tmp_path / "out" / "profile_cost.md").read_text()
