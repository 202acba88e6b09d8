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
`mlflow.pyfunc.load_model(...).predict` gives any MLflow user (see pipeline/serving/pyfunc.py).
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.data.contract import Meta
from pipeline.data.kinds.local.long_csv import SERIES, TIME  # the layout's key columns, shared with the `local` kind
from pipeline.errors import CtsweepError
from pipeline.serving.screening import _check_output, screen
from pipeline.serving.series import Series, read_series
from pipeline.stores.files import write_text
from pipeline.stores.tracking import ALIAS, registered_name


@dataclass(frozen=True)
class ModelInfo:
    """Which registered model version was loaded."""

    name: str
    version: int
    uri: str
    run_id: str
    family: str | None


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
