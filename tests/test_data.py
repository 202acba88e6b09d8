"""Datasets: the XOR generators encode what the papers describe, splits are seeded and
leak-free, and writing is atomic. (UEA: tests/test_data_uea.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.config import XorParams
from pipeline.data.contract import Split, load_dataset, save_dataset, standardise, stratified_split
from pipeline.data.kinds.xor import build as build_xor
from pipeline.data.kinds.xor import PAD, generate_xor


def _decode(split: Split, i: int) -> list[int]:
    """Rebuild sample i's bit stream from its events and elapsed times."""
    t = np.round(split.t[i][split.mask[i]] * PAD).astype(int)
    values = split.x[i, split.mask[i], 0].astype(int)
    elapsed = np.diff(np.concatenate([[0], t]))
    bits: list[int] = []
    for value, gap in zip(values, elapsed):
        bits += [bits[-1] if bits else value] * (gap - 1) + [value]
    return bits


@pytest.mark.parametrize("event_based", [True, False])
def test_xor_encodes_parity_of_the_stream(event_based: bool) -> None:
    split = generate_xor(400, event_based, np.random.default_rng(0))
    lengths = []
    for i in range(len(split)):
        bits = _decode(split, i)
        lengths.append(len(bits))
        assert sum(bits) % 2 == split.y[i]
    assert min(lengths) >= 2 and max(lengths) <= PAD - 1
    assert set(split.y.tolist()) == {0, 1}
    assert np.isnan(split.x[~split.mask]).all()


def test_event_based_is_irregular_and_dense_is_regular() -> None:
    event = generate_xor(200, True, np.random.default_rng(1))
    dense = generate_xor(200, False, np.random.default_rng(1))
    gaps = lambda s: np.concatenate([np.diff(np.concatenate([[0], s.t[i][s.mask[i]]])) for i in range(len(s))])
    assert np.allclose(gaps(dense), 1 / PAD)
    assert gaps(event).max() > 1 / PAD and event.mask.sum() < dense.mask.sum()
    # consecutive events differ, except a final event that closes a trailing run
    for i in range(50):
        v = event.x[i, event.mask[i], 0]
        assert (v[1:-1] != v[:-2]).all()


def test_xor_dataset_is_reproducible_with_train_only_normalisation() -> None:
    p = XorParams(kind="xor", n_train=300, n_test=100, val_fraction=0.2, seed=7)
    a, b = build_xor("x", p), build_xor("x", p)
    assert np.array_equal(a.splits["test"].y, b.splits["test"].y)
    assert a.meta.sizes == {"train": 240, "val": 60, "test": 100}
    train = a.splits["train"]
    assert abs(np.nanmean(train.x[train.mask])) < 1e-5  # standardised with train statistics
    assert abs(np.nanmean(a.splits["test"].x[a.splits["test"].mask])) > 1e-5


def test_save_is_atomic_and_round_trips(tmp_path) -> None:
    d = build_xor("x", XorParams(kind="xor", n_train=100, n_test=50, seed=1))
    out = tmp_path / "x"
    save_dataset(out, d)
    loaded = load_dataset(out)
    assert np.array_equal(loaded.splits["val"].mask, d.splits["val"].mask) and loaded.meta == d.meta

    bad = d.splits["train"]
    broken = type(d)(d.meta, {"train": bad, "val": object()})  # fails mid-write
    with pytest.raises(AttributeError):
        save_dataset(out, broken)
    assert load_dataset(out).meta == d.meta  # the earlier dataset is intact
    assert [p.name for p in tmp_path.iterdir()] == ["x"]  # no half-written folder left


@pytest.mark.parametrize("n", [100, 200, 259])
def test_stratified_split_is_70_15_15_disjoint_and_seeded(n: int) -> None:
    y = np.arange(n) % 5
    parts = stratified_split(y, seed=7)
    sizes = {k: len(v) for k, v in parts.items()}
    assert sizes["train"] == round(0.7 * n) and abs(sizes["val"] - sizes["test"]) <= 1
    assert sorted(np.concatenate(list(parts.values()))) == list(range(n))  # disjoint, complete
    for idx in parts.values():  # every class in the same share (to one example)
        counts = np.bincount(y[idx], minlength=5)
        assert counts.max() - counts.min() <= 1
    again = stratified_split(y, seed=7)
    assert all(np.array_equal(parts[k], again[k]) for k in parts)
    assert not np.array_equal(stratified_split(y, seed=8)["test"], parts["test"])


def test_standardise_keeps_nan_and_centres_a_never_observed_channel() -> None:
    x = np.array([[[1.0, np.nan], [3.0, np.nan]]], np.float32)
    split = Split(x, np.zeros((1, 2), np.float32), np.ones((1, 2), bool), np.zeros(1, np.int64))
    out, mean, std = standardise({"train": split, "val": split, "test": split})
    assert mean.tolist() == [2.0, 0.0] and std.tolist() == [1.0, 1.0]
    assert out["test"].x[0, :, 0].tolist() == [-1.0, 1.0] and np.isnan(out["test"].x[0, :, 1]).all()
