"""IMDB movie-review sentiment (Maas et al. 2011), as the CfC paper uses it (Hasani et al. 2022).

Source: Keras' tokenised copy, https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz,
the file `keras.datasets.imdb.load_data` downloads (keras-team/keras keras/src/datasets/imdb.py),
whose SHA-256 Keras publishes there (`file_hash`); it is pinned below. The npz holds
  x_train, x_test   object arrays of 25,000 reviews each: lists of word ranks (1 = the most
                    frequent word of the training set; test-only words were already dropped);
  y_train, y_test   0 (negative) / 1 (positive).

CfC's script (raminmh/CfC train_imdb.py, `load_imdb`) calls
`load_data(num_words=20000)` and `pad_sequences(x, maxlen=200)`; we reproduce both exactly:
  * load_data's shuffle: one np.random.RandomState(seed=113) shuffles the train indices, then
    the test indices (in that order);
  * every review becomes [start_char=1] + [rank + index_from=3 ...]; then every id outside
    [0, num_words) becomes oov_char=2, so ids lie in 0 .. vocab_size - 1 (0 is Keras' padding;
    3 would be a rank 0, and ranks start at 1);
  * pad_sequences' defaults (truncating="pre"): a review longer than max_length keeps its LAST
    max_length tokens (its start token is then cut, as there). The script's comment says "the
    first 200 words"; its code keeps the last 200, which is what we follow.

Contract form: x (N, L, 1) float32 token ids (exact: ids < 2**24), left-aligned with NaN padding
at the end (pad_sequences pads at the front with 0), mask True at tokens, t = 0, 1, ... the
token position (padding repeats the last), y int64 0/1; task "binary", metric accuracy (CfC's).
x is NOT standardised (norm_mean [0], norm_std [1]): the ids feed a learned embedding of
`embedding_size` (meta.vocab_size / embedding_size; pipeline/models/blocks/embedding.py), as CfC's
`tf.keras.layers.Embedding(vocab_size, embed_dim)` does.

Deviations, and why:
  * validation: CfC trains on all 25,000 training reviews and evaluates on the 25,000 test
    reviews (also passed as Keras' validation_data); we carve a stratified `val_fraction`
    (default 10%) of the training reviews for model selection, so training has 22,500.
  * padding: CfC's RNN reads the leading 0-padding as tokens; here padding is masked out (the
    project's contract), so a short review is read from its first token.
  * embedding size: CfC tunes embed_dim per model (192 for its default CfC, 64 for the minimal
    CfC and LTC, 32 for the mixed CfC); here it is one dataset parameter shared by every
    family, 64 by default.
  * a negative or fractional word rank (a corrupt file) is an error; Keras would map a
    negative one to OOV and keep a fractional one.
"""

from __future__ import annotations

import itertools
import pickle
import zipfile
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pipeline.config import ImdbParams
from pipeline.data.contract import Dataset, Meta, Split, carve_validation
from pipeline.data.download import RawFile, sha256_of
from pipeline.errors import DataError

URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz"
FILENAME = "imdb.npz"
# Published by Keras itself: `file_hash` of imdb.npz in keras-team/keras keras/src/datasets/imdb.py
# (load_data's get_file call; the same value in tf.keras and tf_keras).
PUBLISHED_SHA256 = "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"
KEYS = ("x_train", "y_train", "x_test", "y_test")
# keras.datasets.imdb.load_data defaults (CfC uses them).
START_CHAR = 1
OOV_CHAR = 2
INDEX_FROM = 3


def raw_files(p: ImdbParams) -> list[RawFile]:
    """Keras' imdb.npz, pinned to the checksum Keras publishes (read at call time, so tests can
    serve a fixture by patching PUBLISHED_SHA256)."""
    return [RawFile(url=URL, filename=FILENAME, sha256=PUBLISHED_SHA256)]


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The four arrays of imdb.npz; DataError naming the file and key when one is missing or
    unreadable."""
    # np.load with allow_pickle unpickles the object arrays, which could run arbitrary code from
    # an untrusted file. It is acceptable only because the file's SHA-256 is checked against the
    # checksum Keras publishes first: by fetch before build, and again here, so build never
    # unpickles an unverified file even when called on its own.
    digest = sha256_of(path)
    if digest != PUBLISHED_SHA256:
        raise DataError(f"{path}: sha256 {digest} is not Keras' published {PUBLISHED_SHA256}; "
                        f"refusing to unpickle it")
    try:
        with np.load(path, allow_pickle=True) as z:
            missing = [k for k in KEYS if k not in z.files]
            if missing:
                raise DataError(f"{path.name}: no key {missing[0]!r} (keys: {sorted(z.files)}; expected {list(KEYS)})")
            return {k: z[k] for k in KEYS}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as exc:
        raise DataError(f"{path.name}: not a readable .npz of IMDB reviews ({exc})") from exc


def check_labels(y: np.ndarray, key: str, n: int) -> np.ndarray:
    """y as int64 0/1, one per review; DataError naming the key and the first bad value."""
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise DataError(f"{FILENAME}: {key!r} has shape {y.shape}; expected ({n},), one label per review")
    if y.dtype.kind not in "biuf":
        raise DataError(f"{FILENAME}: {key!r} has dtype {y.dtype}; expected integer labels 0/1")
    bad = ~np.isin(y, (0, 1))
    if bad.any():
        raise DataError(f"{FILENAME}: {key!r} holds label {y[bad][0].item()!r} at index {int(np.flatnonzero(bad)[0])}; "
                        f"expected 0 (negative) or 1 (positive)")
    return y.astype(np.int64)


def flatten_reviews(reviews: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Reviews (lists of word ranks) -> (all ranks concatenated, int64; length of each review)."""
    if reviews.ndim not in (1, 2):
        raise DataError(f"{FILENAME}: {key!r} has shape {reviews.shape}; expected one list of word ranks per review")
    try:
        lengths = np.fromiter((len(r) for r in reviews), np.int64, count=len(reviews))
        # float64 holds every rank exactly and, unlike an int64 fromiter, does not truncate 1.5 to 1.
        ranks = np.fromiter(
            itertools.chain.from_iterable(tqdm(reviews, desc=f"imdb {key}", unit="review", disable=None)),
            np.float64, count=int(lengths.sum()))
    except (TypeError, ValueError) as exc:
        raise DataError(f"{FILENAME}: {key!r} holds a review that is not a list of integer word ranks ({exc})") from exc
    bad = (ranks < 0) | (ranks != np.round(ranks)) | ~np.isfinite(ranks)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        review = int(np.searchsorted(np.cumsum(lengths), at, side="right"))
        raise DataError(f"{FILENAME}: {key!r} review {review} holds the word rank {ranks[at].item():g}; "
                        f"expected integers >= 0")
    return ranks.astype(np.int64), lengths


