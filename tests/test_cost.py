"""Cost beside score (pipeline.reporting.cost): training seconds by hand, the Pareto front on
hand-made points, and the report's cost plot data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pipeline.reporting.cost import cost_rows, pareto_front, training_seconds
from pipeline.reporting.report import report
from tests.test_report import project  # noqa: F401  (the hand-made results of test_report)


def _final(test_mean: float, seconds: list[float], epochs: list[int], mode: str = "max") -> dict:
    return {"mode": mode, "test_mean": test_mean, "test_std": 0.01, "seconds_per_epoch": 9.0,
            "seeds": [{"seconds_per_epoch": s, "curve": [0.5] * e} for s, e in zip(seconds, epochs)]}


def test_training_seconds_are_seconds_per_epoch_times_epochs_over_the_seeds() -> None:
    assert training_seconds(_final(0.8, [0.5, 1.0], [4, 3])) == pytest.approx(0.5 * 4 + 1.0 * 3)
    older = _final(0.8, [0.5], [4])
    del older["seeds"][0]["seconds_per_epoch"]  # a seed without its own: the record's median
    assert training_seconds(older) == pytest.approx(9.0 * 4)


def test_the_front_holds_the_families_no_other_beats_on_both() -> None:
    points = {"cheap": (10.0, 0.80), "best": (100.0, 0.95), "dominated": (50.0, 0.79), "tie": (10.0, 0.80)}
    assert pareto_front(points, "max") == {"cheap", "best", "tie"}  # equal points dominate neither
    # lower is better (mse): 0.2 at 50 s beats 0.3 at 60 s
    assert pareto_front({"a": (50.0, 0.2), "b": (60.0, 0.3), "c": (5.0, 0.9)}, "min") == {"a", "c"}
    rows = cost_rows({"a": _final(0.9, [1.0], [10]), "b": _final(0.7, [2.0], [10])})
    assert [(r["family"], r["training_seconds"], r["pareto"]) for r in rows] == [("a", 10.0, 1), ("b", 20.0, 0)]


def test_the_report_writes_the_cost_plot_its_data_and_metrics(project: Path) -> None:  # noqa: F811
    metrics = report(project, ["d"], ["a", "b"])
    with (project / "reports" / "cost" / "d.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["family"] for r in rows] == ["a", "b"]
    # test_report's records: 3 seeds of 2 epochs at 0.5 s each, and a is better on test
    assert all(float(r["training_seconds"]) == pytest.approx(3.0) for r in rows)
    assert [r["pareto"] for r in rows] == ["1", "0"]
    assert (project / "reports" / "plots" / "d_cost.png").stat().st_size > 1000
    # metrics.json: the epochs (3 seeds x 2), never the seconds, which differ from run to run
    assert metrics["d"]["a"]["epochs_trained"] == 6 and "training_seconds" not in metrics["d"]["a"]
    assert json.loads((project / "reports" / "metrics.json").read_text())["d"]["b"]["epochs_trained"] == 6
