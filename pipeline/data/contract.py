"""The processed-dataset contract between `prepare` and every later stage.

    data/processed/<dataset>/
        train.npz, val.npz, test.npz   x (N, L, C) float32, NaN where missing or padded
                                       t (N, L) float32, padding repeats the last valid time
                                       mask (N, L) bool, True at observed steps
                                       y (N,) int64 labels, (N, L) int64 per-step labels, or
                                       (N, O) / (N, L, O) float regression targets
        meta.json                      task, metric, output size, channels, normalisation, sizes;
                                       provenance, only where the data falls short of the
                                       publisher's (unverified copy, missing records: provenance.py)
        digest.json                    each split's arrays' sha256: the dataset's identity
                                       (identity.py; the same data prepared again, the same bytes)
        inputs/                        optional: model inputs precomputed in prepare (inputs.py)

Static features (age, ICU unit, ...) are the last channels of x, listed in meta.static_channels,
repeated at every observed step: every family reads them at its first step, so they set the
initial state (the CDE families' h0 = zeta(X(t0)) sees them) without a per-family static encoder.

Writing goes to a temporary sibling folder that is renamed into place, so a failed prepare
never leaves a half-written dataset behind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline.data.identity import (DIGEST_FILE, arrays_digest, changed_splits, digest_json, unverified_message,
                                    write_npz)
from pipeline.errors import CorruptInputError
from pipeline.runtime.interrupts import deferred
from pipeline.stores.files import corrupt, new_mode, read_json
from pipeline.stores.schema import NUMBER, ListOf, MapOf, problem

SPLITS = ("train", "val", "test")
ARRAYS = ("x", "t", "mask", "y")
TASKS = ("classification", "binary", "regression")

# metric -> whether larger is better; "mode" as Ray Tune and Optuna spell it.
METRIC_MODES = {"accuracy": "max", "auroc": "max", "mse": "min"}


@dataclass(frozen=True)
class Split:
    """One split. x: (N, L, C); t: (N, L); mask: (N, L) bool; y: (N,) or (N, L)."""

    x: np.ndarray
    t: np.ndarray
    mask: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        n, length = self.mask.shape
        if self.x.shape[:2] != (n, length) or self.t.shape != (n, length) or len(self.y) != n:
            raise ValueError(
                f"inconsistent split shapes: x {self.x.shape}, t {self.t.shape}, "
                f"mask {self.mask.shape}, y {self.y.shape}"
            )

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Meta:
    name: str
    task: str  # "classification" | "binary" | "regression"
    per_step: bool
    output_size: int  # classes for classification, 1 for binary, outputs for regression
    metric: str
    channels: list[str]
    source: str
    sizes: dict[str, int] = field(default_factory=dict)
    norm_mean: list[float] = field(default_factory=list)
    norm_std: list[float] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    static_channels: list[str] = field(default_factory=list)  # the last channels of x
    # Token datasets (IMDB): x holds token ids (0 .. vocab_size - 1) in its one channel, and
    # every family reads them through a learned embedding of this size (models/embedding.py).
    vocab_size: int = 0
    embedding_size: int = 0
    # Where the data falls short of the publisher's ("local copy, not verified against the
    # publisher (...); 3,996 of 4,000 records"), pipeline/data/provenance.py; "" when it does not.
    provenance: str = ""

    @property
    def mode(self) -> str:
        return METRIC_MODES[self.metric]


@dataclass(frozen=True)
class Dataset:
    meta: Meta
    splits: dict[str, Split]
    folder: Path | None = None  # where it was loaded from; None when built in memory


def stratified_split(y: np.ndarray, seed: int, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)) -> dict[str, np.ndarray]:
    """Sorted index arrays {"train", "val", "test"} of a stratified, seeded split of labels y (N,).

    Train is carved first and the rest halved (for the default fractions), as Kidger et al.
    (2020) do with two sklearn train_test_split calls, so 100 examples give exactly 70/15/15.
    """
    from sklearn.model_selection import train_test_split

    train_frac, val_frac, test_frac = fractions
    idx = np.arange(len(y))
    train, rest = train_test_split(idx, train_size=train_frac, random_state=seed, stratify=y)
    val, test = train_test_split(rest, test_size=test_frac / (val_frac + test_frac), random_state=seed, stratify=y[rest])
    return {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}


def take(split: Split, idx: np.ndarray) -> Split:
    """The rows `idx` of a split."""
    return Split(split.x[idx], split.t[idx], split.mask[idx], split.y[idx])


def carve_validation(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """Stratified, seeded split of `train` into (train, val), for sources with a fixed test set."""
    from sklearn.model_selection import train_test_split

    tr, va = train_test_split(np.arange(len(train)), test_size=fraction, random_state=seed, stratify=train.y)
    return take(train, np.sort(tr)), take(train, np.sort(va))


def standardise(splits: dict[str, Split]) -> tuple[dict[str, Split], np.ndarray, np.ndarray]:
    """Per-channel standardisation with statistics from the observed train values only.

    NaN (missing) stays NaN. A channel never observed in train gets mean 0 and std 1.
    """
    train = splits["train"]
    observed = train.x[train.mask]  # (n_observed, C)
    seen = (~np.isnan(observed)).any(axis=0)
    filled = np.where(seen, observed, 0.0) if not seen.all() else observed
    mean = np.where(seen, np.nanmean(filled, axis=0, dtype=np.float64), 0.0).astype(np.float32)
    std = np.where(seen, np.nanstd(filled, axis=0, dtype=np.float64), 1.0).astype(np.float32)
    std = np.where(std > 1e-8, std, 1.0)  # a constant channel is centred, not blown up
    out = {
        name: Split(((s.x - mean) / std).astype(np.float32), s.t, s.mask, s.y)
        for name, s in splits.items()
    }
    return out, mean, std


def min_max_scale(splits: dict[str, Split]) -> tuple[dict[str, Split], np.ndarray, np.ndarray]:
    """Per-channel (x - min) / max with the minimum and maximum of the observed train values: the
    scaling of the CfC and latent ODE PhysioNet code (raminmh/CfC duv_physionet.py,
    variable_time_collate_fn2: `(vals - data_min) / data_max`, a maximum of 0 read as 1), which
    takes them over all stays, test included; here over the training stays only.

    Returned as (splits, centre, scale) with x' = (x - centre) / scale, the affine form meta.json's
    norm_mean / norm_std record for every scaling (serving undoes it the same way). NaN stays NaN;
    a channel never observed in train gets centre 0 and scale 1.
    """
    train = splits["train"]
    observed = train.x[train.mask]  # (n_observed, C)
    seen = (~np.isnan(observed)).any(axis=0)
    filled = np.where(seen, observed, 0.0) if not seen.all() else observed
    low = np.where(seen, np.nanmin(filled, axis=0), 0.0).astype(np.float32)
    high = np.where(seen, np.nanmax(filled, axis=0), 1.0).astype(np.float32)
    high = np.where(high != 0, high, 1.0).astype(np.float32)  # the reference's data_max[data_max == 0] = 1
    out = {name: Split(((s.x - low) / high).astype(np.float32), s.t, s.mask, s.y) for name, s in splits.items()}
    return out, low, high


def save_dataset(folder: Path, dataset: Dataset, extra: Callable[[Path], None] | None = None) -> None:
    """Write atomically: build in a temporary sibling, then swap it into place.

    `extra(tmp_folder)` may add files (precomputed inputs) before the swap.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        digests = {}
        for name, split in dataset.splits.items():
            arrays = {k: getattr(split, k) for k in ARRAYS}
            write_npz(tmp / f"{name}.npz", arrays)
            digests[name] = arrays_digest(arrays)
        (tmp / "meta.json").write_text(meta_json(dataset.meta))
        (tmp / DIGEST_FILE).write_text(digest_json(digests))
        if extra is not None:
            extra(tmp)
        tmp.chmod(new_mode(folder=True))  # mkdtemp's 0700 would hide the dataset from other users
        with deferred():  # SIGINT / SIGTERM wait for the swap: never the old folder gone and the new not in place
            old = folder.with_name(f".{folder.name}-old-{os.getpid()}")
            if folder.exists():
                folder.rename(old)
            try:
                tmp.rename(folder)
            except OSError:
                if old.exists():
                    old.rename(folder)  # the previous dataset back in place
                raise
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# Fields written to meta.json only when set: meta.json of data as published keeps the bytes it had
# before they existed, and with them the fingerprints of the searches and final stages built on it.
_OMITTED_WHEN_EMPTY = ("provenance",)


