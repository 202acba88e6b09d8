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
    `variant: odelstm` (the default) is the ODE-LSTM variant the issue specifies.

`variant: rubanova` -- Latent ODE's preprocessing (Rubanova et al. 2019), the one Temporal
Weights uses (Kohan et al. 2022 Sec. 3.2, Table 3: "6,554 sequences of 211 time points", "12
features of 3D positions ... (3 dimensions x 4 tags)", 7 classes at each time point). Same UCI
file (Rubanova's `urls`). Facts from YuliaRubanova/latent_ode person_activity.py
(`PersonActivity.download`, `variable_time_collate_fn_activity`), lib/parse_datasets.py
("activity") and lib/utils.py / lib/likelihood_eval.py (how labels are scored):
  * a recording is a run of consecutive rows with the same sequence name; the file's last
    recording is kept (saved after the loop; ODE-LSTM's loop loses it);
  * time: round((ticks - first ticks of the recording) / 10**5). The timestamps are .NET ticks of
    100 ns (10**7 per second), so a bin is 10 ms; the code's comment says "quatizing by 100 ms"
    but its own scale ("10,000 is one millisecond") gives 10 ms, and the code is what ran;
  * one step per bin that holds a reading: 12 features, the tags in Rubanova's `tag_ids` order
    (left ankle, right ankle, chest, belt) each with x, y, z (`vals.reshape(T, -1)` of (T, 4, 3));
    several readings of one tag in a bin are averaged (`reduce='average'`); a tag with no reading
    in the bin is missing (Rubanova: 0 with mask 0; here NaN, the contract's missing value);
  * labels: the 11 activities merged to 7 with Rubanova's `label_dict` (walking 0, falling 1,
    lying 2, sitting 3, standing up 4, on all fours 5, sitting on the ground 6). A bin's label
    vector is multi-hot over its rows and both the loss and the accuracy take its argmax, i.e.
    the lowest class index among the bin's rows; so here, too;
  * chunks: `max_seq_length` 50 bins, slide 50 // 2 = 25, offsets 0, 25, ... while
    offset + 50 < n (a recording of exactly 50 bins gives none); times relative to the chunk's
    first bin (tt[idx] - tt[idx][0]), so t[0] = 0;
  * split: sklearn train_test_split(chunks, train_size=0.8, random_state=42, shuffle=True).
Sizes (an estimate; the real file is not read by the tests): it has 164,860 rows in 25
recordings ("6,600 time points on average"), rows tens of milliseconds apart, so nearly every
row is its own 10 ms bin, and the sum over recordings of ceil((n - 50) / 25) is about
(164,860 - 25 * 50) / 25 + 25 / 2 ~ 6,557: TW's and Rubanova's 6,554 sequences are these chunks
of 50 bins. Their "211 time points" is then, as far as the code shows, the union time grid of a
batch (variable_time_collate_fn_activity puts a batch on the sorted union of its chunks'
relative times, 10 ms bins over chunks spanning one to a few seconds), not one sequence's
length: here every sequence has its own 50 steps, exactly the points Rubanova scores (a union
point a chunk has no reading at carries an all-zero label and is left out of his accuracy).
Deviations, and why:
  * "standing up from sitting on the ground": Rubanova's `label_names` spells it "standing up
    from sit on grnd", which the file never contains, so his code leaves those rows unlabelled
    (a bin with only such rows is trained as class 0 and left out of the accuracy). The intended
    class is plain from his `label_dict` ("standing up from sit on grnd": 4), and the contract has
    no unscored observed step, so here it is class 4 (standing up).
  * times are in seconds (bin * 0.01): Rubanova divides a batch's union grid by its largest
    time, a per-batch unit no fixed preprocessing can reproduce; seconds keep t of order 1 too.
  * rows are stably sorted by timestamp within a recording (a no-op on the published file); the
    reference opens a new step whenever the rounded time changes from the previous row's.
  * bins are rounded from the exact integer tick difference; the reference rounds a difference
    of float64 timestamps (which carry 128-tick steps), so only a row within 13 us of a bin's
    half-way point could land in the neighbouring bin.
  * validation: the first `val_fraction` of Rubanova's train chunks, in train_test_split's
    shuffled order (the reference has train/test only). Rubanova then resamples each split with
    replacement, unseeded (np.random.choice); that is not reproduced.
  * x is standardised with train statistics (contract.standardise); NaN stays NaN.
  * not a deviation, a caveat: overlapping chunks (stride 25 of 50) are split at random, as in
    the reference, so test chunks share bins with train chunks, here as in the papers' numbers.

Longer than the package's other modules (about 400 lines, half of them this docstring) on
purpose: one source file, one reader and the two published preprocessings of it side by side,
each step of one written next to the step of the other it differs from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from pipeline.config import PersonActivityParams
from pipeline.data.contract import Dataset, Meta, Split, standardise, take
from pipeline.data.download import RawFile
from pipeline.data.overlap import overlap_note, window_rows
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

# Latent ODE's variant (Rubanova et al. 2019; person_activity.py `label_dict`), with the file's
# spelling of the sixth activity (his list says "standing up from sit on grnd": see the docstring).
RUBANOVA_CLASS_OF = {
    "walking": 0,
    "falling": 1,
    "lying": 2,
    "lying down": 2,
    "sitting": 3,
    "sitting down": 3,
    "standing up from lying": 4,
    "standing up from sitting": 4,
    "standing up from sitting on the ground": 4,
    "on all fours": 5,
    "sitting on the ground": 6,
}
RUBANOVA_CLASSES = ["walking", "falling", "lying", "sitting", "standing up", "on all fours", "sitting on the ground"]
RUBANOVA_CHANNELS = [f"{tag}_{axis}" for tag in ("ankle_left", "ankle_right", "chest", "belt") for axis in "xyz"]
RUBANOVA_BIN_TICKS = 100_000  # round(ticks / 10**5): 10 ms bins of 100 ns ticks
TICKS_PER_SECOND = 10_000_000  # .NET DateTime ticks
RUBANOVA_TRAIN_SIZE = 0.8  # train_test_split(..., train_size=0.8, ...)

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


def read_rows(path: Path, class_of: dict[str, int] = CLASS_OF) -> dict[str, np.ndarray]:
    """Parse the file: per row its sequence name, tag index, timestamp (ticks), x/y/z, class
    (through `class_of`: ODE-LSTM's merge by default, RUBANOVA_CLASS_OF for that variant).

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
        "label": _lookup(path, label, lines, class_of, "activity"),
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
    if p.variant == "rubanova":
        return build_rubanova(name, p, raw_dir)
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
    shared = overlap_note(window_rows([b - a for a, b in bounds], p.window, p.stride), idx)
    meta = Meta(
        name=name, task="classification", per_step=True, output_size=len(CLASSES), metric="accuracy",
        channels=CHANNELS, provenance=shared,
        source=(f"UCI Localization Data for Person Activity ({URL}); ODE-LSTM preprocessing "
                f"(mlech26l/ode-lstms PersonData): 4-tag one-hot + x,y,z per row, 11 activities merged "
                f"to 7, {len(bounds)} recordings cut into windows of {p.window} rows with stride {p.stride}, "
                f"times in units of 100 ms; test = first 20% of RandomState({p.seed}).permutation "
                f"of the windows, validation = {p.val_fraction:g} of the rest"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=CLASSES,
    )
    return Dataset(meta, splits)


# --- variant: rubanova (Latent ODE's preprocessing; see the module docstring) ---------------------


def bin_recording(tags: np.ndarray, ticks: np.ndarray, xyz: np.ndarray,
                  labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One recording's rows (R, in time order) -> its 10 ms bins that hold a reading, as Rubanova's
    PersonActivity.download builds its time points.

    Args: tags (R,) tag index 0-3, ticks (R,) int64, xyz (R, 3), labels (R,) RUBANOVA_CLASS_OF codes.
    Returns bins (B,) int64 (bin index since the recording's first row), values (B, 12) float32
    (tag-major x, y, z, each tag's readings in the bin averaged, NaN where it has none), labels
    (B,) int64 (the lowest class among the bin's rows: the argmax of Rubanova's multi-hot vector).
    """
    since_first = (ticks - ticks[0]).astype(np.float64)  # exact int64 difference first
    bins = np.round(since_first / RUBANOVA_BIN_TICKS).astype(np.int64)  # half to even, as Python's round
    new_bin = np.diff(bins) != 0  # rows are sorted: a bin is a run of rows
    starts = np.concatenate([[0], np.flatnonzero(new_bin) + 1])  # (B,) first row of each bin
    group = np.concatenate([[0], np.cumsum(new_bin)])  # (R,) each row's bin number
    n_bins, n_tags = len(starts), len(TAGS)
    cell = group * n_tags + tags  # (R,) one cell per (bin, tag)
    counts = np.bincount(cell, minlength=n_bins * n_tags).astype(np.float64)
    sums = np.stack([np.bincount(cell, weights=xyz[:, k], minlength=n_bins * n_tags) for k in range(3)], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 -> NaN: the tag is missing there
        means = sums / counts[:, None]
    values = means.reshape(n_bins, n_tags * 3).astype(np.float32)
    return bins[starts], values, np.minimum.reduceat(labels, starts).astype(np.int64)


def chunk_recording(bins: np.ndarray, values: np.ndarray, labels: np.ndarray, window: int,
                    stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut one recording's bins (B) into chunks as Rubanova's save_record: offsets 0, stride, ...
    while offset + window < B.

    Returns x (W, window, 12) float32, t (W, window) float32 seconds since the chunk's first bin
    (so t[:, 0] = 0), y (W, window) int64.
    """
    starts = np.arange(0, len(bins) - window, stride)
    if starts.size == 0:
        return (np.zeros((0, window, values.shape[1]), np.float32), np.zeros((0, window), np.float32),
                np.zeros((0, window), np.int64))
    idx = starts[:, None] + np.arange(window)[None, :]  # (W, window)
    relative = bins[idx] - bins[starts][:, None]  # whole bins: exact
    t = (relative / (TICKS_PER_SECOND // RUBANOVA_BIN_TICKS)).astype(np.float32)  # 100 bins per second
    return values[idx], t, labels[idx]


def rubanova_split(n: int, val_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """Rubanova's train_test_split(train_size=0.8, random_state=seed, shuffle=True) of n chunks,
    with validation the first `val_fraction` of its (shuffled) train part; sorted indices."""
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(n), train_size=RUBANOVA_TRAIN_SIZE, random_state=seed, shuffle=True)
    n_val = int(val_fraction * len(train))
    return {"train": np.sort(train[n_val:]), "val": np.sort(train[:n_val]), "test": np.sort(test)}


def build_rubanova(name: str, p: PersonActivityParams, raw_dir: Path) -> Dataset:
    """ConfLongDemo_JSI.txt -> Latent ODE's chunks of `window` 10 ms bins: x (N, window, 12) with
    NaN for a tag not read in a bin, t (N, window) seconds, y (N, window) of 7 classes."""
    rows = read_rows(Path(raw_dir) / FILENAME, RUBANOVA_CLASS_OF)
    bounds = recording_bounds(rows["sequence"])
    xs, ts, ys, lengths = [], [], [], []
    for a, b in tqdm(bounds, desc="person_activity recordings", disable=None):
        order = a + np.argsort(rows["ticks"][a:b], kind="stable")  # no-op on the published file
        binned = bin_recording(rows["tag"][order], rows["ticks"][order], rows["xyz"][order], rows["label"][order])
        x, t, y = chunk_recording(*binned, p.window, p.stride)
        lengths.append(len(binned[0]))  # bins: chunk_recording's starts range over them
        xs.append(x)
        ts.append(t)
        ys.append(y)
    x, t, y = np.concatenate(xs), np.concatenate(ts), np.concatenate(ys)
    n = len(y)
    try:
        idx = rubanova_split(n, p.val_fraction, p.seed)
    except ValueError as exc:  # sklearn refuses a split with an empty side
        raise DataError(f"{FILENAME}: {len(bounds)} recordings give {n} chunks of {p.window} bins "
                        f"(stride {p.stride}), too few to split 80/20: {exc}") from None
    empty = [k for k, v in idx.items() if v.size == 0]
    if empty:
        raise DataError(f"{FILENAME}: {len(bounds)} recordings give {n} chunks of {p.window} bins "
                        f"(stride {p.stride}), too few for non-empty {empty} splits")
    full = Split(x=x, t=t, mask=np.ones(t.shape, bool), y=y)
    splits, mean, std = standardise({k: take(full, v) for k, v in idx.items()})
    shared = overlap_note(window_rows(lengths, p.window, p.stride), idx)
    meta = Meta(
        name=name, task="classification", per_step=True, output_size=len(RUBANOVA_CLASSES), metric="accuracy",
        channels=RUBANOVA_CHANNELS, provenance=shared,
        source=(f"UCI Localization Data for Person Activity ({URL}); Latent ODE preprocessing (Rubanova et al. "
                f"2019, YuliaRubanova/latent_ode person_activity.py; Kohan et al. 2022 Sec. 3.2): 10 ms bins, "
                f"4 tags x (x, y, z) averaged per bin (NaN if a tag is not read), 11 activities merged to 7, "
                f"{len(bounds)} recordings cut into chunks of {p.window} bins with stride {p.stride}, times in "
                f"seconds from each chunk's first bin; train_test_split(train_size=0.8, random_state={p.seed}), "
                f"validation = the first {p.val_fraction:g} of its train part"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=RUBANOVA_CLASSES,
    )
    return Dataset(meta, splits)
