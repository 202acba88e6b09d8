"""Run a registered model on a file of series: `models:/ctsweep-<dataset>@champion` on .npz or .csv.

Input files hold raw (unstandardised) values in the dataset's channels, `meta.channels`:

    series.npz   x (N, L, C) float, NaN where missing or padded
                 t (N, L) float, non-decreasing per row; padding repeats the last time
                 mask (N, L) bool, optional: True on a prefix of each row (the observed steps);
                     default: every step up to the row's last step with any value
                 ids (N,) optional series names; default "0", "1", ...
    series.csv   long format, one row per observation: columns `series`, `time`, then one
                 column per channel (empty cell = not observed), in any order. Rows are
                 grouped by `series` (first-appearance order) and sorted by time.

Series the model cannot have been trained on are refused by id before anything is predicted or
written (no value at all, infinite values, token ids outside the vocabulary); values more than
FAR_SIGMAS training standard deviations out still get predictions, with one warning line per file.

Predictions go through the pyfunc model's `predict({"x", "t", "mask"})`, the same code path as
`mlflow.pyfunc.load_model(...).predict` gives any MLflow user (see pipeline/serving.py).
"""

from __future__ import annotations

import csv
import io
import math
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline import tracking
from pipeline.data.contract import Meta, pad_sequences
from pipeline.data.local.long_csv import SERIES, TIME  # the layout's key columns, shared with the `local` kind
from pipeline.errors import CtsweepError, DataError
from pipeline.io import write_text
from pipeline.promote import ALIAS, registered_name
from pipeline.screening import FAR_SIGMAS, SHOWN_IDS, _check_output, screen  # noqa: F401  (re-exported)

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


@dataclass(frozen=True)
class ModelInfo:
    """Which registered model version was loaded."""

    name: str
    version: int
    uri: str
    run_id: str
    family: str | None


# --------------------------------------------------------------------------------- reading


def read_series(path: Path, channels: list[str]) -> Series:
    """Read an .npz or .csv file of series in the given channels (the model's `meta.channels`).

    Raises DataError naming the file, what is wrong and what is allowed.
    """
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise DataError(f"{path}: unknown file type {path.suffix or '(no suffix)'!r}; allowed: {', '.join(SUFFIXES)}")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: empty file; expected {_format_hint(path, channels)}")
    series = _read_npz(path, channels) if path.suffix.lower() == ".npz" else _read_csv(path, channels)
    _check_times(path, series)
    return series


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
    x = _numeric(path, "x", arrays["x"])
    t = _numeric(path, "t", arrays["t"])
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


def _numeric(path: Path, key: str, a: np.ndarray) -> np.ndarray:
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise DataError(f"{path}: array {key!r} has dtype {a.dtype}; expected numbers (float)")
    return a.astype(np.float32)