def meta_json(meta: Meta) -> str:
    """meta.json's text."""
    data = {k: v for k, v in asdict(meta).items() if v or k not in _OMITTED_WHEN_EMPTY}
    return json.dumps(data, indent=2) + "\n"


def load_meta(folder: Path) -> Meta:
    """Read meta.json. A missing, truncated or hand-edited file (unknown or missing keys, wrong
    types, normalisation that does not match the channels) raises CorruptInputError naming
    `ctsweep prepare <dataset>`, which writes it again."""
    path, producer = folder / "meta.json", _producer(folder)
    _require_file(path, producer)
    data = read_json(path, producer)
    why = problem(data, _META_SPEC) or _meta_problem(data)
    if why is not None:
        raise corrupt(path, why, producer)
    return Meta(**data)


def load_dataset(folder: Path) -> Dataset:
    """Read a processed dataset written by `save_dataset`, checking every array's shape against
    the others and meta.json, and their content against digest.json (CorruptInputError naming the
    file and `ctsweep prepare`; a missing digest.json too): the fingerprint that resumes stages and
    keys the input cache is made from digest.json, so arrays changed behind it would pass as the old ones."""
    meta = load_meta(folder)
    splits = {name: _load_split(folder / f"{name}.npz", meta, _producer(folder)) for name in SPLITS}
    recorded = _digests(folder)
    arrays = {name: {k: getattr(s, k) for k in ARRAYS} for name, s in splits.items()}
    changed = changed_splits(recorded, arrays)
    if changed:
        raise corrupt(folder / f"{changed[0]}.npz", f"its arrays differ from what {DIGEST_FILE} records: changed "
                      "since prepare wrote them", _producer(folder))
    return Dataset(meta, splits, folder)


