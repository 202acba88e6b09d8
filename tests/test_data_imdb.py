"""IMDB (Keras' tokenised imdb.npz) through the real fetch + prepare path.

The fixture is a small imdb.npz in Keras' raw layout (object arrays of lists of word ranks,
0/1 labels). The pinned checksum is Keras' published one, which no fixture can match, so the
tests that prepare it patch `PUBLISHED_SHA256` to the fixture's own; one test leaves the pin
alone and checks that the fixture is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.config import ImdbParams
from pipeline.data.kinds import imdb
from pipeline.data.download import sha256_of
from pipeline.errors import DataError, DownloadError
from tests.conftest import prepare_served

N_TRAIN, N_TEST = 60, 40
HAND_REVIEW = [5, 1, 996, 997, 2000, 0]  # test review 7; with vocab 1000 -> [1, 8, 4, 999, 2, 2, 3]
HAND_INDEX = 7
EMPTY_INDEX = 11


def object_array(reviews: list[list[int]]) -> np.ndarray:
    arr = np.empty(len(reviews), dtype=object)
    for i, r in enumerate(reviews):
        arr[i] = list(r)
    return arr


def fixture_arrays(max_rank: int = 1200, max_len: int = 30) -> dict[str, np.ndarray]:
    """Random reviews of 1..max_len ranks in 1..max_rank, balanced labels, HAND_REVIEW and one
    empty review (train EMPTY_INDEX)."""
    rng = np.random.default_rng(0)
    out = {}
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        reviews = [rng.integers(1, max_rank, size=rng.integers(1, max_len + 1)).tolist() for _ in range(n)]
        if split == "test":
            reviews[HAND_INDEX] = HAND_REVIEW
        else:
            reviews[EMPTY_INDEX] = []
        out[f"x_{split}"] = object_array(reviews)
        out[f"y_{split}"] = np.arange(n, dtype=np.int64) % 2
    return out


def write_npz(root: Path, arrays: dict[str, np.ndarray]) -> str:
    path = root / "imdb.npz"
    np.savez(path, **arrays)  # object arrays are pickled, as in Keras' file
    return sha256_of(path)


def keras_reference(arrays: dict[str, np.ndarray], num_words: int, maxlen: int, seed: int = 113):
    """keras.datasets.imdb.load_data(num_words, seed) then pad_sequences(maxlen)'s truncating='pre',
    written the way Keras writes them (per-word list comprehensions), without the padding."""
    rng = np.random.RandomState(seed)
    out = {}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        idx = np.arange(len(x))
        rng.shuffle(idx)
        x, y = x[idx], y[idx]
        x = [[1] + [w + 3 for w in review] for review in x]
        x = [[w if 0 <= w < num_words else 2 for w in review] for review in x]
        out[split] = ([review[-maxlen:] for review in x], y)
    return out


def tokens_of(split) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in row[m, 0]) for row, m in zip(split.x, split.mask)]


def run(tmp_path: Path, server, **params):
    return prepare_served(tmp_path, server, "imdb", ImdbParams(kind="imdb", **params))


@pytest.fixture
def served(http_server, monkeypatch):
    arrays = fixture_arrays()
    monkeypatch.setattr(imdb, "PUBLISHED_SHA256", write_npz(http_server.root, arrays))
    return http_server, arrays


def test_defaults_are_cfc_reference_constants():
    p = ImdbParams(kind="imdb")
    assert (p.vocab_size, p.max_length, p.seed) == (20000, 200, 113)  # raminmh/CfC train_imdb.py, Keras
    assert imdb.raw_files(p)[0].sha256 == "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"


def test_hand_computed_review_start_oov_and_offset(tmp_path, served):
    server, _ = served
    _, ds = run(tmp_path, server, vocab_size=1000, max_length=20)
    rng = np.random.RandomState(113)
    rng.shuffle(np.arange(N_TRAIN))  # Keras shuffles train first, with the same generator
    order = np.arange(N_TEST)
    rng.shuffle(order)
    row = int(np.flatnonzero(order == HAND_INDEX)[0])
    test = ds.splits["test"]
    # start 1; ranks + 3 (5 -> 8, 1 -> 4, 996 -> 999, 0 -> 3); 997 + 3 = 1000 and 2000 + 3 are OOV (2)
    np.testing.assert_array_equal(test.x[row, :7, 0], [1, 8, 4, 999, 2, 2, 3])
    assert test.mask[row].sum() == 7 and np.isnan(test.x[row, 7:, 0]).all()
    assert test.y[row] == HAND_INDEX % 2


@pytest.mark.parametrize("vocab_size, max_length, max_rank, max_len", [
    (1000, 20, 1200, 30),  # many reviews truncated, some OOV
    (20000, 200, 30000, 260),  # the CfC defaults
])
def test_matches_keras_load_data_and_pad_sequences(tmp_path, http_server, monkeypatch,
                                                   vocab_size, max_length, max_rank, max_len):
    arrays = fixture_arrays(max_rank, max_len)
    monkeypatch.setattr(imdb, "PUBLISHED_SHA256", write_npz(http_server.root, arrays))
    _, ds = run(tmp_path, http_server, vocab_size=vocab_size, max_length=max_length)
    ref = keras_reference(arrays, vocab_size, max_length)

    ref_test, ref_y = ref["test"]
    assert tokens_of(ds.splits["test"]) == [tuple(r) for r in ref_test]  # same reviews, Keras' order
    np.testing.assert_array_equal(ds.splits["test"].y, ref_y)

    ref_train, ref_train_y = ref["train"]
    position = {tuple(r): i for i, r in enumerate(ref_train)}
    assert len(position) == N_TRAIN  # fixture reviews are distinct
    got = {s: [position[r] for r in tokens_of(ds.splits[s])] for s in ("train", "val")}
    assert sorted(got["train"] + got["val"]) == list(range(N_TRAIN))  # a partition of Keras' train
    for s in ("train", "val"):
        assert got[s] == sorted(got[s])  # in Keras' order
        np.testing.assert_array_equal(ds.splits[s].y, ref_train_y[got[s]])


def test_truncation_keeps_the_last_tokens(tmp_path, http_server, monkeypatch):
    arrays = fixture_arrays()
    reviews = list(arrays["x_train"])
    reviews[0] = list(range(10, 35))  # 25 ranks + start = 26 tokens -> the last 20
    reviews[1] = list(range(100, 119))  # 19 ranks + start = 20 tokens: kept whole
    reviews[2] = list(range(200, 220))  # 20 ranks + start = 21: the start token is cut
    arrays["x_train"] = object_array(reviews)
    monkeypatch.setattr(imdb, "PUBLISHED_SHA256", write_npz(http_server.root, arrays))
    _, ds = run(tmp_path, http_server, vocab_size=1000, max_length=20)
    rows = set()
    for s in ("train", "val"):
        rows |= set(tokens_of(ds.splits[s]))
    assert tuple(range(15 + 3, 35 + 3)) in rows
    assert (1,) + tuple(range(103, 122)) in rows
    assert tuple(range(203, 223)) in rows
    assert all(len(r) <= 20 for r in rows)


def test_left_aligned_mask_times_and_no_standardisation(tmp_path, served):
    server, _ = served
    meta, ds = run(tmp_path, server, vocab_size=1000, max_length=20)
    assert meta.norm_mean == [0.0] and meta.norm_std == [1.0]
    for s in ("train", "val", "test"):
        split = ds.splits[s]
        assert split.x.shape == (len(split), 20, 1) and split.x.dtype == np.float32
        assert split.t.dtype == np.float32 and split.mask.dtype == bool and split.y.dtype == np.int64
        lengths = split.mask.sum(1)
        assert (lengths >= 1).all()  # every review has at least its start token
        np.testing.assert_array_equal(split.mask, np.arange(20)[None, :] < lengths[:, None])  # left-aligned
        np.testing.assert_array_equal(np.isnan(split.x[..., 0]), ~split.mask)  # NaN padding at the end
        ids = split.x[split.mask, 0]
        assert (ids == np.round(ids)).all() and ids.min() >= 1 and ids.max() < 1000  # raw ids, not standardised
        expected_t = np.minimum(np.arange(20)[None, :], lengths[:, None] - 1)  # 0, 1, ..., then the last
        np.testing.assert_array_equal(split.t, expected_t)
    empty = [r for s in ("train", "val") for r in tokens_of(ds.splits[s]) if len(r) == 1]
    assert empty == [(1,)]  # the empty review is its start token alone, padded from step 1


def test_split_sizes_and_meta(tmp_path, served):
    server, _ = served
    meta, ds = run(tmp_path, server, vocab_size=1000, max_length=20, embedding_size=32)
    assert meta.sizes == {"train": 54, "val": 6, "test": 40}
    assert {s: len(v) for s, v in ds.splits.items()} == meta.sizes
    assert ds.splits["val"].y.sum() == 3  # stratified: 3 of each class
    assert (meta.task, meta.per_step, meta.output_size, meta.metric) == ("binary", False, 1, "accuracy")
    assert (meta.vocab_size, meta.embedding_size, meta.channels) == (1000, 32, ["token"])
    assert meta.classes == ["negative", "positive"] and meta.static_channels == []
    assert ds.meta == meta


def test_file_not_matching_keras_checksum_is_refused(tmp_path, http_server):
    write_npz(http_server.root, fixture_arrays())  # PUBLISHED_SHA256 left as Keras publishes it
    # a mirror's file that differs from Keras' pinned checksum: refused, naming the option that would accept it
    with pytest.raises(DownloadError, match="imdb.npz.*differs from the publisher's.*--unverified-copy"):
        run(tmp_path, http_server)
    assert not (tmp_path / "raw" / "imdb" / "imdb.npz").exists()
    assert not list((tmp_path / "raw" / "imdb").glob(".*part"))
    assert not (tmp_path / "processed").exists() or not any((tmp_path / "processed").iterdir())


def test_build_refuses_to_unpickle_an_unverified_file(tmp_path):
    write_npz(tmp_path, fixture_arrays())
    with pytest.raises(DataError, match="refusing to unpickle"):
        imdb.build("imdb", ImdbParams(kind="imdb"), tmp_path)


def _bad_label(a):
    a["y_train"] = a["y_train"].copy()
    a["y_train"][5] = 2


def _missing_key(a):
    del a["x_test"]


def _fractional_rank(a):
    a["x_test"] = object_array([[4, 1.5]] + list(a["x_test"][1:]))


def _negative_rank(a):
    a["x_train"] = object_array(list(a["x_train"][:3]) + [[7, -1]] + list(a["x_train"][4:]))


@pytest.mark.parametrize("corrupt, pattern", [
    (_bad_label, r"imdb.npz: 'y_train' holds label 2 at index 5"),
    (_missing_key, r"imdb.npz: no key 'x_test'"),
    (_fractional_rank, r"imdb.npz: 'x_test' review 0 holds the word rank 1.5"),
    (_negative_rank, r"imdb.npz: 'x_train' review 3 holds the word rank -1"),
])
def test_bad_input_names_file_and_value_and_writes_nothing(tmp_path, http_server, monkeypatch, corrupt, pattern):
    arrays = fixture_arrays()
    corrupt(arrays)
    monkeypatch.setattr(imdb, "PUBLISHED_SHA256", write_npz(http_server.root, arrays))
    with pytest.raises(DataError, match=pattern):
        run(tmp_path, http_server)
    processed = tmp_path / "processed"
    assert not processed.exists() or not any(processed.iterdir())
