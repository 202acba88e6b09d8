"""UCI "Localization Data for Person Activity": per-step activity of 7 merged classes.

Source: https://archive.ics.uci.edu/ml/machine-learning-databases/00196/ConfLongDemo_JSI.txt
(the address in mlech26l/ode-lstms download_dataset.sh and YuliaRubanova/latent_ode
person_activity.py). Five people (A-E) wear four Ubisense tags (left ankle, right ankle, chest,
belt); each row is one tag reading:

    sequence name, tag id, timestamp, date, x, y, z, activity
    A01,010-000-024-033,633790226051280329,27.05.2009 14:03:25:127,4.06,1.89,0.51,walking

The preprocessing is ODE-LSTM's (Lechner & Hasani 2020, mlech26l/ode-lstms
irregular_sampled_datasets.py `PersonData`; the same class is in raminmh/CfC
irregular_sampled_datasets.py, and CDR-NDE, Anumasa & Srijith, uses ODE-LSTM's data code):
  * one step per row, 7 features: the tag as a one-hot of 4, then the x, y, z coordinates;
  * the 11 activities merged to 7 classes with ODE-LSTM's `class_map` (`CLASS_OF` below);
  * a recording is a run of consecutive rows with the same sequence name (A01, A02, ...);
  * time: the timestamp counts 100 ns ticks; ODE-LSTM's elapsed time between rows is
    (ticks - previous ticks) / 10**6, i.e. 1.0 = 100 ms ("100ms will be normalized to 1.0"),
    and the first row of a recording gets 5.0 (its 0.05 s constant, scaled the same way);
  * windows of 32 rows with stride 16 (seq_len // 2), starts range(0, n - 32, 16) per recording
    (a recording of exactly n = start + 32 rows gives no window at that start, as there);
  * split of the windows: np.random.RandomState(98841).permutation, the first int(0.2 N) are
    test, the rest train.

Times in x's contract: t are cumulative sums of ODE-LSTM's elapsed times within each window, so
the elapsed times every family derives (pipeline.models.base.elapsed_times: t[0], then
differences) are exactly ODE-LSTM's inputs: t[0] is the gap from the row before the window
(5.0 for a window that starts a recording).

Deviations, and why:
  * validation: the reference has train/test only; `val_fraction` (default 0.1) of the
    reference's train windows, taken from the front of the same permutation's train part,
    form the validation split, so the reference's train set shrinks by that much.
  * the last recording: ODE-LSTM's loop only stores a recording when the next one starts, so the
    file's last recording (E05) is silently never used; we keep it. The window count, hence the
    permutation's length, differs, so our test windows are not the reference's exact test set.
  * rows are stably sorted by timestamp within a recording (a no-op on the published file, which
    is in time order), so times never go backwards.
  * x is standardised with train statistics (`contract.standardise`, the project's rule); the
    reference feeds raw values. Labels and times are unchanged.
  * CfC's own person-activity script (raminmh/CfC train_person_acitivity.py, duv_person_activity.py)
    uses Latent ODE's variant instead (12 coordinates + mask in 100 ms bins, windows of 50):
    this module implements the ODE-LSTM variant the issue specifies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from pipeline.config import PersonActivityParams
from pipeline.data.contract import Dataset, Meta, Split, standardise, take
from pipeline.data.download import RawFile
from pipeline.errors import DataError

URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/00196/ConfLongDemo_JSI.txt"
FILENAME = "ConfLongDemo_JSI.txt"

# Tag id -> one-hot position (ODE-LSTM's `sensor_ids`; body parts from Latent ODE's comments).
TAGS = {
    "010-000-024-033": 0,  # left ankle
    "010-000-030-096": 1,  # right ankle
    "020-000-033-111": 2,  # chest
    "020-000-032-221": 3,  # belt
}
CHANNELS = ["tag_ankle_left", "tag_ankle_right", "tag_chest", "tag_belt", "x", "y", "z"]

# The 11 activities of the file -> 7 classes (ODE-LSTM's `class_map`).
CLASS_OF = {
    "lying down": 0,
    "lying": 0,
    "sitting down": 1,
    "sitting": 1,
    "standing up from lying": 2,
    "standing up from sitting": 2,
    "standing up from sitting on the ground": 2,
    "walking": 3,
    "falling": 4,
    "on all fours": 5,
    "sitting on the ground": 6,
}
CLASSES = ["lying", "sitting", "standing up", "walking", "falling", "on all fours", "sitting on the ground"]

TICKS_PER_UNIT = 1_000_000  # 100 ns ticks in one time unit (100 ms)
FIRST_ELAPSED = 5.0  # ODE-LSTM's elapsed time at a recording's first row (0.05 s -> 5.0 units)
TEST_FRACTION = 0.2  # ODE-LSTM: test_size = int(0.2 * total_seqs)
N_FIELDS = 8


def raw_files(p: PersonActivityParams) -> list[RawFile]:
    """The UCI text file; UCI publishes no checksum, so it is recorded on first download."""
    return [RawFile(url=URL, filename=FILENAME)]


def _bad_line(path: Path, line: int, message: str) -> DataError:
    return DataError(f"{path.name} line {line}: {message}")


def _lookup(path: Path, values: np.ndarray, lines: np.ndarray, known: dict[str, int], what: str) -> np.ndarray:
    """Map the strings `values` (N,) to integers through `known`; an unknown one is a DataError."""
    uniques, inverse = np.unique(values, return_inverse=True)
    codes = np.array([known.get(u, -1) for u in uniques], dtype=np.int64)
    if (codes < 0).any():
        first = int(np.flatnonzero(codes[inverse] < 0)[0])
        raise _bad_line(path, int(lines[first]), f"unknown {what} {str(values[first])!r}; known: {sorted(known)}")
    return codes[inverse]


def _convert(path: Path, column: np.ndarray, lines: np.ndarray, dtype: type, what: str) -> np.ndarray:
    try:
        return column.astype(dtype)
    except ValueError:
        for row, line in zip(column.reshape(len(lines), -1), lines):  # only on failure: find the row
            for value in row:
                try:
                    dtype(value)
                except ValueError:
                    raise _bad_line(path, int(line), f"{what} {str(value)!r} is not a number") from None
        raise


def read_rows(path: Path) -> dict[str, np.ndarray]:
    """Parse the file: per row its sequence name, tag index, timestamp (ticks), x/y/z, class.

    Blank lines are skipped; any other line must have 8 comma-separated fields. Returns arrays
    of length R (rows in file order) plus `line`, the 1-based line number of each row.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read as text ({exc})") from exc
    numbered = [(i + 1, s) for i, s in enumerate(text.splitlines()) if s.strip()]
    if not numbered:
        raise DataError(f"{path.name}: no data rows")
    lines = np.array([i for i, _ in numbered], dtype=np.int64)
    fields = [s.split(",") for _, s in numbered]
    counts = np.fromiter(map(len, fields), dtype=np.int64, count=len(fields))
    wrong = np.flatnonzero(counts != N_FIELDS)
    if wrong.size:
        k = int(wrong[0])
        raise _bad_line(path, int(lines[k]), f"expected {N_FIELDS} comma-separated fields "
                        f"(sequence, tag, timestamp, date, x, y, z, activity), got {counts[k]}: {numbered[k][1]!r}")
    # One array per column (each only as wide as its longest entry); strip also drops a '\r'.
    sequence, tag, ticks, _date, *xyz, label = (np.char.strip(np.array(c, dtype=str)) for c in zip(*fields))
    return {
        "line": lines,
        "sequence": sequence,
        "tag": _lookup(path, tag, lines, TAGS, "tag id"),
        "ticks": _convert(path, ticks, lines, int, "timestamp"),
        "xyz": _convert(path, np.stack(xyz, axis=1), lines, float, "coordinate"),
        "label": _lookup(path, label, lines, CLASS_OF, "activity"),
    }


