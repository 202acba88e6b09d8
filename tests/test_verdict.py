"""The verdict line of a dataset in each of its forms, the statistics behind it (scipy's Welch,
statsmodels' TOST, Holm), and its place in results.md, metrics.json and `ctsweep status`."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from pipeline.reporting.stats import holm, tost, welch
from pipeline.reporting.verdict import dataset_verdict, seeds_needed, verdict

BEST = [0.960, 0.970, 0.950, 0.960, 0.965]
CLEARLY_WORSE = [0.900, 0.910, 0.905, 0.900, 0.910]
CLOSE = [0.961, 0.958, 0.962, 0.960, 0.959]
NOISY = [0.93, 0.99, 0.95, 0.97, 0.94]


def test_welch_is_scipys_and_keeps_the_constant_cases() -> None:
    w = welch(BEST, CLEARLY_WORSE)
    ref = sps.ttest_ind(BEST, CLEARLY_WORSE, equal_var=False)
    assert w.p == pytest.approx(ref.pvalue) and w.t == pytest.approx(ref.statistic) and w.df == pytest.approx(ref.df)
    assert welch([1.0, 1.0], [1.0, 1.0]).p == 1.0 and math.isnan(welch([1.0, 1.0], [0.5, 0.5]).p)
    assert math.isnan(welch([1.0], BEST).p)


def test_tost_shows_a_close_pair_equivalent_and_not_a_far_one() -> None:
    assert tost(BEST, CLOSE, 0.02) < 0.05
    assert tost(BEST, CLEARLY_WORSE, 0.02) > 0.5
    assert tost([1.0, 1.0], [1.0, 1.0], 0.01) == 0.0 and tost([1.0, 1.0], [0.9, 0.9], 0.01) == 1.0


def test_holm_adjusts_step_down() -> None:
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": math.nan})
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06) and math.isnan(adjusted["d"])


def test_separated_best() -> None:
    v = verdict({"x": BEST, "y": CLEARLY_WORSE}, "x", "accuracy", 0.01, classical=0.9595,
                classical_name="the classical reference 1-NN DTW")
    assert v.top == ["x"] and v.equivalent is None and v.classical == "inside"
    assert v.line.startswith("x is best, separated from every other family (largest Holm-adjusted Welch p < 0.001).")
    assert "1-NN DTW (95.95) lies inside x's 95 % interval" in v.line


def test_tied_and_equivalent() -> None:
    v = verdict({"x": BEST, "z": CLOSE, "y": CLEARLY_WORSE}, "x", "accuracy", 0.02, classical=0.99)
    assert v.top == ["x", "z"] and v.equivalent is True and v.classical == "above"
    assert v.line.startswith("x and z are tied at the top: none separated from x")
    assert "equivalent within ±2.00 points (TOST)" in v.line and "lies above" in v.line


def test_tied_not_shown_equivalent_says_how_many_seeds() -> None:
    v = verdict({"x": BEST, "z": NOISY}, "x", "accuracy", 0.005, classical=0.5)
    assert v.top == ["x", "z"] and v.equivalent is False and v.classical == "below"
    # the observed difference lies just inside the margin: the estimate runs away, and the line says so
    assert v.seeds_needed is not None and v.seeds_needed > 100
    assert ("not shown equivalent within ±0.50 points: more seeds would be needed (more than 100 seeds per family "
            "by the observed spread)") in v.line


def test_seeds_needed_grows_as_the_margin_shrinks() -> None:
    wide, narrow = seeds_needed(BEST, NOISY, 0.03, 0.05), seeds_needed(BEST, NOISY, 0.01, 0.05)
    assert wide is not None and narrow is not None and narrow > wide
    assert seeds_needed([1.0, 1.0], [1.0, 1.0], 0.01, 0.05) is None


def test_dataset_verdict_reads_the_race_and_the_classical_reference() -> None:
    def record(scores: list[float], race: dict | None = None) -> dict:
        return {"metric": "accuracy", "mode": "max", "seeds": [{"test": s} for s in scores],
                **({"race": race} if race else {})}

    ok = {"x": record(BEST, {"margin": 0.02, "alpha_per_look": 0.01}), "z": record(CLOSE)}
    reference = {"status": "ok", "metric": "accuracy", "test": 0.9, "classifier": "MiniRocket"}
    v = dataset_verdict(ok, "x", reference)
    assert v is not None and v.margin == 0.02 and v.alpha == 0.01 and v.classical == "below"
    assert "The classical reference MiniRocket (90.00) lies below" in v.line
    assert dataset_verdict(ok, None) is None
    assert v.as_json()["line"] == v.line


def test_the_race_line_says_how_each_pair_ended() -> None:
    from pipeline.reporting.verdict import race_line

    race = {"enabled": True, "margin": 0.02, "max_seeds": 8, "alpha": 0.05, "max_looks": 4, "looks": 3,
            "decisions": {"z": "equivalent", "y": "open at the cap"}}
    ok = {"x": {"n_seeds": 8, "race": race}, "z": {"n_seeds": 6}, "y": {"n_seeds": 8}}
    assert race_line(ok, "x") == ("Seeds raced (`final.race`: ±0.02, at most 8 seeds, alpha 0.05 over 4 looks): 3 "
                                  "look(s); against x (8 seeds): z equivalent (6 seeds); y open at the cap (8 seeds).")
    assert race_line({"x": {"n_seeds": 5, "race": {**race, "enabled": False}}}, "x") is None
    assert race_line(ok, None) is None


def test_a_reachable_estimate_is_given_as_a_count() -> None:
    v = verdict({"x": BEST, "z": [0.90, 0.99, 0.93, 0.97, 0.95]}, "x", "accuracy", 0.001)
    assert v.seeds_needed is not None and 5 < v.seeds_needed <= 100
    assert f"more seeds would be needed (about {v.seeds_needed} seeds per family by the observed spread)" in v.line
