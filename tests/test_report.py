"""The report on hand-made final results: statistics, best family, table and plot data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pipeline.errors import MissingInputError
from pipeline.final import _summary
from pipeline.paths import final_result_path, search_result_path
from pipeline.report import best_family, report


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _final(family: str, vals: list[float], tests: list[float], mode: str = "max") -> dict:
    val_mean, val_std = _summary(vals)
    test_mean, test_std = _summary(tests)
    return {"dataset": "d", "family": family, "metric": "accuracy", "mode": mode, "n_seeds": len(vals),
            "val_mean": val_mean, "val_std": val_std, "test_mean": test_mean, "test_std": test_std,
            "params": 1234, "seconds_per_epoch": 0.5, "n_trials": 4, "n_failed": 1,
            "seeds": [{"seed": i, "curve": [0.5, v]} for i, v in enumerate(vals)]}


def test_summary_is_mean_and_sample_std() -> None:
    mean, std = _summary([0.9, 0.8, 1.0])
    assert mean == pytest.approx(0.9) and std == pytest.approx(0.1)
    assert _summary([0.7]) == (0.7, 0.0)


def test_best_family_uses_validation_and_direction() -> None:
    results = {"a": {"val_mean": 0.9, "test_mean": 0.1, "mode": "max"},
               "b": {"val_mean": 0.8, "test_mean": 0.99, "mode": "max"}}
    assert best_family(results) == "a"  # test never decides
    for r in results.values():
        r["mode"] = "min"
    assert best_family(results) == "b"


def test_report_writes_table_metrics_and_plot_data(tmp_path: Path) -> None:
    _write(final_result_path(tmp_path, "d", "a"), _final("a", [0.9, 0.8, 1.0], [0.85, 0.8, 0.9]))
    _write(final_result_path(tmp_path, "d", "b"), _final("b", [0.6, 0.7, 0.65], [0.6, 0.6, 0.6]))
    for f, lrs in (("a", [1e-3, 1e-2]), ("b", [3e-4])):
        _write(search_result_path(tmp_path, "d", f),
               {"trials": [{"config": {"lr": lr}, "best_val": 0.5} for lr in lrs] + [{"config": {"lr": 1}, "best_val": None}]})
    metrics = report(tmp_path, ["d"], ["a", "b"])
    assert metrics["d"]["a"]["val_mean"] == pytest.approx(0.9) and metrics["d"]["b"]["n_failed"] == 1
    table = (tmp_path / "reports" / "results.md").read_text()
    assert "| **a** | 85.00 ± 5.00 | 90.00 ± 10.00 | 3 | 1,234 | 0.50 | 4 (1) |" in table
    assert "| b | 60.00 ± 0.00 |" in table
    rows = list(csv.DictReader((tmp_path / "reports" / "lr" / "d.csv").open()))
    assert [(r["family"], float(r["lr"])) for r in rows] == [("a", 1e-3), ("a", 1e-2), ("b", 3e-4)]
    curves = list(csv.DictReader((tmp_path / "reports" / "curves" / "d.csv").open()))
    assert float(curves[1]["a"]) == pytest.approx(0.9) and len(curves) == 2


def test_missing_final_names_the_stage(tmp_path: Path) -> None:
    with pytest.raises(MissingInputError, match="ctsweep final d a"):
        report(tmp_path, ["d"], ["a"])