def _npz_mask(path: Path, mask: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """The given mask (checked), or every step up to each row's last step with any value: (N, L)."""
    if mask is None:
        has_value = ~np.isnan(x).all(axis=-1)  # (N, L)
        last = np.where(has_value.any(axis=1), x.shape[1] - 1 - np.argmax(has_value[:, ::-1], axis=1), -1)
        mask = np.arange(x.shape[1])[None, :] <= last[:, None]
    else:
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
    names = [str(i) for i in ids.tolist()]
    _check_unique(path, names)
    return names


def _check_unique(path: Path, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DataError(f"{path}: series id {name!r} appears twice in ids; each series needs its own id")
        seen.add(name)


def _read_csv(path: Path, channels: list[str]) -> Series:
    """Long-format CSV (series, time, channels...) -> Series, padded to the longest series."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
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
        name, time, *values = (row[i].strip() for i in order)
        if not name:
            raise DataError(f"{path}: line {line}: empty {SERIES!r}; every row names its series")
        observed = [_cell(path, line, c, v) for c, v in zip(channels, values)]
        groups.setdefault(name, []).append((_cell(path, line, TIME, time, allow_empty=False), observed))
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
        raise DataError(f"{path}: duplicated columns {duplicated}")
    allowed = [SERIES, TIME, *channels]
    missing = [name for name in allowed if name not in header]
    if missing:
        raise DataError(f"{path}: missing columns {missing}; expected columns {allowed} (the model's channels)")
    extra = [h for h in header if h not in allowed]
    if extra:
        raise DataError(f"{path}: unknown columns {extra}; allowed columns: {allowed} (the model's channels)")


def _cell(path: Path, line: int, column: str, text: str, allow_empty: bool = True) -> float:
    """One CSV cell as a float; an empty cell is NaN (not observed) where allowed."""
    if not text and allow_empty:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise DataError(f"{path}: line {line}, column {column!r}: {text!r} is not a number"
                        + ("; leave the cell empty when not observed" if allow_empty else "")) from None


def _check_times(path: Path, s: Series) -> None:
    """Times finite and non-decreasing along every row (padding repeats the last time)."""
    bad = ~np.isfinite(s.t)
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(f"{path}: series {s.ids[i]!r} has a non-finite time ({s.t[i, j]:g}) at step {j}; "
                        f"allowed: finite times")
    back = np.diff(s.t, axis=1) < 0
    if back.any():
        i, j = (int(v) for v in np.argwhere(back)[0])
        raise DataError(f"{path}: series {s.ids[i]!r} has decreasing times ({s.t[i, j]:g} then {s.t[i, j + 1]:g} "
                        f"at step {j + 1}); allowed: non-decreasing times, padding repeating the last one")


# --------------------------------------------------------------------------------- the model


def load_registered(tracking_uri: str, dataset: str, version: int | None = None) -> tuple[Any, Meta, ModelInfo]:
    """Load `models:/ctsweep-<dataset>@champion` (or version `version`) as a pyfunc model.

    Returns the pyfunc model, its dataset Meta and which version it is. Raises CtsweepError
    saying to run `ctsweep promote` when there is no such registered model or alias.
    """
    name = registered_name(dataset)
    database = tracking.sqlite_file(tracking_uri)
    if database is not None and not database.is_file():  # do not create an empty store here
        raise CtsweepError(f"no MLflow store at {database} ({tracking_uri}), so no registered model {name!r}; "
                           f"run `ctsweep promote` to register {dataset}'s best final model")
    client = MlflowClient(tracking_uri)
    mv = _model_version(client, name, dataset, version)
    uri = f"models:/{name}/{mv.version}"
    mlflow.set_tracking_uri(tracking_uri)
    model = mlflow.pyfunc.load_model(uri)
    meta = model.unwrap_python_model().meta
    info = ModelInfo(name, int(mv.version), uri, mv.run_id, mv.tags.get("family"))
    return model, meta, info


def _model_version(client: MlflowClient, name: str, dataset: str, version: int | None) -> Any:
    """The registered model version: the given one or the champion's."""
    try:
        client.get_registered_model(name)
    except MlflowException:
        raise CtsweepError(f"no registered model {name!r} in {client.tracking_uri}; run `ctsweep promote` "
                           f"to register {dataset}'s best final model") from None
    try:
        if version is None:
            return client.get_model_version_by_alias(name, ALIAS)
        return client.get_model_version(name, str(version))
    except MlflowException:
        versions = sorted(int(v.version) for v in client.search_model_versions(f"name='{name}'"))
        what = f"alias {ALIAS!r}" if version is None else f"version {version}"
        raise CtsweepError(f"registered model {name!r} has no {what} (versions: {versions}); run "
                           f"`ctsweep promote` or pick one of its versions") from None


# --------------------------------------------------------------------------------- predicting


def predict_file(root: Path, dataset: str, path: Path, out: Path | None, version: int | None = None) -> list[dict]:
    """Predict every series of `path` with the registered model of `dataset`.

    Returns one row per series ({series, ...outputs}), or per observed step of each series with
    an extra `time` column for per-step tasks. With `out`, also writes them as CSV (atomically);
    nothing is written when reading or predicting fails.
    """
    model, meta, _ = load_registered(tracking.tracking_uri(root), dataset, version)
    s = read_series(Path(path), meta.channels)
    warning = screen(Path(path), s, meta)
    output = np.asarray(model.predict({"x": s.x, "t": s.t, "mask": s.mask}))
    _check_output(Path(path), s, meta, output)
    rows = prediction_rows(meta, s, output)
    if out is not None:
        write_text(Path(out), rows_to_csv(rows, output_columns(meta, output)))
    if warning is not None:  # only once predictions exist: a refusal stays the one line printed
        print(f"ctsweep: warning: {warning}", file=sys.stderr)
    return rows


def output_columns(meta: Meta, output: np.ndarray) -> list[str]:
    """CSV columns: series[, time], then the task's outputs."""
    keys = [SERIES, TIME] if meta.per_step else [SERIES]
    if meta.task == "classification":
        return keys + ["prediction"] + [f"p_{c}" for c in _class_names(meta, output.shape[-1])]
    if meta.task == "binary":
        return keys + ["prediction", "probability"]
    return keys + [f"y_{k}" for k in range(output.shape[-1])]


def prediction_rows(meta: Meta, s: Series, output: np.ndarray) -> list[dict]:
    """Model output -> rows.

    Args:
        output: (N, K) class probabilities, (N,) P(positive) or (N, O) regression outputs;
            with an L axis after N for per-step tasks.
    """
    rows = []
    for i, name in enumerate(s.ids):
        if not meta.per_step:
            rows.append({SERIES: name, **_outputs(meta, output[i])})
            continue
        for j in np.flatnonzero(s.mask[i]):
            rows.append({SERIES: name, TIME: float(s.t[i, j]), **_outputs(meta, output[i, j])})
    return rows


def _class_names(meta: Meta, k: int) -> list[str]:
    return list(meta.classes) if len(meta.classes) == k else [str(c) for c in range(k)]


def _outputs(meta: Meta, out: np.ndarray) -> dict[str, Any]:
    """One prediction: (K,) probabilities, () P(positive) or (O,) outputs -> columns."""
    if meta.task == "classification":
        names = _class_names(meta, out.shape[-1])
        best = int(np.argmax(out))
        return {"prediction": names[best] if meta.classes else best,
                **{f"p_{c}": float(p) for c, p in zip(names, out)}}
    if meta.task == "binary":
        p = float(out)
        label = int(p > 0.5)  # logit > 0, as the accuracy metric decides
        return {"prediction": meta.classes[label] if len(meta.classes) == 2 else label, "probability": p}
    return {f"y_{k}": float(v) for k, v in enumerate(np.atleast_1d(out))}


def rows_to_csv(rows: list[dict], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
