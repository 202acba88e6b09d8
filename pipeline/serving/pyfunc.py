"""Trained models as MLflow pyfunc models, loadable from the registry by `models:/<name>@champion`.

The weights are saved as a plain checkpoint (family, model arguments, state dict, dataset
metadata) and wrapped in a PythonModel rather than logged with `mlflow.pytorch`: MLflow 3's
default torch.export serialisation needs an input example and cannot trace adaptive ODE
solvers with data-dependent step counts.

The model takes series in original units and refuses or flags them exactly as `ctsweep predict`
does (pipeline/serving/screening.py): `predict` and the CLI both go through `predict_series`. Its
MLmodel file documents the inputs (units, channels, static channels) and the label of each
output column (`metadata`, pipeline/serving/outputs.py), and its signature holds the `output`
param: "probabilities" (default) or "table" (the rows the CLI writes, with the predicted label).
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import torch
from mlflow.models import ModelSignature
from mlflow.pyfunc import PythonModelContext
from mlflow.types.schema import AnyType, Array, ColSpec, ParamSchema, ParamSpec, Schema, TensorSpec

from pipeline.data.contract import Meta, pad_sequences
from pipeline.errors import DataError
from pipeline.serving.outputs import OUTPUTS, model_metadata, output_columns, prediction_rows
from pipeline.serving.screening import FAR_SIGMAS, REFUSE_SIGMAS, check_output, screen
from pipeline.serving.series import Series, real_array
from pipeline.training.metrics import probabilities
from pipeline.models import user as user_families
from pipeline.models import get_model_class, is_family
from pipeline.training.loop import build_model


def save_checkpoint(path: Path, family: str, model_kwargs: dict[str, Any], input_channels: int,
                    state_dict: dict[str, torch.Tensor], meta: Meta) -> None:
    """The model's arguments stored next to its weights, so it rebuilds without any config; a
    user family's import path too (`model_class`), so it rebuilds where params.yaml is absent."""
    source = user_families.source_of(family)
    torch.save({"family": family, "model_kwargs": model_kwargs, "input_channels": input_channels,
                "state_dict": state_dict, "meta": dataclasses.asdict(meta),
                **({"model_class": source.target} if source is not None else {})}, path)


