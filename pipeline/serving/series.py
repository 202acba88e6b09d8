"""The series a user hands `ctsweep predict`: an .npz of arrays or a long .csv, read and checked.

    series.npz   x (N, L, C) float, NaN where missing or padded
                 t (N, L) float, non-decreasing per row; padding repeats the last time
                 mask (N, L) bool, optional: True on a prefix of each row (the observed steps);
                     default: every step up to the row's last step with any value
                 ids (N,) optional series names; default "0", "1", ...
    series.csv   long format, one row per observation: columns `series`, `time`, then one
                 column per channel (empty cell = not observed), in any order. Rows are
                 grouped by `series` (first-appearance order) and sorted by time.

Every error names the file, what is wrong and what is allowed (DataError), in one line that echoes
at most a short prefix of a value (pipeline.names.shown). Arrays must hold real numbers: complex,
text, dates and objects are refused, never converted (numpy would drop an imaginary part).
"""

from __future__ import annotations

import csv
import math
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.data.contract import pad_sequences
from pipeline.data.kinds.local.long_csv import (  # the layout's key columns and checks, shared with the `local` kind
    SERIES, TIME, check_csv_bytes, check_separator)
from pipeline.errors import DataError
from pipeline.names import shown

SUFFIXES = (".npz", ".csv")
NPZ_ARRAYS = ("x", "t", "mask", "ids")


@dataclass(frozen=True)
class Series:
    """N series padded to a common length L.

    ids: N names. x: (N, L, C) float32 raw values, NaN where missing or padded.
    t: (N, L) float32 times, padding repeats the last time. mask: (N, L) bool, True at observed
    steps, which form a prefix of each row.
    """

    ids: list[str]
    x: np.ndarray
    t: np.ndarray
    mask: np.ndarray


# --------------------------------------------------------------------------------- reading


def read_series(path: Path, channels: list[str]) -> Series:
    """Read an .npz or .csv file of series in the given channels (the model's `meta.channels`).

    Raises DataError naming the file, what is wrong and what is allowed.
    """
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise DataError(f"{path}: unknown file type {shown(path.suffix or '(no suffix)')}; "
                        f"allowed: {', '.join(SUFFIXES)}")
    if not path.is_file():
        raise DataError(f"{path}: {_not_a_file(path)}")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: empty file; expected {_format_hint(path, channels)}")
    series = _read_npz(path, channels) if path.suffix.lower() == ".npz" else _read_csv(path, channels)
    _check_times(path, series)
    return series


def _not_a_file(path: Path) -> str:
    """Why `path`, which is not a regular file, cannot be read: missing, or what it is instead (a
    FIFO would block the read, a device such as /dev/zero never end it)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "no such file"
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((name for test, name in kinds if test(mode)), "not a regular file")
    via = f" (a link to {path.resolve()})" if path.is_symlink() else ""
    return f"{what}{via}, not a regular file; allowed: a .csv or .npz file"


def _format_hint(path: Path, channels: list[str]) -> str:
    if path.suffix.lower() == ".npz":
        return f"arrays x (N, L, {len(channels)}), t (N, L), optional mask (N, L) and ids (N,)"
    return f"a CSV header {','.join([SERIES, TIME, *channels])} and one row per observation"


def _read_npz(path: Path, channels: list[str]) -> Series:
    """x (N, L, C), t (N, L), optional mask (N, L) and ids (N,) -> Series."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k in NPZ_ARRAYS}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc}); expected {_format_hint(path, channels)}") from exc
    for key in ("x", "t"):
        if key not in arrays:
            raise DataError(f"{path}: missing array {key!r}; expected {_format_hint(path, channels)}")
    x = real_array(path, "x", arrays["x"])
    t = real_array(path, "t", arrays["t"])
    if x.ndim != 3:
        raise DataError(f"{path}: x has shape {x.shape}; expected (N, L, C) with C = {len(channels)}")
    n, length, c = x.shape
    if c != len(channels):
        raise DataError(f"{path}: x has {c} channels; the model expects {len(channels)} = {channels}")
    if n == 0 or length == 0:
        raise DataError(f"{path}: empty file: x has shape {x.shape}; expected at least one series and one step")
    if t.shape != (n, length):
        raise DataError(f"{path}: t has shape {t.shape}; expected (N, L) = {(n, length)} to match x {x.shape}")
    mask = _npz_mask(path, arrays.get("mask"), x)
    ids = _npz_ids(path, arrays.get("ids"), n)
    return Series(ids, x, t, mask)


