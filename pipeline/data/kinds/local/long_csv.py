"""Long-format CSV files of labelled series, for the `local` kind.

    series,time,<channel>,...,label[,split]
    a,0.0,1.2,,walk,train          one row per observation; an empty cell is not observed
    a,0.5,,3.4,walk,train          rows of a series in increasing time order (series may interleave)

This is the layout `ctsweep predict` reads (pipeline/serving/predict.py, SERIES and TIME) plus a label
column and an optional split column. A label constant within each series is the series' label;
one that varies is a label per step. Parsing is pandas'; the checks here only turn its columns
into series and say, in one line naming the file, the line and the series, what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.errors import DataError

SERIES, TIME = "series", "time"
SPLIT_VALUES = ("train", "val", "test")


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
            return f"line {int(self.lines[i][j])}, series {self.ids[i]!r}"
        return f"series {i} ({self.ids[i]!r})"


def read_long_csv(path, label: str, split: str, where: str | None = None) -> Part:
    """Read a long CSV of labelled series; DataError naming the file (`where`, default `path`) and
    the line on any problem."""
    where = where or str(path)
    header = _header(path, where)
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise DataError(f"{where}: duplicated columns {duplicated}; each column once")
    missing = [c for c in (SERIES, TIME, label) if c not in header]
    if missing:
        raise DataError(f"{where}: missing columns {missing}; expected {SERIES}, {TIME}, the channels and {label!r} "
                        f"(the `label` key names the label column), optionally {split!r}")
    channels = [h for h in header if h not in (SERIES, TIME, label, split)]
    if not channels:
        raise DataError(f"{where}: no channel columns; expected at least one column besides {[SERIES, TIME, label, split]}")
    try:
        # Every cell as text, only an empty cell missing: "NA" may be a class, and the numbers are
        # converted below, where a bad cell can be named by line.
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], skip_blank_lines=False,
                         skipinitialspace=True, encoding="utf-8")
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise DataError(f"{where}: not a readable UTF-8 CSV file ({' '.join(str(exc).split())})") from None
    lines = df.index.to_numpy() + 2  # the header is line 1; blank lines are kept as rows, then dropped
    keep = df.notna().any(axis=1).to_numpy()
    df, lines = df[keep], lines[keep]
    if df.empty:
        raise DataError(f"{where}: a header but no rows; expected one row per observation")

    ids = df[SERIES].to_numpy(dtype=object)
    for what, column in ((SERIES, ids), (label, df[label].to_numpy(dtype=object))):
        gap = np.flatnonzero(pd.isna(column))
        if len(gap):
            who = "" if what == SERIES else f", series {ids[gap[0]]!r}"
            raise DataError(f"{where}: line {lines[gap[0]]}{who}: empty {what!r} cell; every row names its series and label")
    time = _numbers(where, df, TIME, lines, allow_empty=False).astype(np.float32)  # checked as stored
    x = np.stack([_numbers(where, df, c, lines, allow_empty=True) for c in channels], axis=1).astype(np.float32)
    labels = df[label].to_numpy(dtype=object).astype(str)
    splits = df[split].to_numpy(dtype=object) if split in df.columns else None
    if splits is not None:
        bad = np.flatnonzero(~np.isin(splits.astype(str), SPLIT_VALUES))
        if len(bad):
            raise DataError(f"{where}: line {lines[bad[0]]}, series {ids[bad[0]]!r}: column {split!r} is "
                            f"{splits[bad[0]]!r}; allowed: {', '.join(SPLIT_VALUES)}")

    codes, names = pd.factorize(ids)  # series in order of first appearance
    order = np.argsort(codes, kind="stable")  # each series' rows together, in file order
    codes, time, x, labels, lines = codes[order], time[order], x[order], labels[order], lines[order]
    same = codes[1:] == codes[:-1]
    back = np.flatnonzero(same & (time[1:] <= time[:-1]))
    if len(back):
        k = back[0]
        raise DataError(f"{where}: line {lines[k + 1]}, series {names[codes[k]]!r}: time {time[k + 1]:g} is not after "
                        f"{time[k]:g} (line {lines[k]}); allowed: increasing times within a series, rows in time order")
    if splits is not None:
        splits = splits[order]
        mixed = np.flatnonzero(same & (splits[1:] != splits[:-1]))
        if len(mixed):
            k = mixed[0]
            raise DataError(f"{where}: line {lines[k + 1]}, series {names[codes[k]]!r}: column {split!r} is "
                            f"{splits[k + 1]!r} after {splits[k]!r}; allowed: one split per series")
    bounds = np.flatnonzero(np.diff(codes)) + 1
    values = np.split(x, bounds)
    empty = [i for i, v in enumerate(values) if np.isnan(v).all()]
    if empty:
        i = empty[0]
        raise DataError(f"{where}: series {str(names[i])!r} (from line {np.split(lines, bounds)[i][0]}) has no value "
                        f"in any channel {channels}; every series needs at least one observed value")
    return Part(
        where=where, ids=[str(n) for n in names], values=values, times=np.split(time, bounds),
        labels=np.split(labels, bounds), channels=channels, lines=np.split(lines, bounds),
        splits=[str(s[0]) for s in np.split(splits, bounds)] if splits is not None else None,
    )


def _header(path, where: str) -> list[str]:
    """The header as written (pandas would rename a duplicated column `a` to `a.1`)."""
    try:
        first = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False, skipinitialspace=True,
                            encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise DataError(f"{where}: empty file: no header; expected a header {SERIES},{TIME},<channels...>,<label>") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise DataError(f"{where}: not a readable UTF-8 CSV file ({' '.join(str(exc).split())})") from None
    return [str(h).strip() for h in first.iloc[0].tolist()]


def _numbers(where: str, df: pd.DataFrame, column: str, lines: np.ndarray, allow_empty: bool) -> np.ndarray:
    """A column as float64; a cell that is not a finite number is named by line (empty: NaN where allowed)."""
    text = df[column]
    with np.errstate(over="ignore"):
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(values) & text.notna().to_numpy() & ~text.str.lower().isin(["nan"]).to_numpy()
    if not allow_empty:
        bad |= np.isnan(values)
    bad |= np.isinf(values) | (np.abs(np.nan_to_num(values)) > np.finfo(np.float32).max)
    found = np.flatnonzero(bad)
    if len(found):
        k = found[0]
        cell = text.iloc[k]
        raise DataError(f"{where}: line {lines[k]}, series {df[SERIES].iloc[k]!r}, column {column!r}: "
                        f"{'an empty cell' if pd.isna(cell) else repr(cell)} is not a finite number"
                        + ("; leave the cell empty when not observed" if allow_empty else ""))
    return values
