"""How much of the validation and test data a training window also holds (review finding N7).

The Person Activity protocols of the source papers (ODE-LSTM's windows of 32 rows at stride 16,
Rubanova's chunks of 50 bins at stride 25) cut each recording into overlapping windows and then
split the windows at random, so most rows of a test window also lie in some training window.
This faithfully reproduces the papers' numbers and inflates them alike; the loader states it
beside every result made from the data (Meta.provenance, pipeline/data/provenance.py).
"""

from __future__ import annotations

import numpy as np


def window_rows(lengths: list[int], window: int, stride: int) -> np.ndarray:
    """(W, window) global row ids of the windows starting at 0, stride, ... while start + window <
    length in each recording, in recording order (the windowing of person_activity.py)."""
    ids, offset = [], 0
    for length in lengths:
        starts = np.arange(0, length - window, stride)
        ids.append(offset + starts[:, None] + np.arange(window)[None, :])
        offset += length
    return np.concatenate(ids) if ids else np.zeros((0, window), np.int64)


def shared_fraction(rows: np.ndarray, train: np.ndarray, other: np.ndarray) -> float:
    """The fraction of the distinct rows of windows `other` that some window of `train` holds."""
    theirs = np.unique(rows[other])
    return float(np.isin(theirs, np.unique(rows[train])).mean()) if theirs.size else 0.0


def overlap_note(rows: np.ndarray, idx: dict[str, np.ndarray]) -> str:
    """"overlapping windows: 79.8 % of test rows and 73.7 % of validation rows also lie in a training
    window (the papers' protocol)"; "" when no row is shared."""
    test, val = (100 * shared_fraction(rows, idx["train"], idx[k]) for k in ("test", "val"))
    if test == val == 0:
        return ""
    return (f"overlapping windows: {test:.1f} % of test rows and {val:.1f} % of validation rows also lie in a "
            f"training window (the papers' protocol)")
