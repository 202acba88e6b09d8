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

from pipeline.comparison.pairs import Welch, decide, holm, tost, welch  # noqa: F401 (the report's statistics in one place)


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
