"""Long-format CSV files of labelled series, for the `local` kind.

    series,time,<channel>,...,label[,split]
    a,0.0,1.2,,walk,train          one row per observation; an empty cell is not observed
    a,0.5,,3.4,walk,train          rows of a series in increasing time order (series may interleave)

This is the layout `ctsweep predict` reads (pipeline/serving/predict.py, SERIES and TIME) plus a label
column and an optional split column. A label constant within each series is the series' label;
one that varies is a label per step. Parsing is pandas'; the checks here only turn its columns
into series and say, in one line naming the file, the line and the series, what is wrong.

What is read and what is refused (each in one line; a value is echoed as a short prefix and its
length, errors.excerpt):
  * text: UTF-8; a UTF-8 byte-order mark (Excel's "CSV UTF-8") is accepted and dropped. A UTF-16
    or UTF-32 mark is refused: pandas would misread the text rather than fail.
  * separator: commas only. A header separated by ';', a tab or '|' is refused naming the one
    found, not accepted with a notice: a ';' file mostly comes from a locale whose decimal mark is
    ',', so taking the separator alone would then misread or refuse every number, and
    `ctsweep predict` reads commas too.
  * NUL bytes: refused anywhere, naming the line and the column (pandas ends a cell at a NUL and
    silently drops the rest of it).
  * missing values: an empty channel cell is the one way to say "not observed". Text such as
    'nan', 'NaN', 'NA' or 'inf' in a channel or time cell is refused like any other cell that is not
    a finite number, rather than read as missing: 'inf' was refused, 'nan' silently taken, and a
    file whose 'nan' marks a sensor fault should not pass as data with gaps. A label that reads as
    'nan' or 'inf' is refused like an empty label (and never taken as a class name).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.errors import DataError, excerpt

SERIES, TIME = "series", "time"
SPLIT_VALUES = ("train", "val", "test")
ENCODING = "utf-8-sig"  # UTF-8, its byte-order mark dropped when there is one
SEPARATORS = {";": "';'", "\t": "tabs", "|": "'|'"}  # what other tools write instead of commas
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
               (b"\xfe\xff", "UTF-16"))  # UTF-32 LE first: its mark begins with UTF-16 LE's
_NOT_FINITE = ("nan", "inf", "infinity")  # lower case, sign stripped: what pandas reads as a non-finite number
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    """Labelled series read from one file.

    values: (L_i, C) float32 arrays; times: (L_i,) float32; labels: (L_i,) per step (CSV: strings)
    or (1,) per series (.ts); lines: the CSV line of every step, for errors (None for .ts);
    splits: each series' split from a split column, or None; regression: the file says its
    labels are targets (a .ts file's @targetLabel).
    """

    where: str
    ids: list[str]
    values: list[np.ndarray]
    times: list[np.ndarray]
    labels: list[np.ndarray]
    channels: list[str]
    lines: list[np.ndarray] | None = None
    splits: list[str] | None = None
    regression: bool = False

    def at(self, i: int, j: int = 0) -> str:
        """Where series i (its step j) is, for an error message."""
        if self.lines is not None:
            return f"line {int(self.lines[i][j])}, series {excerpt(self.ids[i])}"
        return f"series {i} ({excerpt(self.ids[i])})"


# Parts `fetch` (local/files.py) read from a file before copying it: the same process's `build`
# takes them instead of parsing the copy again. Keyed by the copy's path, size, mtime, label and
# split columns, so a copy changed since is read afresh; each is used once.
_fetched: dict[tuple[str, int, int, str, str], Part] = {}


def _key(path: Path, label: str, split: str) -> tuple[str, int, int, str, str]:
    stat = Path(path).stat()
    return str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, label, split


def _kept(path: Path, label: str, split: str) -> Part | None:
    """The part fetch kept for `path`, if it did and the file is as fetch left it."""
    try:
        return _fetched.pop(_key(path, label, split), None) if _fetched else None
    except OSError:
        return None


def keep_read(copy: Path, label: str, split: str, part: Part) -> None:
    """Remember `part`, read from the file `copy` was just copied from, for the next read of `copy`."""
    _fetched[_key(copy, label, split)] = part


def forget_reads() -> None:
    """Drop the parts kept by keep_read (fetch starts with this: only its own files are kept)."""
    _fetched.clear()


def read_long_csv(path, label: str, split: str, where: str | None = None) -> Part:
    """Read a long CSV of labelled series; DataError naming the file (`where`, default `path`) and
    the line on any problem."""
    where = where or str(path)
    kept = _kept(path, label, split)
    if kept is not None:
        return replace(kept, where=where)
    check_csv_bytes(path, where)
    header = _header(path, where)
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise DataError(f"{where}: duplicated columns {excerpt(duplicated)}; each column once")
    missing = [c for c in (SERIES, TIME, label) if c not in header]
    if missing:
        check_separator(path, where)
        raise DataError(f"{where}: missing columns {missing}; expected {SERIES}, {TIME}, the channels and "
                        f"{excerpt(label)} (the `label` key names the label column), optionally {excerpt(split)}")
    channels = [h for h in header if h not in (SERIES, TIME, label, split)]
    if not channels:
        raise DataError(f"{where}: no channel columns; expected at least one column besides "
                        f"{excerpt([SERIES, TIME, label, split])}")
    try:
        # Every cell as text, only an empty cell missing: "NA" may be a class, and the numbers are
        # converted below, where a bad cell can be named by line.
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], skip_blank_lines=False,
                         skipinitialspace=True, encoding=ENCODING)
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise DataError(f"{where}: not a readable UTF-8 CSV file ({_reason(exc)})") from None
    lines = df.index.to_numpy() + 2  # the header is line 1; blank lines are kept as rows, then dropped
    keep = df.notna().any(axis=1).to_numpy()
    df, lines = df[keep], lines[keep]
    if df.empty:
        raise DataError(f"{where}: a header but no rows; expected one row per observation")

    ids = df[SERIES].to_numpy(dtype=object)
    for what, column in ((SERIES, ids), (label, df[label].to_numpy(dtype=object))):
        gap = np.flatnonzero(pd.isna(column))
        if len(gap):
            who = "" if what == SERIES else f", series {excerpt(ids[gap[0]])}"
            raise DataError(f"{where}: line {lines[gap[0]]}{who}: empty {excerpt(what)} cell; every row names its "
                            f"series and label")
    _check_labels(where, df, label, lines)
    time = _numbers(where, df, TIME, lines, allow_empty=False).astype(np.float32)  # checked as stored
    x = np.stack([_numbers(where, df, c, lines, allow_empty=True) for c in channels], axis=1).astype(np.float32)
    labels = df[label].to_numpy(dtype=object).astype(str)
    splits = df[split].to_numpy(dtype=object) if split in df.columns else None
    if splits is not None:
        bad = np.flatnonzero(~np.isin(splits.astype(str), SPLIT_VALUES))
        if len(bad):
            raise DataError(f"{where}: line {lines[bad[0]]}, series {excerpt(ids[bad[0]])}: column {excerpt(split)} "
                            f"is {excerpt(splits[bad[0]])}; allowed: {', '.join(SPLIT_VALUES)}")

    codes, names = pd.factorize(ids)  # series in order of first appearance
    order = np.argsort(codes, kind="stable")  # each series' rows together, in file order
    codes, time, x, labels, lines = codes[order], time[order], x[order], labels[order], lines[order]
    same = codes[1:] == codes[:-1]
    back = np.flatnonzero(same & (time[1:] <= time[:-1]))
    if len(back):
        k = back[0]
        raise DataError(f"{where}: line {lines[k + 1]}, series {excerpt(names[codes[k]])}: time {time[k + 1]:g} is "
                        f"not after {time[k]:g} (line {lines[k]}); allowed: increasing times within a series, rows in "
                        f"time order")
    if splits is not None:
        splits = splits[order]
        mixed = np.flatnonzero(same & (splits[1:] != splits[:-1]))
        if len(mixed):
            k = mixed[0]
            raise DataError(f"{where}: line {lines[k + 1]}, series {excerpt(names[codes[k]])}: column {excerpt(split)} "
                            f"is {excerpt(splits[k + 1])} after {excerpt(splits[k])}; allowed: one split per series")
    bounds = np.flatnonzero(np.diff(codes)) + 1
    values = np.split(x, bounds)
    empty = [i for i, v in enumerate(values) if np.isnan(v).all()]
    if empty:
        i = empty[0]
        raise DataError(f"{where}: series {excerpt(str(names[i]))} (from line {np.split(lines, bounds)[i][0]}) has no "
                        f"value in any channel {excerpt(channels)}; every series needs at least one observed value")
    return Part(
        where=where, ids=[str(n) for n in names], values=values, times=np.split(time, bounds),
        labels=np.split(labels, bounds), channels=channels, lines=np.split(lines, bounds),
        splits=[str(s[0]) for s in np.split(splits, bounds)] if splits is not None else None,
    )


def _header(path, where: str) -> list[str]:
    """The header as written (pandas would rename a duplicated column `a` to `a.1`)."""
    try:
        first = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False, skipinitialspace=True,
                            encoding=ENCODING)
    except pd.errors.EmptyDataError:
        raise DataError(f"{where}: empty file: no header; expected a header {SERIES},{TIME},<channels...>,<label>") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise DataError(f"{where}: not a readable UTF-8 CSV file ({_reason(exc)})") from None
    return [str(h).strip() for h in first.iloc[0].tolist()]


def _reason(exc: BaseException) -> str:
    """pandas' or the codec's message on one line, at most 200 characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:200] + "..."


