"""The convergence benchmark (benchmarks/budget/convergence.py): the long budget's plan, the final stage's
stopping rules, and a factor-2 run on a tiny project (one ok cell, one failed) through spawned workers.

Scores are not asserted against fixed values; the arithmetic on the numbers the run produced is.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.budget import convergence  # noqa: E402
from pipeline.config import XorParams  # noqa: E402
from pipeline.data.contract import save_dataset  # noqa: E402
from pipeline.data.kinds.xor import build as build_xor  # noqa: E402
from pipeline.stores.paths import final_result_path, processed_dir  # noqa: E402

CFC = {"lr": 0.01, "optimizer": "rmsprop", "lr_schedule": "none", "grad_clip": 1.0, "weight_decay": 0.0,
       "batch_size": 64, "hidden_size": 16, "backbone_units": 16, "backbone_layers": 1,
       "backbone_activation": "relu", "backbone_dropout": 0.0, "time_scale": 1.0, "init_gain": 1.0}


def _record(**changes) -> dict:
    seeds = [{"seed": s, "val": 0.5, "test": t, "curve": [0.5, 0.5], "epochs_trained": 2, "stop": "max_epochs"}
             for s, t in ((0, 0.52), (1, 0.48))]
    record = {"status": "ok", "dataset": "xor_event", "family": "cfc", "metric": "accuracy", "mode": "max",
              "config": CFC, "epochs": 2, "max_epochs": 2, "patience": None, "time_limit_s": None, "n_seeds": 2,
              "val_mean": 0.5, "val_std": 0.0, "test_mean": 0.5, "test_std": 0.0283, "seconds_per_epoch": 0.1,
              "seeds": seeds}
    return {**record, **changes}


@pytest.fixture
def tiny(project: Path) -> Path:
    """`project` with params.yaml on xor_event x (cfc, ncde), a small processed xor_event, cfc's final
    record ok with two seeds of 2 epochs and ncde's failed."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params.update(datasets=["xor_event"], families=["cfc", "ncde"])
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    save_dataset(processed_dir(project, "xor_event"),
                 build_xor("xor_event", XorParams(kind="xor", n_train=120, n_test=40, seed=1)))
    path = final_result_path(project, "xor_event", "cfc")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_record()))
    final_result_path(project, "xor_event", "ncde").write_text(json.dumps(
        {"status": "failed", "dataset": "xor_event", "family": "ncde", "metric": "accuracy", "mode": "max",
         "reason": "every search trial failed"}))
    return project


def test_plan_multiplies_the_budget() -> None:
    args = convergence.parse_args(["--factor", "4"])
    jobs = convergence.plan(_record(patience=2, time_limit_s=30.0), Path("/d"), args)
    assert [(j.seed, j.epochs, j.patience, j.time_limit_s) for j in jobs] == [(0, 8, 8, 120.0), (1, 8, 8, 120.0)]
    assert convergence.plan(_record(), Path("/d"), args)[0].patience is None  # no patience stays none
    quick = convergence.plan(_record(epochs=5, max_epochs=5, patience=3), Path("/d"),
                             convergence.parse_args(["--quick"]))
    assert [(j.seed, j.epochs, j.patience) for j in quick] == [(0, 2, 2)]  # 1 seed, factor 1, at most 2 epochs


def test_default_epochs_of_records_before_early_stopping() -> None:
    old = _record(seeds=[{"seed": 0, "test": 0.5, "curve": [0.4, 0.5, 0.6]}], epochs=5)
    assert convergence._default_epochs(old["seeds"][0], old) == 3


def test_factor_two_run_on_a_tiny_project(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = convergence.main(["--root", str(tiny), "--factor", "2", "--out", str(out)])
    saved = json.loads((out / "convergence.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["skipped"] == [{"dataset": "xor_event", "family": "ncde", "reason": "every search trial failed"}]
    [cell] = saved["cells"]
    assert (cell["dataset"], cell["family"], cell["long_max_epochs"], cell["long_patience"]) == \
        ("xor_event", "cfc", 4, None)
    assert [s["seed"] for s in cell["seeds"]] == [0, 1] and cell["long_n_seeds"] == 2
    assert all(s["status"] == "ok" and s["epochs_trained"] == 4 and len(s["curve"]) == 4 for s in cell["seeds"])
    assert cell["long_stops"] == {"max_epochs": 2} and cell["default_stops"] == {"max_epochs": 2}
    assert (cell["default_epochs_median"], cell["long_epochs_median"]) == (2, 4)
    tests = [s["test"] for s in cell["seeds"]]
    assert cell["long_test_mean"] == pytest.approx(sum(tests) / 2)
    assert cell["difference_points"] == pytest.approx((sum(tests) / 2 - 0.5) * 100)
    assert cell["within_tolerance"] == (abs(cell["difference_points"]) <= 3)
    markdown = (out / "convergence.md").read_text()
    assert "| xor_event | cfc | accuracy | 50.0 ± 2.8 | 2 of 2 (2 max_epochs) |" in markdown
    assert "Skipped: xor_event/ncde (every search trial failed)" in markdown


def test_a_stopped_run_resumes_from_its_seeds_log_and_seeds_limits_the_seeds(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = convergence.main(["--root", str(tiny), "--factor", "1", "--seeds", "1", "--out", str(out)])
    [cell] = first["cells"]
    assert [s["seed"] for s in cell["seeds"]] == [0]  # the record's first seed only
    log = (out / convergence.SEEDS_LOG).read_text().splitlines()
    assert len(log) == 1 and json.loads(log[0])["result"]["seed"] == 0
    # a second run over both seeds trains only seed 1, and keeps seed 0's result as logged
    second = convergence.main(["--root", str(tiny), "--factor", "1", "--out", str(out)])
    [again] = second["cells"]
    assert [s["seed"] for s in again["seeds"]] == [0, 1]
    assert again["seeds"][0] == {**cell["seeds"][0]}
    assert len((out / convergence.SEEDS_LOG).read_text().splitlines()) == 2
    # another budget is another job: nothing reused
    jobs = convergence.plan(_record(), Path("/d"), convergence.parse_args(["--factor", "2"]))
    assert convergence.job_key(jobs[0]) not in convergence.logged(out)
