"""The processed-dataset contract between `prepare` and every later stage.

    data/processed/<dataset>/
        train.npz, val.npz, test.npz   x (N, L, C) float32, NaN where missing or padded
                                       t (N, L) float32, padding repeats the last valid time
                                       mask (N, L) bool, True at observed steps
                                       y (N,) int64 labels, (N, L) int64 per-step labels, or
                                       (N, O) / (N, L, O) float regression targets
        meta.json                      task, metric, output size, channels, normalisation, sizes
        inputs/                        optional: model inputs precomputed in prepare (inputs.py)

Static features (age, ICU unit, ...) are the last channels of x, listed in meta.static_channels,
repeated at every observed step: every family reads them at its first step, so they set the
initial state (the CDE families' h0 = zeta(X(t0)) sees them) without a per-family static encoder.

Writing goes to a temporary sibling folder that is renamed into place, so a failed prepare
never leaves a half-written dataset behind.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

SPLITS = ("train", "val", "test")

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


def save_dataset(folder: Path, dataset: Dataset, extra: Callable[[Path], None] | None = None) -> None:
    """Write atomically: build in a temporary sibling, then swap it into place.

    `extra(tmp_folder)` may add files (precomputed inputs) before the swap.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        for name, split in dataset.splits.items():
            np.savez_compressed(tmp / f"{name}.npz", x=split.x, t=split.t, mask=split.mask, y=split.y)
        (tmp / "meta.json").write_text(json.dumps(asdict(dataset.meta), indent=2) + "\n")
        if extra is not None:
            extra(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_meta(folder: Path) -> Meta:
    return Meta(**json.loads((folder / "meta.json").read_text()))


def load_dataset(folder: Path) -> Dataset:
    """Read a processed dataset written by `save_dataset`."""
    splits = {}
    for name in SPLITS:
        with np.load(folder / f"{name}.npz") as z:
            splits[name] = Split(z["x"], z["t"], z["mask"], z["y"])
    return Dataset(load_meta(folder), splits, folder)


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
