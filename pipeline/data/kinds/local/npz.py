"""The `local` kind's .npz files: splits already in the processed-dataset contract.

Each file holds x (N, L, C), t (N, L), mask (N, L) bool and y, as contract.save_dataset writes
them. y is read by its dtype and shape: integers are class indices, (N,) per series or (N, L)
per step; floats are classes too when local/task.py's infer_task takes them as such, else regression
targets, (N,) or (N, O) per series, (N, L, O) per step ((N, L) with `per_step: true`). The
arrays are checked with the contract's own checks (contract._split_problem, as load_dataset
does), and times must be finite and non-decreasing along each row; only standardisation and
meta.json are added. One file alone is split by the seeded rule, as the other formats are.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.contract import ARRAYS, SPLITS, Dataset, Meta, Split, _split_problem, standardise, stratified_split, take
from pipeline.data.kinds.local.task import DEFAULT_METRIC, infer_task
from pipeline.errors import DataError, excerpt

if TYPE_CHECKING:
    from pipeline.config.datasets import LocalParams


def _load(path: Path, where: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ARRAYS if k not in z.files]
            arrays = {k: z[k] for k in ARRAYS if k not in missing}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise DataError(f"{where}: not a readable .npz file ({' '.join(str(exc).split())}); expected arrays {list(ARRAYS)}") from None
    if missing:
        raise DataError(f"{where}: missing arrays {missing}; expected {list(ARRAYS)} as in data/processed/<dataset>/")
    return arrays


def _per_step(y: np.ndarray, length: int, classes: bool, p: LocalParams) -> bool:
    """Per step by shape: classes (N, L); targets (N, L, O), or (N, L) when `per_step` says so."""
    if classes:
        return y.ndim == 2
    return y.ndim == 3 or (y.ndim == 2 and bool(p.per_step) and y.shape[1] == length)


def _check(path: str, a: dict[str, np.ndarray], meta: Meta) -> None:
    """The contract's shape checks, then what a model needs of the values."""
    why = _split_problem(a, meta)
    if why is not None:
        raise DataError(f"{path}: {why}")
    x, t, mask = a["x"], a["t"], a["mask"]
    rows = np.flatnonzero(~np.isfinite(t).all(axis=1) | (np.diff(t, axis=1) < 0).any(axis=1))
    if len(rows):
        raise DataError(f"{path}: series {rows[0]}: t is not finite and non-decreasing ({t[rows[0]][:8].tolist()}...); "
                        f"allowed: finite times, increasing at observed steps, padding repeating the last one")
    rows = np.flatnonzero(np.isinf(x).any(axis=(1, 2)) | ~mask.any(axis=1))
    if len(rows):
        raise DataError(f"{path}: series {rows[0]} has an infinite value or no observed step; allowed: finite "
                        f"values (NaN where missing) and at least one step with mask True")


def build_npz(name: str, p: LocalParams, copies: dict[str, Path], shown: dict[str, str]) -> Dataset:
    """Splits from .npz files in the contract (or one file, split by rule), standardised; errors
    name the files as `shown`."""
    arrays = {k: _load(f, shown[k]) for k, f in copies.items()}
    files = shown
    fit = "train" if "train" in arrays else "all"
    ref = arrays[fit]["x"]
    for k, a in arrays.items():
        if a["x"].ndim != 3 or a["x"].shape[2:] != ref.shape[2:]:
            raise DataError(f"{files[k]}: x has shape {a['x'].shape}, so {a['x'].shape[2:] or 'no'} channels; "
                            f"{files[fit]} has {ref.shape[2:]}; allowed: the same channels in every file")
    y_train = arrays[fit]["y"]
    is_int = np.issubdtype(y_train.dtype, np.integer) or y_train.dtype == bool
    task, classes = infer_task(name, p, y_train.reshape(-1), regression=False, where=str(files[fit]))
    if task != "regression" and not is_int:  # float class ids, as infer_task read them
        if not all(np.array_equal(a["y"], np.round(a["y"])) for a in arrays.values()):
            raise DataError(f"{files[fit]}: y holds fractions; class indices are integers")
    regression = task == "regression"
    if not regression and p.classes is None:  # indices: class k is "k", whether train has it or not
        classes = [str(k) for k in range(max(int(np.nanmax(y_train)) + 1, 2))]
    per_step = _per_step(y_train, ref.shape[1], not regression, p)
    channels = [f"c{i}" for i in range(ref.shape[2])]
    meta = Meta(name=name, task=task, per_step=per_step, output_size=len(classes) if task == "classification" else 1,
                metric=p.metric or DEFAULT_METRIC[task], channels=channels, source=f"local {p.path}")
    splits = {}
    for k, a in arrays.items():
        y = a["y"]
        if regression:
            y = y.astype(np.float32)
            if y.ndim == 1 or (per_step and y.ndim == 2):
                y = y[..., None]  # one output
        else:
            y = np.round(y).astype(np.int64)
            bad = np.flatnonzero(((y < 0) | (y >= len(classes))).reshape(len(y), -1).any(axis=1))
            if len(bad):
                raise DataError(f"{files[k]}: series {bad[0]}: class index outside 0..{len(classes) - 1} "
                                f"(classes {excerpt(classes)}); allowed: indices into `classes` or the train labels")
        a = {**a, "x": a["x"].astype(np.float32), "t": a["t"].astype(np.float32), "y": y}
        _check(files[k], a, meta)
        splits[k] = Split(a["x"], a["t"], a["mask"], y)
    if "all" in splits:
        pool = splits.pop("all")
        strata = pool.y if not per_step and not regression else np.zeros(len(pool))
        fractions = (1 - p.val_fraction - p.test_fraction, p.val_fraction, p.test_fraction)
        try:
            splits = {k: take(pool, idx) for k, idx in stratified_split(strata, p.seed, fractions).items()}
        except ValueError as exc:
            raise DataError(f"{files['all']}: cannot split {len(pool)} series (seed {p.seed}): "
                            f"{' '.join(str(exc).split())}") from None
    elif not regression:
        seen = set(np.unique(splits["train"].y[splits["train"].mask] if per_step else splits["train"].y).tolist())
        for k in ("val", "test"):
            s = splits[k]
            labels = np.where(s.mask, s.y, s.y[:, :1]) if per_step else s.y
            new = np.flatnonzero(~np.isin(labels, list(seen)).reshape(len(s), -1).all(axis=1))
            if len(new):
                raise DataError(f"{files[k]}: series {new[0]}: a class that never appears in train.npz "
                                f"(train has {[classes[c] for c in sorted(seen)][:20]}); allowed: classes that train has")
    splits, mean, std = standardise(splits)
    meta = replace(meta, sizes={k: len(splits[k]) for k in SPLITS}, norm_mean=mean.tolist(), norm_std=std.tolist(),
                   classes=classes, source=f"local {p.path} ({'split by rule' if 'all' in copies else 'its own splits'}), seed {p.seed}")
    return Dataset(meta, {k: splits[k] for k in SPLITS})
