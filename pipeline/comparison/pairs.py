"""A family against the best one, on per-seed scores: Welch's t-test (scipy), two one-sided tests
for equivalence within a margin (TOST, statsmodels), and Holm's step-down correction across the
pairs (statsmodels). The verdict (pipeline.reporting.verdict) and the final stage's race
(pipeline.final.race) decide with the same function, `decide`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats as sps

from pipeline.runtime.collector import young_objects_only


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean(a) - mean(b): t statistic, Welch-Satterthwaite degrees of freedom,
    two-sided p-value (NaN where undefined: fewer than two scores on a side, or no spread at all)."""

    diff: float
    t: float
    df: float
    p: float


def welch(a: list[float], b: list[float]) -> Welch:
    """Welch's unequal-variance t-test on two samples of per-seed scores (scipy's
    `ttest_ind(equal_var=False)`: sample variances, Welch-Satterthwaite degrees of freedom)."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return Welch(diff, math.nan, math.nan, math.nan)
    if statistics.variance(a) + statistics.variance(b) == 0:
        # both constant: scipy gives NaN; equal means are not different, unequal ones cannot be tested
        return Welch(diff, math.nan, math.nan, 1.0 if diff == 0 else math.nan)
    result = sps.ttest_ind(a, b, equal_var=False)
    return Welch(diff, float(result.statistic), float(result.df), float(result.pvalue))


def tost(a: list[float], b: list[float], margin: float) -> float:
    """The p-value of two one-sided Welch tests (TOST) that mean(a) - mean(b) lies within
    (-margin, +margin): small when the two are shown equivalent within the margin (statsmodels'
    `ttost_ind`, unequal variances). NaN for fewer than two scores on a side. Both samples
    constant: 0 when the difference lies inside the margin, else 1 (no spread to test)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if statistics.variance(a) + statistics.variance(b) == 0:
        return 0.0 if abs(statistics.fmean(a) - statistics.fmean(b)) < margin else 1.0
    from statsmodels.stats.weightstats import ttost_ind  # imported here: 0.5 s that only this test needs

    return float(ttost_ind(a, b, -margin, margin, usevar="unequal")[0])


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of a family of p-values (NaN stays NaN and is not counted):
    reject where the adjusted value is below alpha and the family-wise error stays at alpha."""
    known = {k: v for k, v in pvalues.items() if not math.isnan(v)}
    adjusted = dict.fromkeys(pvalues, math.nan)
    if known:
        # statsmodels 0.15's Holm branch ends with gc.collect(), a walk of the whole heap on every
        # call (pipeline/runtime/collector.py, young_objects_only)
        from statsmodels.stats.multitest import multipletests

        names = list(known)
        with young_objects_only():
            corrected = multipletests([known[n] for n in names], method="holm")[1]
        for name, value in zip(names, corrected):
            adjusted[name] = float(value)
    return adjusted


def decide(scores: dict[str, list[float]], best: str, margin: float, alpha: float = 0.05
           ) -> tuple[dict[str, float], dict[str, float]]:
    """(Holm-adjusted Welch p against the best for every other family, Holm-adjusted TOST p for
    those not separated): the two decisions the verdict and the race share."""
    ref = scores[best]
    separation = holm({f: welch(s, ref).p for f, s in scores.items() if f != best})
    # NaN (fewer than two seeds) is neither separated nor equivalent
    open_ = [f for f, p in separation.items() if not p < alpha]
    equivalence = holm({f: tost(scores[f], ref, margin) for f in open_})
    return separation, equivalence