def check_csv_bytes(path: Path, where: str) -> None:
    """DataError unless `path` is text pandas reads faithfully: not UTF-16 or UTF-32 (by its
    byte-order mark), and no NUL byte anywhere, which is named by line and column. One pass over
    the bytes, a megabyte at a time (about 0.03 s for 26 MB)."""
    try:
        _scan(path, where)
    except OSError as exc:
        raise DataError(f"{where}: cannot be read ({_reason(exc)})") from None


def _scan(path: Path, where: str) -> None:
    with open(path, "rb") as f:
        start = f.read(4)
        for bom, name in _OTHER_BOMS:
            if start.startswith(bom):
                raise DataError(f"{where}: {name} text (its byte-order mark {bom!r} begins the file); allowed: UTF-8 "
                                f"(save it as 'CSV UTF-8')")
        f.seek(0)
        offset, newlines, line_start, at = 0, 0, 0, -1
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            nul = chunk.find(b"\0")
            body = chunk if nul < 0 else chunk[:nul]
            newlines += body.count(b"\n")
            if (last := body.rfind(b"\n")) >= 0:
                line_start = offset + last + 1
            if nul >= 0:
                at = offset + nul
                break
            offset += len(chunk)
        if at < 0:
            return
        f.seek(line_start)
        before = f.read(at - line_start)  # the line up to the NUL byte
        f.seek(0)
        header = f.readline() if newlines else b""
    field = sum(piece.count(b",") for piece in before.split(b'"')[::2])  # commas outside quotes
    names = [h.strip().strip('"') for h in header.decode(ENCODING, "replace").rstrip("\r\n").split(",")]
    if not newlines:
        place = f"line 1 (the header), field {field + 1}"
    else:
        column = f"column {excerpt(names[field])}" if field < len(names) else f"field {field + 1}"
        place = f"line {newlines + 1}, {column}"
    raise DataError(f"{where}: {place}: a NUL byte (\\x00) "
                    f"in the cell, which would be cut short there; allowed: UTF-8 text without NUL bytes (a file "
                    f"saved as UTF-16 has one in every other byte: save it as 'CSV UTF-8')")


