"""Bit-stream XOR (Lechner & Hasani 2020; CfC paper, Hasani et al. 2022).

Each sample is 2-31 random bits; the label is their parity. The dense encoding has one step per
bit; the event-based encoding emits a step only when the bit changes, plus one final step when
the stream ends on a run of repeated bits, so the time since the previous event carries the
run lengths (the irregularly sampled case). Times are counted in bits and divided by the
padding size, 32, as in the reference generator.
"""

from __future__ import annotations

import numpy as np

from pathlib import Path

from pipeline.config import XorParams
from pipeline.data.contract import Dataset, Meta, Split, carve_validation, standardise
from pipeline.data.download import RawFile

PAD = 32  # reference pad size; streams hold at most PAD - 1 bits


def generate_xor(n: int, event_based: bool, rng: np.random.Generator) -> Split:
    """n samples -> Split with x (n, PAD, 1), t (n, PAD), mask (n, PAD), y (n,) int64 parity."""
    steps = np.arange(PAD - 1)  # (S,)
    lengths = rng.integers(2, PAD, size=n)  # [2, 31] bits per stream
    bits = rng.integers(0, 2, size=(n, PAD - 1))  # (n, S)
    valid = steps[None, :] < lengths[:, None]  # (n, S)
    labels = (bits * valid).sum(axis=1) % 2

    if event_based:
        changed = np.concatenate([np.ones((n, 1), bool), bits[:, 1:] != bits[:, :-1]], axis=1)
        last = steps[None, :] == (lengths - 1)[:, None]
        emit = (changed | last) & valid
    else:
        emit = valid
    # Move emitted positions to the front of each row, keeping their order.
    order = np.argsort(~emit, axis=1, kind="stable")  # (n, S)
    positions = np.take_along_axis(np.broadcast_to(steps, (n, PAD - 1)), order, axis=1)
    count = emit.sum(axis=1)
    mask = np.zeros((n, PAD), bool)
    mask[:, : PAD - 1] = steps[None, :] < count[:, None]

    x = np.full((n, PAD, 1), np.nan, np.float32)
    t = np.zeros((n, PAD), np.float32)
    x[:, : PAD - 1, 0] = np.take_along_axis(bits, positions, axis=1)
    # An event at bit position p happens after p + 1 bits: elapsed times are diffs of this.
    t[:, : PAD - 1] = (positions + 1) / PAD
    last_time = t[np.arange(n), count - 1]
    t = np.where(mask, t, last_time[:, None]).astype(np.float32)
    x[~mask] = np.nan
    return Split(x=x, t=t, mask=mask, y=labels.astype(np.int64))


def raw_files(p: XorParams) -> list[RawFile]:
    """Generated from its seed: nothing to download."""
    return []


def build(name: str, p: XorParams, raw_dir: Path | None = None) -> Dataset:
    """Train/val/test XOR splits, standardised with train statistics."""
    # Independent streams for train and test from one seed: no overlap, reproducible.
    train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(p.seed).spawn(2))
    train, val = carve_validation(generate_xor(p.n_train, p.event_based, train_rng), p.val_fraction, p.seed)
    splits, mean, std = standardise({"train": train, "val": val, "test": generate_xor(p.n_test, p.event_based, test_rng)})
    encoding = "event-based" if p.event_based else "dense"
    meta = Meta(
        name=name, task="binary", per_step=False, output_size=1, metric="accuracy", channels=["bit"],
        source=f"bit-stream XOR, {encoding} (Lechner & Hasani 2020; Hasani et al. 2022), seed {p.seed}",
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=["even", "odd"],
    )
    return Dataset(meta, splits)
