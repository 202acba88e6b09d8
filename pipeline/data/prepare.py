"""The `prepare` stage: build one processed dataset from its params.yaml section."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

from pipeline.config import UeaParams, XorParams
from pipeline.data.contract import Dataset, Meta, Split, save_dataset, standardise
from pipeline.data.uea import load_uea, uea_split
from pipeline.data.xor import generate_xor


def carve_validation(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """Stratified, seeded split of `train` into (train, val)."""
    idx = np.arange(len(train))
    tr, va = train_test_split(idx, test_size=fraction, random_state=seed, stratify=train.y)

    def take(i: np.ndarray) -> Split:
        return Split(train.x[i], train.t[i], train.mask[i], train.y[i])

    return take(np.sort(tr)), take(np.sort(va))


def build_xor(name: str, p: XorParams) -> Dataset:
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


def build_uea(name: str, p: UeaParams) -> Dataset:
    train_series, train_labels = load_uea(p.name, "train")
    test_series, test_labels = load_uea(p.name, "test")
    classes = sorted(set(train_labels))
    train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(p.seed).spawn(2))
    full = uea_split(train_series, train_labels, classes, p.drop_fraction, train_rng)
    train, val = carve_validation(full, p.val_fraction, p.seed)
    test = uea_split(test_series, test_labels, classes, p.drop_fraction, test_rng)
    splits, mean, std = standardise({"train": train, "val": val, "test": test})
    dropped = f", {p.drop_fraction:.0%} of observations dropped" if p.drop_fraction else ""
    meta = Meta(
        name=name, task="classification", per_step=False, output_size=len(classes), metric="accuracy",
        channels=[f"c{i}" for i in range(train.x.shape[2])],
        source=f"UEA {p.name} (aeon's bundled copy){dropped}, seed {p.seed}",
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=classes,
    )
    return Dataset(meta, splits)


def prepare(name: str, p: XorParams | UeaParams, out_dir: Path) -> Meta:
    """Build dataset `name` from its params and write it to `out_dir` atomically."""
    dataset = build_xor(name, p) if isinstance(p, XorParams) else build_uea(name, p)
    save_dataset(out_dir, dataset)
    return dataset.meta
