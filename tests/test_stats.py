"""Welch's t-test and ranking stability on hand-made numbers, checked against hand calculation."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from pipeline.reporting.stats import kendall_tau, ranking, welch


def test_welch_matches_the_hand_calculation() -> None:
    # a: mean 3, variance 2.5; b: mean 6, variance 10. se^2 = 2.5/5 + 10/5 = 2.5
    # t = -3 / sqrt(2.5) = -1.8974; df = 2.5^2 / (0.5^2/4 + 2^2/4) = 6.25 / 1.0625 = 5.8824
    w = welch([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
    assert w.diff == pytest.approx(-3.0)
    assert w.t == pytest.approx(-3 / math.sqrt(2.5))
    assert w.df == pytest.approx(6.25 / 1.0625)
    assert w.p == pytest.approx(0.1076, abs=5e-4)  # two-sided, t table at 5.88 df
    assert w.p == pytest.approx(sps.ttest_ind([1, 2, 3, 4, 5], [2, 4, 6, 8, 10], equal_var=False).pvalue)


def test_welch_separates_clear_and_unclear_differences() -> None:
    best = [0.95, 0.96, 0.94, 0.95, 0.96]
    assert welch([0.80, 0.81, 0.79, 0.80, 0.82], best).p < 1e-6  # far apart, tight seeds
    assert welch([0.90, 0.99, 0.85, 1.0, 0.97], best).p > 0.5   # same mean, noisy seeds


def test_welch_degenerate_cases() -> None:
    assert math.isnan(welch([0.5], [0.4, 0.6]).p)          # one seed: no variance estimate
    assert welch([0.5, 0.5], [0.5, 0.5]).p == 1.0           # identical constants
    assert math.isnan(welch([0.5, 0.5], [0.6, 0.6]).p)     # different constants: untestable


def test_ranking_and_kendall_tau() -> None:
    means = {"a": 0.9, "b": 0.7, "c": 0.8}
    assert ranking(means, "max") == ["a", "c", "b"]
    assert ranking(means, "min") == ["b", "c", "a"]
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == pytest.approx(1.0)
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == pytest.approx(-1.0)
    # one swapped pair out of three: (concordant 2 - discordant 1) / 3
    assert kendall_tau(["a", "b", "c"], ["b", "a", "c"]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="different names"):
        kendall_tau(["a", "b"], ["a", "c"])