def recording_bounds(sequence: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) row ranges of runs of consecutive rows with the same sequence name."""
    change = np.flatnonzero(sequence[1:] != sequence[:-1]) + 1
    edges = np.concatenate([[0], change, [len(sequence)]])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def window_recording(features: np.ndarray, ticks: np.ndarray, labels: np.ndarray, window: int,
                     stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut one recording (rows in time order) into windows, as ODE-LSTM's cut_in_sequences.

    Returns x (W, window, 7) float32, t (W, window) float32 (cumulative elapsed times in 100 ms
    units, starting from the row before the window), y (W, window) int64.
    """
    starts = np.arange(0, len(ticks) - window, stride)
    if starts.size == 0:
        return (np.zeros((0, window, features.shape[1]), np.float32), np.zeros((0, window), np.float32),
                np.zeros((0, window), np.int64))
    # Time of each row in units of 100 ms; the recording "starts" FIRST_ELAPSED before row 0.
    since_first = (ticks - ticks[0]).astype(np.float64) / TICKS_PER_UNIT  # exact int64 difference first
    clock = FIRST_ELAPSED + since_first
    before = np.concatenate([[0.0], clock])[starts]  # time of the row before each window (0 for row 0)
    idx = starts[:, None] + np.arange(window)[None, :]  # (W, window)
    t = (clock[idx] - before[:, None]).astype(np.float32)
    return features[idx].astype(np.float32), t, labels[idx]