def is_real(dtype: np.dtype) -> bool:
    """Booleans, integers and floats: the dtypes a value array may have (not complex, text, dates)."""
    return dtype == bool or np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)


def real_array(source: str | Path, key: str, a: np.ndarray) -> np.ndarray:
    """`a` as float32 if its dtype is real (is_real); else DataError naming `source` and `key`.
    A value beyond float32's range becomes inf, which `screen` refuses by series."""
    if not is_real(a.dtype):
        raise DataError(f"{source}: array {key!r} has dtype {a.dtype}; expected real numbers (bool, int or float)"
                        + ("; complex values are not taken, not even with a zero imaginary part"
                           if np.issubdtype(a.dtype, np.complexfloating) else ""))
    with np.errstate(over="ignore"):
        return a.astype(np.float32)


def _npz_mask(path: Path, mask: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """The given mask (checked), or every step up to each row's last step with any value: (N, L)."""
    if mask is None:
        has_value = ~np.isnan(x).all(axis=-1)  # (N, L)
        last = np.where(has_value.any(axis=1), x.shape[1] - 1 - np.argmax(has_value[:, ::-1], axis=1), -1)
        mask = np.arange(x.shape[1])[None, :] <= last[:, None]
    else:
        if not is_real(mask.dtype):
            raise DataError(f"{path}: mask has dtype {mask.dtype}; expected bool")
        if mask.shape != x.shape[:2]:
            raise DataError(f"{path}: mask has shape {mask.shape}; expected (N, L) = {x.shape[:2]} to match x")
        if mask.dtype != bool and not np.isin(mask, (0, 1)).all():
            raise DataError(f"{path}: mask has dtype {mask.dtype} with values other than 0/1; expected bool")
        mask = mask.astype(bool)
        if (mask[:, 1:] & ~mask[:, :-1]).any():
            row = int(np.argmax((mask[:, 1:] & ~mask[:, :-1]).any(axis=1)))
            raise DataError(f"{path}: mask of series {row} has an observed step after padding; allowed: "
                            f"True on a prefix of each row (observed steps first, padding after)")
    return mask


def _npz_ids(path: Path, ids: np.ndarray | None, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    if ids.shape != (n,):
        raise DataError(f"{path}: ids has shape {ids.shape}; expected (N,) = ({n},), one name per series")
    if ids.dtype.kind == "S":  # bytes, as numpy saves a list of bytes
        names = [i.decode("utf-8", "replace") for i in ids.tolist()]
    else:
        names = [str(i) for i in ids.tolist()]
    _check_unique(path, names)
    return names


def _check_unique(path: Path, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DataError(f"{path}: series id {shown(name)} appears twice in ids; each series needs its own id")
        seen.add(name)


def _read_csv(path: Path, channels: list[str]) -> Series:
    """Long-format CSV (series, time, channels...) -> Series, padded to the longest series."""
    check_csv_bytes(path, str(path))  # UTF-16/32 and NUL bytes, as the `local` kind refuses them
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # a UTF-8 BOM is not part of `series`
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: not a readable UTF-8 CSV file ({exc}); "
                        f"expected {_format_hint(path, channels)}") from exc
    rows = [r for r in rows if any(cell.strip() for cell in r)]  # blank lines
    if not rows:
        raise DataError(f"{path}: empty file; expected {_format_hint(path, channels)}")
    header, body = [h.strip() for h in rows[0]], rows[1:]
    _check_header(path, header, channels)
    if not body:
        raise DataError(f"{path}: empty file: a header but no rows; expected one row per observation")
    order = [header.index(name) for name in (SERIES, TIME, *channels)]
    groups: dict[str, list[tuple[float, list[float]]]] = {}
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise DataError(f"{path}: line {line} has {len(row)} fields; the header has {len(header)}")
        # The series id as written (a leading tab or carriage return is part of it: the predictions
        # name the series the file named); the numbers without the spaces around them.
        name, time, *values = (row[order[0]], *(row[i].strip() for i in order[1:]))
        if not name.strip():
            raise DataError(f"{path}: line {line}: empty {SERIES!r}; every row names its series")
        observed = [_cell(path, line, c, v) for c, v in zip(channels, values)]
        groups.setdefault(name, []).append((_time(path, line, time), observed))
    values, times = [], []
    for name, obs in groups.items():
        obs.sort(key=lambda o: o[0])  # stable: equal times keep their file order
        times.append(np.array([o[0] for o in obs], np.float32))
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, which `screen` refuses by series
            values.append(np.array([o[1] for o in obs], np.float32).reshape(len(obs), len(channels)))
    x, t, mask = pad_sequences(values, times)
    return Series(list(groups), x, t, mask)


def _check_header(path: Path, header: list[str], channels: list[str]) -> None:
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise DataError(f"{path}: duplicated columns {_names(duplicated)}")
    allowed = [SERIES, TIME, *channels]
    missing = [name for name in allowed if name not in header]
    if missing:
        check_separator(path, str(path))  # a header split by ';', tabs or '|': say so, not "missing columns"
        raise DataError(f"{path}: missing columns {missing}; expected columns {_names(allowed)} (the model's channels)")
    extra = [h for h in header if h not in allowed]
    if extra:
        raise DataError(f"{path}: unknown columns {_names(extra)}; allowed columns: {_names(allowed)} "
                        f"(the model's channels)")


def _names(names: list[str], most: int = 20) -> str:
    """A list of column names as in an error: each cut short, at most `most` of them."""
    more = f", ... ({len(names)} in all)" if len(names) > most else ""
    return "[" + ", ".join(shown(n) for n in names[:most]) + more + "]"


def _cell(path: Path, line: int, column: str, text: str, allow_empty: bool = True) -> float:
    """One CSV cell as a float; an empty cell is NaN (not observed) where allowed."""
    if not text and allow_empty:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise DataError(f"{path}: line {line}, column {shown(column)}: {shown(text)} is not a number"
                        + ("; leave the cell empty when not observed" if allow_empty else "")) from None


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _time(path: Path, line: int, text: str) -> float:
    """A CSV row's time: a number a float32 holds (the model reads times as float32; a larger one
    would become inf)."""
    t = _cell(path, line, TIME, text, allow_empty=False)
    if math.isfinite(t) and abs(t) > FLOAT32_MAX:
        raise DataError(f"{path}: line {line}, column {shown(TIME)}: {shown(text)} is beyond the float32 range the "
                        f"model reads times in; allowed: finite times of magnitude up to {FLOAT32_MAX:.3g}")
    return t


def _check_times(path: Path, s: Series) -> None:
    """Times finite and non-decreasing along every row (padding repeats the last time)."""
    bad = ~np.isfinite(s.t)
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(f"{path}: series {shown(s.ids[i])} has a non-finite time ({s.t[i, j]:g}) at step {j}; "
                        f"allowed: finite times")
    back = np.diff(s.t, axis=1) < 0
    if back.any():
        i, j = (int(v) for v in np.argwhere(back)[0])
        raise DataError(f"{path}: series {shown(s.ids[i])} has decreasing times ({s.t[i, j]:g} then {s.t[i, j + 1]:g} "
                        f"at step {j + 1}); allowed: non-decreasing times, padding repeating the last one")
