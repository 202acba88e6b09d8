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

Before the model loads, the paths are checked (pipeline/serving/file_checks.py): a processed
(standardised) split as input is refused, and `--out` must be a new .csv file (an existing one only
with `force`), never the input or a file of the project. Series the model cannot have been trained
on are refused by id before anything is predicted or written (no value at all, infinite values,
token ids outside the vocabulary, values beyond REFUSE_SIGMAS training standard deviations, input
that looks standardised); values more than FAR_SIGMAS out still get predictions, with one warning
line per file (pipeline/serving/screening.py).

Predictions go through the pyfunc model's `predict_series`, the method its `predict` calls for
any MLflow user (`mlflow.pyfunc.load_model(...).predict`), so both refuse, warn and label alike;
the CLI's refusals name the file and its series ids.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline.data.contract import Meta
from pipeline.errors import CtsweepError
from pipeline.serving.file_checks import check_input, check_out
from pipeline.serving.outputs import output_columns, prediction_rows, rows_to_csv
from pipeline.serving.series import read_series
from pipeline.stores import tracking
from pipeline.stores.files import write_text
from pipeline.stores.tracking import ALIAS, registered_name

__all__ = ["ModelInfo", "load_registered", "predict_file", "predict_command", "output_columns", "prediction_rows",
           "rows_to_csv"]


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


def predict_file(root: Path, dataset: str, path: Path, out: Path | None, version: int | None = None,
                 force: bool = False) -> list[dict]:
    """Predict every series of `path` with the registered model of `dataset`.

    Returns one row per series ({series, prediction, ...}), or per observed step of each series
    with an extra `time` column for per-step tasks. With `out`, also writes them as CSV
    (atomically, series ids neutralised against spreadsheet formulas); `force` lets it replace an
    existing file. Every check comes first: nothing is written when one fails (DataError,
    OutputError; one line each), and the input is never modified.
    """
    path = Path(path)
    check_input(path, root)
    out = check_out(Path(out), root, path, force) if out is not None else None
    model, meta, _ = load_registered(tracking.tracking_uri(root), dataset, version)
    s = read_series(path, meta.channels)
    output, warning = model.unwrap_python_model().predict_series(s, str(path))
    rows = prediction_rows(meta, s, output)
    if out is not None:
        write_text(out, rows_to_csv(rows, output_columns(meta, output)))
    if warning is not None:  # only once predictions exist: a refusal stays the one line printed
        print(f"ctsweep: warning: {warning}", file=sys.stderr)
    return rows


def predict_command(root: Path, dataset: str, path: Path, out: Path | None, version: int | None,
                    force: bool) -> tuple[str, bool]:
    """`ctsweep predict`: (what to print, whether to stderr): the CSV itself without `out`, else a
    line saying where it went."""
    rows = predict_file(root, dataset, path, out, version, force)
    if out is None:
        return (rows_to_csv(rows, list(rows[0])) if rows else ""), False
    return f"{len(rows)} prediction row(s) -> {out}\n", True
