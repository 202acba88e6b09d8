"""Show your work (pipeline.reporting.show_your_work): the expected best of n trials against a hand
calculation on five values, its band and the search_not_saturated mark."""

from __future__ import annotations

import pytest

from pipeline.reporting.marks import NOT_SATURATED
from pipeline.reporting.show_your_work import curve, expected_max, not_saturated, trial_scores

FIVE = [0.3, 0.1, 0.5, 0.2, 0.4]


def test_the_expected_maximum_of_five_values_by_hand() -> None:
    # Sorted 0.1 .. 0.5; the best of n draws is the i-th value with probability (i/5)^n - ((i-1)/5)^n.
    # n = 1: the mean. n = 2: weights (2i - 1) / 25 = 1, 3, 5, 7, 9 (/25): (0.1 + 0.6 + 1.5 + 2.8 + 4.5) / 25.
    # n = 5: weights i^5 - (i-1)^5 = 1, 31, 211, 781, 2101 (/3125): (0.1 + 6.2 + 63.3 + 312.4 + 1050.5) / 3125.
    assert expected_max(FIVE, 1) == pytest.approx(0.3)
    assert expected_max(FIVE, 2) == pytest.approx(9.5 / 25)
    assert expected_max(FIVE, 5) == pytest.approx(1432.5 / 3125)
    # lower is better: the expected minimum, the mirror image
    assert expected_max(FIVE, 2, "min") == pytest.approx(0.6 - 9.5 / 25)
    assert expected_max([0.7], 3) == pytest.approx(0.7)


def test_the_curve_rises_to_near_the_best_and_its_band_holds_it_the_same_every_time() -> None:
    rows = curve(FIVE, "max")
    assert [r["n"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(a["expected"] <= b["expected"] for a, b in zip(rows, rows[1:]))
    assert all(r["low"] <= r["expected"] <= r["high"] for r in rows)
    assert curve(FIVE, "max") == rows  # a fixed bootstrap seed
    assert curve([0.5], "max") == []  # one trial compares nothing


def test_a_search_still_gaining_in_its_second_half_is_marked() -> None:
    # one trial of ten at 0.9, the rest 0.5: E[best of n] = 0.5 + 0.4 (1 - 0.9^n), 0.6638 at 5, 0.7605 at 10
    rising = curve([0.5] * 9 + [0.9], "max")
    mark = not_saturated(rising, "max", "accuracy")
    assert mark is not None and mark.mark == NOT_SATURATED
    assert mark.detail.startswith("expected best 66.38 at 5 trials, ") and mark.detail.endswith("at 10")
    flat = curve([0.80, 0.81, 0.80, 0.81, 0.80, 0.81], "max")  # no trial much better than another
    assert not_saturated(flat, "max", "accuracy") is None
    assert not_saturated([], "max", "accuracy") is None


def test_only_completed_trials_with_a_score_count() -> None:
    record = {"trials": [{"status": "ok", "best_val": 0.5}, {"status": "error", "best_val": 0.9},
                         {"status": "ok", "best_val": None}, {"status": "ok", "best_val": float("nan")},
                         {"status": "ok", "best_val": 0.7, "repeat": 1}]}
    assert trial_scores(record) == [0.5, 0.7]
