"""The expected best score of n trials drawn from a search's trials (Dodge et al. 2019, "Show
Your Work", EMNLP, Sec. 3, Eq. 1): with the N scores v_(1) <= ... <= v_(N) as an empirical
distribution, the best of n draws with replacement is v_(i) with probability
(i/N)^n - ((i-1)/N)^n. The report draws the curve (pipeline.reporting.show_your_work) and the
search reads it to decide whether to go on (pipeline.sweep.saturation).
"""

from __future__ import annotations

import numpy as np


def _weights(size: int, n: int) -> np.ndarray:
    """P(the best of n draws is the i-th smallest of `size` values), i = 1 .. size: (size,)."""
    i = np.arange(1, size + 1, dtype=np.float64)
    return (i / size) ** n - ((i - 1) / size) ** n


def _expected_max_rows(values: np.ndarray, n: int, mode: str) -> np.ndarray:
    """expected_max of every row of values (R, N) at once: (R,)."""
    sign = 1.0 if mode == "max" else -1.0
    return sign * (np.sort(sign * values, axis=-1) @ _weights(values.shape[-1], n))


def expected_max(values: list[float] | np.ndarray, n: int, mode: str = "max") -> float:
    """E[best of n draws with replacement] from the empirical distribution of `values` (Dodge
    Eq. 1); `mode` "min": the expected minimum. values: (N,), n >= 1."""
    return float(_expected_max_rows(np.asarray(values, dtype=np.float64)[None, :], n, mode)[0])