def encode(ranks: np.ndarray, lengths: np.ndarray, vocab_size: int, max_length: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keras' token ids of every review, truncated as pad_sequences does, left-aligned:
    x (N, max_length, 1) float32 ids with NaN padding, t (N, max_length), mask (N, max_length)."""
    n = len(lengths)
    ids = ranks + INDEX_FROM
    ids[ids >= vocab_size] = OOV_CHAR  # load_data: skip_top (0) <= w < num_words, else oov_char
    full = lengths + 1  # the start token in front of every review (1 < vocab_size, never OOV)
    offsets = np.concatenate([[0], np.cumsum(full)[:-1]])  # where each review's start token goes
    tokens = np.empty(int(full.sum()), np.int64)
    is_start = np.zeros(len(tokens), bool)
    is_start[offsets] = True
    tokens[is_start] = START_CHAR
    tokens[~is_start] = ids
    # truncating="pre": keep the last min(len, max_length) tokens of each review.
    kept = np.minimum(full, max_length)
    first = offsets + full - kept
    rows = np.repeat(np.arange(n), kept)
    cols = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    x = np.full((n, max_length, 1), np.nan, np.float32)
    x[rows, cols, 0] = tokens[np.repeat(first, kept) + cols]
    mask = np.arange(max_length)[None, :] < kept[:, None]
    positions = np.arange(max_length, dtype=np.float32)[None, :]
    t = np.minimum(positions, (kept - 1)[:, None]).astype(np.float32)  # padding repeats the last time
    return x, t, mask


def build(name: str, p: ImdbParams, raw_dir: Path) -> Dataset:
    """imdb.npz -> Keras' load_data(num_words) + pad_sequences(maxlen) ids; 10% of train is val."""
    arrays = read_npz(Path(raw_dir) / FILENAME)
    rng = np.random.RandomState(p.seed)  # load_data: one generator, train shuffled first, then test
    raw: dict[str, Split] = {}
    for split in ("train", "test"):
        reviews = arrays[f"x_{split}"]
        if reviews.ndim == 0 or len(reviews) == 0:
            raise DataError(f"{FILENAME}: 'x_{split}' holds no reviews")
        y = check_labels(arrays[f"y_{split}"], f"y_{split}", len(reviews))
        order = np.arange(len(reviews))
        rng.shuffle(order)
        ranks, lengths = flatten_reviews(reviews, f"x_{split}")
        x, t, mask = encode(ranks, lengths, p.vocab_size, p.max_length)
        raw[split] = Split(x[order], t[order], mask[order], y[order])
    train, val = carve_validation(raw["train"], p.val_fraction, p.seed)
    splits = {"train": train, "val": val, "test": raw["test"]}
    meta = Meta(
        name=name, task="binary", per_step=False, output_size=1, metric="accuracy", channels=["token"],
        source=(f"IMDB reviews (Maas et al. 2011), Keras' tokenised copy ({URL}, sha256 as Keras publishes); "
                f"CfC's preprocessing (raminmh/CfC train_imdb.py): keras load_data(num_words={p.vocab_size}, "
                f"seed={p.seed}) ids (start 1, OOV 2, words from 3), the last {p.max_length} tokens "
                f"(pad_sequences), left-aligned and masked; the 25,000 test reviews are test, "
                f"{p.val_fraction:g} of train (stratified, seed {p.seed}) is validation; ids not standardised"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=[0.0], norm_std=[1.0],
        classes=["negative", "positive"], vocab_size=p.vocab_size, embedding_size=p.embedding_size,
    )
    return Dataset(meta, splits)
