"""The statistics behind "better": Welch's t-test between families and the stability of a ranking.

Five seeds per family are few: a difference of means says little without its spread. Welch's
t-test (unequal variances) asks whether two families' per-seed scores could share one mean;
the report prints its two-sided p-value for every family against the best one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats as sps


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean(a) - mean(b): t statistic, Welch-Satterthwaite degrees of freedom,
    two-sided p-value (NaN where undefined: fewer than two scores on a side, or no spread at all)."""

    diff: float
    t: float
    df: float
    p: float


def welch(a: list[float], b: list[float]) -> Welch:
    """Welch's unequal-variance t-test on two samples of per-seed scores (sample variances, ddof 1)."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return Welch(diff, math.nan, math.nan, math.nan)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:  # both constant: equal means are not different, unequal ones cannot be tested
        return Welch(diff, math.nan, math.nan, 1.0 if diff == 0 else math.nan)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return Welch(diff, t, df, float(2 * sps.t.sf(abs(t), df)))


def ranking(means: dict[str, float], mode: str) -> list[str]:
    """Names ordered best first ("max": larger is better); ties keep the given order."""
    return sorted(means, key=lambda k: -means[k] if mode == "max" else means[k])


def kendall_tau(first: list[str], second: list[str]) -> float:
    """Kendall's tau-b between two rankings of the same names (1: same order, -1: reversed)."""
    if sorted(first) != sorted(second):
        raise ValueError(f"rankings of different names: {first} vs {second}")
    if len(first) < 2:
        return 1.0
    position = {name: i for i, name in enumerate(second)}
    return float(sps.kendalltau(range(len(first)), [position[n] for n in first]).statistic)
