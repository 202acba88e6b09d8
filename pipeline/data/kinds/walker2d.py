"""Walker2d kinematic modelling: predict the next state of an irregularly sampled rollout.

Source: https://people.csail.mit.edu/mlechner/datasets/walker.zip (raminmh/CfC
download_dataset.sh; mlech26l/ode-lstms download_dataset.sh has the older address
https://pub.ist.ac.at/~mlechner/datasets/walker.zip). The zip holds walker/rollout_000.npy ...
rollout_399.npy, each a (T, 17) float64 array: one rollout of a Walker2d agent, one row per
simulation step (the 17 values look like Gym's Walker2d observation: 8 joint positions without
the x position, then 9 velocities; the first column, about 1.25 at rest, is the torso height).

The preprocessing is ODE-LSTM's (Lechner & Hasani 2020, mlech26l/ode-lstms
irregular_sampled_datasets.py `Walker2dImitationData`, also in raminmh/CfC and used by CDR-NDE):
  * files sorted by name, shuffled with np.random.RandomState(125487); the first
    int(0.15 n) are test, the next up to int((0.15 + 0.1) n) validation, the rest train
    (75/10/15 by file, so no rollout is in two splits);
  * per file, inputs are rows[:-1] and targets rows[1:]: the target of step i is row i + 1 of
    the file, the next simulation step (also when that row is itself dropped from the inputs);
  * irregular sampling: one np.random.RandomState(891374) drives every file, train files first,
    then validation, then test, one uniform draw per step (rng.rand(len) draws the same numbers
    as the reference's per-step rng.rand()); a step is kept when its draw is < 0.9
    (1 - drop_fraction). A kept step's elapsed time is the number of steps since the previous
    kept one (1 when nothing was dropped in between); the first kept step's is its index + 1;
  * windows of 64 kept steps with stride 16 (seq_len // 4), starts range(0, n_kept - 64, 16);
  * no normalisation of inputs or targets.

Times in the contract: t is the step index + 1 of each observation minus that of the kept step
before the window (0 before a file's first step), so the elapsed times every family derives
(t[0], then differences) are exactly ODE-LSTM's `times` input.

Targets: y (N, 64, 17) float32 in raw units, as in the reference, so the test MSE is comparable
with the papers' numbers. Inputs x are standardised with train statistics by default
(`contract.standardise`, the project's rule: a model sees standardised x and predicts raw y);
`scaling: raw` feeds them as the reference does, in the simulator's units (channel standard
deviations 0.15 to 6.5 in the training windows), which the paper profiles set.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
from tqdm import tqdm

from pipeline.config import Walker2dParams
from pipeline.data.contract import Dataset, Meta, Split, standardise
from pipeline.data.download import RawFile
from pipeline.errors import DataError

URL = "https://people.csail.mit.edu/mlechner/datasets/walker.zip"
FILENAME = "walker.zip"
STATE_DIM = 17
TEST_FRACTION = 0.15
VAL_FRACTION = 0.1
CHANNELS = [f"state_{i}" for i in range(STATE_DIM)]


def raw_files(p: Walker2dParams) -> list[RawFile]:
    """The zip of rollouts; no published checksum, so it is recorded on first download."""
    return [RawFile(url=URL, filename=FILENAME)]


def _is_rollout(name: str) -> bool:
    """A .npy member, not a folder nor macOS metadata (__MACOSX/, ._name)."""
    path = PurePosixPath(name)
    return (name.endswith(".npy") and not name.endswith("/") and "__MACOSX" not in path.parts
            and not path.name.startswith("._"))


def read_rollouts(zip_path: Path) -> dict[str, np.ndarray]:
    """Every rollout in the zip as a (T, 17) float32 array, keyed by member name, in sorted order.

    A member that is not a .npy array of shape (T >= 2, 17) with finite numbers is a DataError
    naming it.
    """
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{zip_path}: not a readable zip archive ({exc})") from exc
    rollouts = {}
    with archive:
        names = sorted(n for n in archive.namelist() if _is_rollout(n))
        if not names:
            raise DataError(f"{zip_path.name}: no .npy rollouts inside (members: {archive.namelist()[:5]} ...)")
        for name in tqdm(names, desc="walker2d rollouts", disable=None):
            try:
                arr = np.load(io.BytesIO(archive.read(name)), allow_pickle=False)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
                raise DataError(f"{zip_path.name}: member {name!r} is not a readable .npy array ({exc})") from exc
            if arr.ndim != 2 or arr.shape[1] != STATE_DIM or arr.shape[0] < 2 or arr.dtype.kind not in "fiu":
                raise DataError(f"{zip_path.name}: member {name!r} has shape {arr.shape} and dtype {arr.dtype}; "
                                f"expected a numeric (T, {STATE_DIM}) array with T >= 2")
            if not np.isfinite(arr).all():
                raise DataError(f"{zip_path.name}: member {name!r} holds non-finite values")
            rollouts[name] = arr.astype(np.float32)
    return rollouts


def split_files(names: list[str], seed: int) -> dict[str, list[str]]:
    """ODE-LSTM's file split: shuffle the sorted names, then test | validation | train."""
    shuffled = list(names)
    np.random.RandomState(seed).shuffle(shuffled)
    n_test = int(TEST_FRACTION * len(shuffled))
    n_test_val = int((TEST_FRACTION + VAL_FRACTION) * len(shuffled))
    return {"train": shuffled[n_test_val:], "val": shuffled[n_test:n_test_val], "test": shuffled[:n_test]}


