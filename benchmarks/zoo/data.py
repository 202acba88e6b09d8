"""The benchmark's one synthetic dataset, built in memory with the pipeline's own helpers.

Irregularly sampled, variable-length sequences with missing values and a per-sequence class,
padded and standardised exactly as `prepare` does it (pad_sequences, standardise), so every
family's `prepare_inputs` sees what it sees on a real processed dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.data.contract import Dataset, Meta, Split, pad_sequences, standardise


@dataclass(frozen=True)
class DataSpec:
    """Sizes of the synthetic dataset; equal specs give identical data (seeded)."""

    sequences: int = 256
    length: int = 50
    channels: int = 12
    classes: int = 4
    missing: float = 0.1  # fraction of observed values set to NaN
    seed: int = 0


def synthetic_dataset(spec: DataSpec) -> Dataset:
    """A Dataset with a single "train" split: x (N, L, C), t (N, L), mask (N, L), y (N,).

    Lengths are drawn from [L/2, L] (the first row is full length, so the padded length is L);
    gaps between observations are exponential (mean 1); each class has its own frequency, each
    channel its own phase, plus noise; `missing` of the observed values are NaN.
    """
    rng = np.random.default_rng(spec.seed)
    lengths = rng.integers(max(spec.length // 2, 1), spec.length + 1, size=spec.sequences)
    lengths[0] = spec.length
    y = rng.integers(0, spec.classes, size=spec.sequences)
    values, times = [], []
    for n, label in zip(lengths, y):
        t = np.cumsum(rng.exponential(1.0, size=n)).astype(np.float32)  # (n,)
        phase = rng.uniform(0, 2 * np.pi, size=spec.channels)  # (C,)
        freq = 0.2 + 0.15 * label
        x = np.sin(freq * t[:, None] + phase) + 0.3 * rng.standard_normal((n, spec.channels))  # (n, C)
        x[rng.random(x.shape) < spec.missing] = np.nan
        values.append(x.astype(np.float32))
        times.append(t)
    x, t, mask = pad_sequences(values, times, length=spec.length)
    splits, mean, std = standardise({"train": Split(x, t, mask, y.astype(np.int64))})
    meta = Meta(
        name="zoo_synthetic", task="classification", per_step=False, output_size=spec.classes,
        metric="accuracy", channels=[f"c{i}" for i in range(spec.channels)],
        source="benchmarks/zoo/data.py (synthetic)", sizes={"train": spec.sequences},
        norm_mean=mean.tolist(), norm_std=std.tolist(),
    )
    return Dataset(meta, splits)
