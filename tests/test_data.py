"""Datasets: the XOR generators encode what the papers describe, UEA loads from aeon, splits
are seeded and leak-free, and writing is atomic."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.config import UeaParams, XorParams
from pipeline.data.contract import Split, load_dataset, save_dataset
from pipeline.data.prepare import build_uea, build_xor, prepare
from pipeline.data.uea import drop_observations, load_uea
from pipeline.data.xor import PAD, generate_xor
from pipeline.errors import ConfigError


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


def test_japanese_vowels_from_aeon() -> None:
    series, labels = load_uea("JapaneseVowels", "train")
    assert len(series) == 270 and series[0].shape[1] == 12 and len(set(labels)) == 9
    d = build_uea("jv", UeaParams(kind="uea", name="JapaneseVowels", val_fraction=0.2, seed=0))
    assert d.meta.output_size == 9 and d.meta.sizes == {"train": 216, "val": 54, "test": 370}
    lengths = d.splits["test"].mask.sum(axis=1)
    assert lengths.min() == 7 and lengths.max() == 29


def test_drop_fraction_removes_observations_and_keeps_times() -> None:
    rng = np.random.default_rng(0)
    series = [np.arange(20, dtype=np.float32).reshape(10, 2), np.ones((7, 2), np.float32)]
    values, times = drop_observations(series, 0.3, rng)
    assert [len(v) for v in values] == [7, 5]
    assert np.array_equal(values[0][:, 0] / 2, times[0])  # value i sits at time i
    assert (np.diff(times[0]) >= 1).all() and np.diff(times[0]).max() > 1


def test_unknown_uea_name() -> None:
    with pytest.raises(ConfigError, match="EigenWorms.*JapaneseVowels"):
        load_uea("EigenWorms", "train")


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


def test_prepare_writes_the_contract(tmp_path) -> None:
    meta = prepare("jv30", UeaParams(kind="uea", drop_fraction=0.3, seed=3), tmp_path / "jv30")
    assert sorted(p.name for p in (tmp_path / "jv30").iterdir()) == ["meta.json", "test.npz", "train.npz", "val.npz"]
    test = load_dataset(tmp_path / "jv30").splits["test"]
    assert test.mask.sum(axis=1).max() < 29 and meta.metric == "accuracy" and meta.mode == "max"