def _digests(folder: Path) -> dict[str, str]:
    """digest.json's {split: sha256}. A dataset without it (written before it existed, or the file
    removed) is unverified: CorruptInputError naming `ctsweep prepare` (identity.require_digest)."""
    path = folder / DIGEST_FILE
    if not path.is_file():
        raise CorruptInputError(unverified_message(folder))
    data = read_json(path, _producer(folder))
    if not isinstance(data, dict) or sorted(data) != sorted(SPLITS) or not all(isinstance(v, str) for v in data.values()):
        raise corrupt(path, f"expected each of {list(SPLITS)} with its sha256", _producer(folder))
    return data


def _producer(folder: Path) -> str:
    return f"ctsweep prepare {folder.name}"


def _require_file(path: Path, producer: str) -> None:
    if not path.is_file():
        raise corrupt(path, "no such file: the dataset folder is incomplete", producer)


# meta.json's keys and types, from Meta's annotations (strings under `from __future__ import
# annotations`); a field of a type not listed here fails at import, so the check cannot fall behind.
_HINTS = {"str": str, "bool": bool, "int": int, "list[str]": ListOf(str), "list[float]": ListOf(NUMBER),
          "dict[str, int]": MapOf(int)}
_META_SPEC = {f.name + ("?" if f.default is not MISSING or f.default_factory is not MISSING else ""): _HINTS[f.type]
              for f in fields(Meta)}


def _meta_problem(data: dict[str, Any]) -> str | None:
    """What the types alone do not say: unknown keys, allowed values, statistics per channel."""
    unknown = sorted(set(data) - {f.name for f in fields(Meta)})
    if unknown:
        return f"unknown keys {unknown}"
    if data["task"] not in TASKS:
        return f"task is {data['task']!r}, expected one of {list(TASKS)}"
    if data["metric"] not in METRIC_MODES:
        return f"metric is {data['metric']!r}, expected one of {list(METRIC_MODES)}"
    if data["output_size"] < 1:
        return f"output_size is {data['output_size']}, expected at least 1"
    n = len(data["channels"])
    for key, values in ((k, data.get(k, [])) for k in ("norm_mean", "norm_std")):
        if values and len(values) != n:
            return f"{key} has {len(values)} values for {n} channels"
        if not all(math.isfinite(v) for v in values) or key == "norm_std" and any(v <= 0 for v in values):
            return f"{key} is {values}, expected finite values{' above 0' if key == 'norm_std' else ''}"
    return None


def _load_split(path: Path, meta: Meta, producer: str) -> Split:
    """One split's arrays, checked; a truncated or rewritten .npz is named with `producer`."""
    _require_file(path, producer)
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ARRAYS if k not in z.files]
            arrays = {k: z[k] for k in ARRAYS if k not in missing}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise corrupt(path, f"not a readable .npz file: {first_line}", producer) from None
    why = f"missing arrays {missing}" if missing else _split_problem(arrays, meta)
    if why is not None:
        raise corrupt(path, why, producer)
    return Split(**arrays)


def _split_problem(a: dict[str, np.ndarray], meta: Meta) -> str | None:
    """x (N, L, C) with C = len(meta.channels); t, mask (N, L); y (N, ...), (N, L, ...) per step."""
    x, t, mask, y = (a[k] for k in ARRAYS)
    c = len(meta.channels)
    if x.ndim != 3 or x.shape[2] != c:
        return f"x has shape {x.shape}; expected (N, L, {c}) for the {c} channels of meta.json"
    n, length = x.shape[:2]
    for key, arr in (("t", t), ("mask", mask)):
        if arr.shape != (n, length):
            return f"{key} has shape {arr.shape}; expected (N, L) = {(n, length)} to match x"
    if y.ndim == 0 or y.shape[0] != n or meta.per_step and y.shape[1:2] != (length,):
        return f"y has shape {y.shape}; expected ({n}{', ' + str(length) if meta.per_step else ''}, ...) to match x"
    if mask.dtype != bool:
        return f"mask has dtype {mask.dtype}; expected bool"
    bad = [k for k in ARRAYS if not np.issubdtype(a[k].dtype, np.number) and a[k].dtype != bool]
    return f"arrays {bad} are not numeric" if bad else None


def pad_sequences(
    values: list[np.ndarray], times: list[np.ndarray], length: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left-align variable-length series into padded arrays.

    Args:
        values: N arrays of shape (L_i, C).
        times: N arrays of shape (L_i,).
    Returns:
        x (N, L, C) with NaN padding, t (N, L) repeating each last time, mask (N, L).
    """
    n, channels = len(values), values[0].shape[1]
    length = length or max(len(v) for v in values)
    x = np.full((n, length, channels), np.nan, dtype=np.float32)
    t = np.zeros((n, length), dtype=np.float32)
    mask = np.zeros((n, length), dtype=bool)
    for i, (v, ti) in enumerate(zip(values, times)):
        k = len(v)
        x[i, :k], t[i, :k], mask[i, :k] = v, ti, True
        t[i, k:] = ti[-1]
    return x, t, mask