def check_separator(path: Path, where: str) -> None:
    """DataError naming the separator when the header is split by ';', tabs or '|' rather than
    commas (called when the comma-split header lacks a required column)."""
    with open(path, encoding=ENCODING, errors="replace", newline="") as f:
        first = f.readline(1 << 20).rstrip("\r\n")
    found = max(SEPARATORS, key=first.count)
    if first.count(found) > first.count(","):
        raise DataError(f"{where}: line 1: the header {excerpt(first, 60)} is separated by {SEPARATORS[found]}, not "
                        f"by commas; allowed: comma-separated values with '.' as the decimal mark (export the file "
                        f"as CSV with ',' as the separator)")


def _check_labels(where: str, df: pd.DataFrame, label: str, lines: np.ndarray) -> None:
    """DataError for a label cell that reads as 'nan' or 'inf': a missing label, never a class."""
    text = df[label].astype(str).str.strip().str.lower().str.lstrip("+-")
    bad = np.flatnonzero(text.isin(_NOT_FINITE).to_numpy())
    if len(bad):
        k = bad[0]
        raise DataError(f"{where}: line {lines[k]}, series {excerpt(df[SERIES].iloc[k])}: label "
                        f"{excerpt(df[label].iloc[k])} reads as a missing or infinite number ({len(bad)} such label "
                        f"cell(s)); every row names its label: a class name, or a finite number")


def _numbers(where: str, df: pd.DataFrame, column: str, lines: np.ndarray, allow_empty: bool) -> np.ndarray:
    """A column as float64; a cell that is not a finite number is named by line. An empty cell is
    NaN where allowed; text such as 'nan' or 'inf' never is (module docstring)."""
    text = df[column]
    with np.errstate(over="ignore"):
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    empty = text.isna().to_numpy()
    bad = ~np.isfinite(values) & ~empty
    if not allow_empty:
        bad |= empty
    bad |= np.abs(np.nan_to_num(values, posinf=0.0, neginf=0.0)) > np.finfo(np.float32).max
    found = np.flatnonzero(bad)
    if len(found):
        k = found[0]
        cell = text.iloc[k]
        more = f" ({len(found)} such cells in this column)" if len(found) > 1 else ""
        raise DataError(f"{where}: line {lines[k]}, series {excerpt(df[SERIES].iloc[k])}, column {excerpt(column)}: "
                        f"{'an empty cell' if pd.isna(cell) else excerpt(cell)} is not a finite number{more}"
                        + ("; leave the cell empty when not observed: an empty cell is the one missing value "
                           "('nan', 'NA' and 'inf' are refused)" if allow_empty else ""))
    return values
