"""A validation split of each final seed's own, drawn inside the training data (issue 29).

A small dataset's validation split is a handful of series: 8 of ArrowHead's 36, 10 of
GunPoint's 50. The epoch a seed keeps and when it stops then hang on those few series, and every
seed reads the same ones. With `final.validation: per_seed`, seed s instead redraws the
validation series from the training and validation series together, as many as the prepared
validation split holds, stratified by label where each series has one, with its own random
state; the test split is never touched. Over the seeds the validation role rotates through the
training data (repeated hold-out, Monte-Carlo cross-validation), so the mean over seeds no
longer rests on one draw of a few series, and the spread between seeds includes that draw.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.data.contract import Dataset, Split, take


def _pad(a: np.ndarray, length: int, fill: float | str) -> np.ndarray:
    """`a` (N, L, ...) padded along axis 1 to `length` with `fill`, or "edge" to repeat the last step."""
    width = [(0, 0), (0, length - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
    if fill == "edge":
        return np.pad(a, width, mode="edge")
    return np.pad(a, width, mode="constant", constant_values=fill)


def joined(a: Split, b: Split, per_step: bool) -> Split:
    """Two splits as one, the shorter padded as the contract pads (x NaN, t its last time, mask False)."""
    length = max(a.mask.shape[1], b.mask.shape[1])

    def grow(s: Split) -> Split:
        y = _pad(s.y, length, 0) if per_step else s.y  # padded steps are masked: never scored
        return Split(_pad(s.x, length, np.nan), _pad(s.t, length, "edge"), _pad(s.mask, length, False), y)

    a, b = grow(a), grow(b)
    return Split(*(np.concatenate([getattr(a, k), getattr(b, k)]) for k in ("x", "t", "mask", "y")))


def per_seed_validation(data: Dataset, seed: int) -> Dataset:
    """`data` with train and val redrawn from their union for `seed`: val as large as before,
    stratified by the series' label (classification and binary tasks with one label per series;
    a class too rare to stratify draws without), test untouched. The dataset's folder is dropped:
    inputs precomputed in prepare belong to the prepared splits, so they are built again in memory.

    Shapes: train (N_train, L, C) and val (N_val, L, C) with L the longer of the two lengths."""
    from sklearn.model_selection import train_test_split

    meta = data.meta
    pool = joined(data.splits["train"], data.splits["val"], meta.per_step)
    n_val = len(data.splits["val"])
    idx = np.arange(len(pool))
    labels = pool.y if meta.task in ("classification", "binary") and not meta.per_step else None
    try:
        train, val = train_test_split(idx, test_size=n_val, random_state=seed, stratify=labels)
    except ValueError:  # a class with a single series cannot be split both ways
        train, val = train_test_split(idx, test_size=n_val, random_state=seed)
    splits = {**data.splits, "train": take(pool, np.sort(train)), "val": take(pool, np.sort(val))}
    return dataclasses.replace(data, splits=splits, folder=None)