def load_checkpoint(path: str | Path) -> tuple[torch.nn.Module, Meta, dict[str, Any]]:
    ckpt = torch.load(path, weights_only=False, map_location="cpu")
    meta = Meta(**ckpt["meta"])
    if "model_class" in ckpt and not is_family(ckpt["family"]) and user_families.lookup(ckpt["family"]) is None:
        # Loaded outside the project (`mlflow models serve`, another machine): the module came with
        # the model (log_pyfunc's code_paths, which MLflow puts on sys.path).
        user_families.register({ckpt["family"]: user_families.FamilySource(
            ckpt["family"], ckpt["model_class"], origin=f"the model's checkpoint {path}")})
    model = build_model(ckpt["family"], meta, ckpt["input_channels"], ckpt["model_kwargs"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval(), meta, ckpt


def predict_arrays(model: torch.nn.Module, meta: Meta, family: str, model_kwargs: dict[str, Any],
                   x: np.ndarray, t: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Predict from raw (unstandardised) series.

    Args:
        x: (N, L, C) values in the dataset's original units, NaN where missing.
        t: (N, L) observation times.
        mask: (N, L) observed steps; default: steps where any channel is observed.
    Returns:
        (N, K) class probabilities, (N,) P(positive) for binary, or (N, O) regression outputs
        (with an L axis after N for per-step tasks).
    """
    x = np.asarray(x, np.float32)
    mask = ~np.isnan(x).all(axis=-1) if mask is None else np.asarray(mask, bool)
    x = (x - np.asarray(meta.norm_mean, np.float32)) / np.asarray(meta.norm_std, np.float32)
    inputs = get_model_class(family).prepare_inputs(
        torch.from_numpy(x), torch.from_numpy(np.asarray(t, np.float32)), torch.from_numpy(mask), **model_kwargs)
    with torch.no_grad():
        return probabilities(meta, model(**inputs)).numpy()


SOURCE = "model input"  # how refusals of the pyfunc model name what they refuse


def frame_to_arrays(frame: pd.DataFrame, channels: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A long table (one row per observation: `series`, `time`, one column per channel, NaN where
    not observed) -> x (N, L, C), t (N, L), mask (N, L), series in order of first appearance."""
    s = frame_to_series(frame, channels)
    return s.x, s.t, s.mask


def frame_to_series(frame: pd.DataFrame, channels: list[str]) -> Series:
    """The long table as a Series, ids the `series` values (as text) in order of first appearance.
    Columns of complex numbers, text or dates are refused (DataError), never converted."""
    missing = [c for c in ("series", "time", *channels) if c not in frame.columns]
    if missing:
        raise ValueError(f"model input lacks columns {missing}; expected series, time, {', '.join(channels)}")
    for column in ("time", *channels):
        if not _real_column(frame[column]):
            raise DataError(f"{SOURCE}: column {column!r} has dtype {frame[column].dtype}; expected real numbers")
    ids, values, times = [], [], []
    for name, rows in frame.groupby("series", sort=False):
        rows = rows.sort_values("time", kind="stable")  # equal times keep their order
        ids.append(str(name))
        times.append(rows["time"].to_numpy(np.float32))
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, which `screen` refuses by series
            values.append(rows[channels].to_numpy(np.float32))
    return Series(ids, *pad_sequences(values, times))


def _real_column(column: pd.Series) -> bool:
    """Booleans, integers, floats, or objects (numbers and None, as JSON records give them)."""
    kind = pd.api.types
    return column.dtype == object or kind.is_bool_dtype(column) or (
        kind.is_numeric_dtype(column) and not kind.is_complex_dtype(column))


def arrays_to_series(x: Any, t: Any, mask: Any | None) -> Series:
    """Padded arrays (checked to be real numbers) as a Series, ids "0" .. "N-1"; the default mask:
    steps where any channel is observed."""
    x = real_array(SOURCE, "x", np.asarray(x))
    t = real_array(SOURCE, "t", np.asarray(t))
    mask = ~np.isnan(x).all(axis=-1) if mask is None else real_array(SOURCE, "mask", np.asarray(mask)).astype(bool)
    if x.ndim != 3 or t.shape != x.shape[:2] or mask.shape != x.shape[:2]:
        raise DataError(f"{SOURCE}: x {x.shape}, t {t.shape} and mask {mask.shape}; expected (N, L, C), (N, L), (N, L)")
    return Series([str(i) for i in range(len(x))], x, t, mask)


class SequenceClassifierModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper around a checkpoint; `predict` returns what `predict_arrays` returns.

    `model_input` is a long table as `ctsweep predict` reads from CSV and `mlflow models serve`
    receives as JSON records (a DataFrame: `series`, `time`, one column per channel); from Python
    a dict of padded arrays {"x": (N, L, C), "t": (N, L), optional "mask": (N, L)} works too.
    The hint is `pd.DataFrame`, one of the types MLflow 3 takes without deriving a schema: with no
    hint, or one it cannot turn into a schema (dict[str, np.ndarray]), MLflow warns whenever this
    class is defined, i.e. before every `final` or `predict` error.

    The logged signature (`signature`) names both forms, every column optional. MLflow enforces a
    column signature before `predict` sees the input, and turns a dict into a DataFrame: a dict
    whose arrays have more than one dimension becomes one row per series of nested lists, which
    no column signature of the long table accepts, unless one of the signature's columns is an
    Array, in which case MLflow 3.17 wraps the whole dict in a single row, each cell the array as
    given. So `x`, `t` and `mask` are Array(Any) columns (a typed Array(Array(Array(double)))
    would be checked element by element in Python: seconds per thousand series), and `predict`
    unwraps that row. A tensor signature ({"x", "t", "mask"} as TensorSpecs) would refuse the
    long table instead: MLflow requires every tensor input by name.
    """

    def load_context(self, context: PythonModelContext) -> None:
        self.model, self.meta, ckpt = load_checkpoint(context.artifacts["checkpoint"])
        self.family, self.model_kwargs = ckpt["family"], ckpt["model_kwargs"]

    def predict(self, context: PythonModelContext | None, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> np.ndarray | pd.DataFrame:
        """Probabilities (or outputs) as `predict_arrays` returns them; with params {"output": "table"}
        the rows `ctsweep predict` writes (series ids from the long table, "0" .. "N-1" for arrays).
        Refuses (DataError) and warns (ExtrapolationWarning) as `ctsweep predict` does."""
        output = (params or {}).get("output", OUTPUTS[0])
        if output not in OUTPUTS:
            raise ValueError(f"params: output {output!r} is not one of {list(OUTPUTS)}")
        if isinstance(model_input, pd.DataFrame) and "x" in model_input.columns:  # the dict, as MLflow wrapped it
            s = arrays_to_series(*_unwrap_arrays(model_input))
        elif isinstance(model_input, pd.DataFrame):
            s = frame_to_series(model_input, self.meta.channels)
        else:  # the dict itself (the unwrapped python model: no schema enforced)
            s = arrays_to_series(model_input["x"], model_input["t"], model_input.get("mask"))
        result, warning = self.predict_series(s, SOURCE)
        if warning is not None:
            warnings.warn(warning, ExtrapolationWarning, stacklevel=2)
        if output == "table":
            return pd.DataFrame(prediction_rows(self.meta, s, result), columns=output_columns(self.meta, result))
        return result

    def predict_series(self, s: Series, source: str) -> tuple[np.ndarray, str | None]:
        """Screen `s` (refusals name `source`), predict, check the output: (output, warning line or None).
        The one path of `ctsweep predict` and of `predict` above."""
        warning = screen(source, s, self.meta)
        output = predict_arrays(self.model, self.meta, self.family, self.model_kwargs, s.x, s.t, s.mask)
        check_output(source, s, self.meta, output)
        return output, warning


class ExtrapolationWarning(UserWarning):
    """Values more than FAR_SIGMAS training standard deviations out: their predictions extrapolate."""


ARRAY_INPUTS = ("x", "t", "mask")  # the padded form's keys; `mask` may be left out


def _unwrap_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The padded arrays of a dict input, from the one row MLflow's schema enforcement made of it."""
    if len(frame) != 1 or "t" not in frame.columns:
        raise ValueError(f"model input: padded arrays need keys x (N, L, C) and t (N, L), optional mask (N, L), "
                         f"as one dict; got columns {list(frame.columns)} in {len(frame)} row(s)")
    row = frame.iloc[0]
    mask = row["mask"] if "mask" in frame.columns else None
    mask = None if mask is None or (np.isscalar(mask) and pd.isna(mask)) else np.asarray(mask)
    return np.asarray(row["x"]), np.asarray(row["t"]), mask


def input_example(meta: Meta) -> pd.DataFrame:
    """A long table of two short series (8 and 6 observations, times 0, 1, ...) in the dataset's
    channels, each at its training mean (a token dataset: token id 1): what the UI shows as the
    model's input example, and what MLflow runs the model on to check it when logging."""
    rows = []
    for series, length in (("s0", 8), ("s1", 6)):
        for step in range(length):
            values = [1.0 if meta.vocab_size else float(m) for m in (meta.norm_mean or [0.0] * len(meta.channels))]
            rows.append({"series": series, "time": float(step), **dict(zip(meta.channels, values))})
    return pd.DataFrame(rows, columns=["series", "time", *meta.channels])


def signature(meta: Meta, output: np.ndarray) -> ModelSignature:
    """Both input forms, every column optional (see SequenceClassifierModel): the long table's
    `series` (any ids), `time` and one column per channel of `meta.channels`, and the padded
    form's `x`, `t`, `mask`, all in original units; the output as the model returned it on the
    input example (a float32 tensor: (-1,) for binary, (-1, K) for classes or outputs, an L axis
    more for per-step tasks); the param `output`, "probabilities" or "table". A signature has no
    room for words: the units, channels and labels are in the MLmodel's `metadata`."""
    # `time` and the channels are Any, not double: MLflow refuses to convert int64 columns to double
    # ("Can not safely convert"), and pandas reads a CSV of whole numbers (times 0, 1, 2) as int64.
    inputs = Schema([ColSpec(AnyType(), "series", required=False), ColSpec(AnyType(), "time", required=False),
                     *(ColSpec(AnyType(), c, required=False) for c in meta.channels),
                     *(ColSpec(Array(AnyType()), k, required=False) for k in ARRAY_INPUTS)])
    shape = (-1, *np.asarray(output).shape[1:])
    return ModelSignature(inputs=inputs, outputs=Schema([TensorSpec(np.asarray(output).dtype, shape)]),
                          params=ParamSchema([ParamSpec("output", "string", OUTPUTS[0])]))


def log_pyfunc(run_id: str, tracking_uri: str, checkpoint: Path, family: str | None = None) -> str:
    """Log the checkpoint as a pyfunc model under `run_id`; returns the model URI.

    A user family's module (its file, or its top-level package) is logged with it as MLflow
    `code_paths`, so the registered model loads without the project.
    """
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(name="model", **_pyfunc_arguments(checkpoint, family))
    return info.model_uri


def save_pyfunc(path: Path, checkpoint: Path, family: str | None = None) -> None:
    """The same model as `log_pyfunc` logs, saved to the folder `path` (no tracking store)."""
    mlflow.pyfunc.save_model(path=str(path), **_pyfunc_arguments(checkpoint, family))


def _pyfunc_arguments(checkpoint: Path, family: str | None) -> dict[str, Any]:
    """log_model / save_model's arguments: the model, its checkpoint and code, and a signature
    and input example built from the checkpoint's dataset metadata (its channels)."""
    code = user_families.code_path(family) if family is not None else None
    model, meta, ckpt = load_checkpoint(checkpoint)
    example = input_example(meta)
    output = predict_arrays(model, meta, ckpt["family"], ckpt["model_kwargs"], *frame_to_arrays(example, meta.channels))
    return {"python_model": SequenceClassifierModel(), "artifacts": {"checkpoint": str(checkpoint)},
            "code_paths": [str(code)] if code is not None else None,
            "signature": signature(meta, output), "input_example": example,
            "metadata": model_metadata(meta, FAR_SIGMAS, REFUSE_SIGMAS),
            # Explicit requirements: inferring them imports and inspects the whole environment.
            "pip_requirements": [f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}"]}


def log_model_from_state(run_id: str, tracking_uri: str, family: str, model_kwargs: dict[str, Any],
                         input_channels: int, state_dict: dict[str, torch.Tensor], meta: Meta) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pt"
        save_checkpoint(path, family, model_kwargs, input_channels, state_dict, meta)
        return log_pyfunc(run_id, tracking_uri, path, family)