def split_indices(n: int, val_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """ODE-LSTM's split (test = first int(0.2 n) of RandomState(seed).permutation(n)), with
    validation carved from the front of the remaining (train) part."""
    permutation = np.random.RandomState(seed).permutation(n)
    n_test = int(TEST_FRACTION * n)
    rest = permutation[n_test:]
    n_val = int(val_fraction * len(rest))
    return {"train": np.sort(rest[n_val:]), "val": np.sort(rest[:n_val]), "test": np.sort(permutation[:n_test])}


def build(name: str, p: PersonActivityParams, raw_dir: Path) -> Dataset:
    """ConfLongDemo_JSI.txt -> windows with one label per step, standardised with train stats."""
    rows = read_rows(Path(raw_dir) / FILENAME)
    features = np.concatenate([np.eye(len(TAGS), dtype=np.float32)[rows["tag"]],
                               rows["xyz"].astype(np.float32)], axis=1)  # (R, 7)
    xs, ts, ys = [], [], []
    bounds = recording_bounds(rows["sequence"])
    for a, b in tqdm(bounds, desc="person_activity recordings", disable=None):
        order = a + np.argsort(rows["ticks"][a:b], kind="stable")  # no-op on the published file
        x, t, y = window_recording(features[order], rows["ticks"][order], rows["label"][order], p.window, p.stride)
        xs.append(x)
        ts.append(t)
        ys.append(y)
    x, t, y = np.concatenate(xs), np.concatenate(ts), np.concatenate(ys)
    n = len(y)
    idx = split_indices(n, p.val_fraction, p.seed)
    empty = [k for k, v in idx.items() if v.size == 0]
    if empty:
        raise DataError(f"{FILENAME}: {len(bounds)} recordings give {n} windows of {p.window} rows "
                        f"(stride {p.stride}), too few for non-empty {empty} splits")
    full = Split(x=x, t=t, mask=np.ones(t.shape, bool), y=y)
    splits, mean, std = standardise({k: take(full, v) for k, v in idx.items()})
    meta = Meta(
        name=name, task="classification", per_step=True, output_size=len(CLASSES), metric="accuracy",
        channels=CHANNELS,
        source=(f"UCI Localization Data for Person Activity ({URL}); ODE-LSTM preprocessing "
                f"(mlech26l/ode-lstms PersonData): 4-tag one-hot + x,y,z per row, 11 activities merged "
                f"to 7, {len(bounds)} recordings cut into windows of {p.window} rows with stride {p.stride}, "
                f"times in units of 100 ms; test = first 20% of RandomState({p.seed}).permutation "
                f"of the windows, validation = {p.val_fraction:g} of the rest"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=CLASSES,
    )
    return Dataset(meta, splits)