def window_rollout(rollout: np.ndarray, keep: np.ndarray, window: int, stride: int) -> tuple[np.ndarray, ...]:
    """One rollout (T, 17) and its kept-step mask (T - 1,) -> x, t, y windows.

    x (W, window, 17) kept rows, y (W, window, 17) the row after each kept row, t (W, window)
    step index + 1 minus that of the kept step before the window.
    """
    kept = np.flatnonzero(keep)
    starts = np.arange(0, len(kept) - window, stride)
    if starts.size == 0:
        return (np.zeros((0, window, STATE_DIM), np.float32), np.zeros((0, window), np.float32),
                np.zeros((0, window, STATE_DIM), np.float32))
    idx = starts[:, None] + np.arange(window)[None, :]  # (W, window) positions among kept steps
    clock = (kept + 1).astype(np.float64)  # reference elapsed times are differences of this
    before = np.concatenate([[0.0], clock])[starts]
    rows = kept[idx]  # (W, window) row indices into the file
    t = (clock[idx] - before[:, None]).astype(np.float32)
    return rollout[rows], t, rollout[rows + 1]


def build(name: str, p: Walker2dParams, raw_dir: Path) -> Dataset:
    """walker.zip -> file-level train/val/test windows for next-step regression."""
    rollouts = read_rollouts(Path(raw_dir) / FILENAME)
    files = split_files(list(rollouts), p.seed)
    rng = np.random.RandomState(p.drop_seed)  # one stream: train, then val, then test files
    raw: dict[str, Split] = {}
    for split in ("train", "val", "test"):
        xs, ts, ys = [], [], []
        for member in files[split]:
            rollout = rollouts[member]
            keep = rng.rand(len(rollout) - 1) < 1.0 - p.drop_fraction
            x, t, y = window_rollout(rollout, keep, p.window, p.stride)
            xs.append(x)
            ts.append(t)
            ys.append(y)
        x = np.concatenate(xs) if xs else np.zeros((0, p.window, STATE_DIM), np.float32)
        if len(x) == 0:
            raise DataError(f"{FILENAME}: the {split} split ({len(files[split])} of {len(rollouts)} rollouts) "
                            f"gives no window of {p.window} kept steps; too few or too short rollouts")
        t, y = np.concatenate(ts), np.concatenate(ys)
        raw[split] = Split(x=x, t=t, mask=np.ones(t.shape, bool), y=y)
    splits, mean, std = standardise(raw) if p.scaling == "standard" else unscaled(raw)
    meta = Meta(
        name=name, task="regression", per_step=True, output_size=STATE_DIM, metric="mse", channels=CHANNELS,
        source=(f"Walker2d kinematics ({URL}); ODE-LSTM preprocessing (mlech26l/ode-lstms "
                f"Walker2dImitationData): {len(rollouts)} rollouts split 75/10/15 by file "
                f"(RandomState({p.seed}) shuffle), {p.drop_fraction:.0%} of steps dropped "
                f"(RandomState({p.drop_seed})), times in simulation steps, windows of {p.window} kept "
                f"steps with stride {p.stride}; target = the next simulation step, raw (not standardised)"
                f"{'; inputs raw, as the reference feeds them' if p.scaling == 'raw' else ''}"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
    )
    return Dataset(meta, splits)


def unscaled(splits: dict[str, Split]) -> tuple[dict[str, Split], np.ndarray, np.ndarray]:
    """The splits as they are, with the identity's (centre 0, scale 1) for meta.json's norm_mean
    and norm_std, so serving scales a request's inputs the same way (not at all)."""
    return splits, np.zeros(STATE_DIM, np.float32), np.ones(STATE_DIM, np.float32)
