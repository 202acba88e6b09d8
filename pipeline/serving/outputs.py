"""What a served model returns, and what it documents about its inputs and outputs.

One form for `ctsweep predict` and the pyfunc model alike: `prediction_rows` turns the model's
output into rows {series[, time], prediction, p_<class> ...}, the rows the CLI writes as CSV and
`model.predict(..., params={"output": "table"})` returns as a DataFrame. `prediction` is the
class *label* (meta.classes, e.g. "1" .. "9" for Japanese Vowels), never its index; the default
pyfunc output is the (N, K) probabilities, whose column k is class `classes[k]` (`label_map`).

CSV cells that a spreadsheet would run as a formula (a series id starting with = + - @, a tab or
a carriage return, OWASP's CSV-injection list) are written with a leading single quote, so
`=cmd|' /C calc'!A0` is written as `'=cmd|' /C calc'!A0`; ids that are plain numbers (-1, +2.5e3)
are left as they are.
"""

from __future__ import annotations

import csv
import io
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.data.contract import Meta
from pipeline.data.kinds.local.long_csv import SERIES, TIME  # the layout's key columns, shared with the `local` kind

if TYPE_CHECKING:
    from pipeline.serving.series import Series

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP: CSV injection
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
OUTPUTS = ("probabilities", "table")  # the pyfunc model's `output` param; the first is the default


# --------------------------------------------------------------------------------- rows


def class_names(meta: Meta, k: int) -> list[str]:
    """The label of each of the k output columns: meta.classes, or "0" .. "k-1" without them."""
    return list(meta.classes) if len(meta.classes) == k else [str(c) for c in range(k)]


def output_columns(meta: Meta, output: np.ndarray) -> list[str]:
    """CSV columns: series[, time], then the task's outputs."""
    keys = [SERIES, TIME] if meta.per_step else [SERIES]
    if meta.task == "classification":
        return keys + ["prediction"] + [f"p_{c}" for c in class_names(meta, output.shape[-1])]
    if meta.task == "binary":
        return keys + ["prediction", "probability"]
    return keys + [f"y_{k}" for k in range(output.shape[-1])]


def prediction_rows(meta: Meta, s: Series, output: np.ndarray) -> list[dict]:
    """Model output -> rows, one per series (per observed step for per-step tasks).

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


def _outputs(meta: Meta, out: np.ndarray) -> dict[str, Any]:
    """One prediction: (K,) probabilities, () P(positive) or (O,) outputs -> columns."""
    if meta.task == "classification":
        names = class_names(meta, out.shape[-1])
        best = int(np.argmax(out))
        return {"prediction": names[best] if meta.classes else best,
                **{f"p_{c}": float(p) for c, p in zip(names, out)}}
    if meta.task == "binary":
        p = float(out)
        label = int(p > 0.5)  # logit > 0, as the accuracy metric decides
        return {"prediction": meta.classes[label] if len(meta.classes) == 2 else label, "probability": p}
    return {f"y_{k}": float(v) for k, v in enumerate(np.atleast_1d(out))}


def safe_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, with a leading single quote (see above)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def rows_to_csv(rows: list[dict], columns: list[str]) -> str:
    """The rows as CSV text, one line per row ending in \\n, series ids neutralised (safe_cell)."""
    buffer, lines = io.StringIO(), []
    # "\r" in the writer's line terminator makes it quote a cell holding a carriage return (with
    # "\n" alone it would not, and a reader would split the row there); each row's "\r\n" is cut.
    writer = csv.writer(buffer, lineterminator="\r\n")
    for values in [columns, *([safe_cell(r.get(c, "")) if c == SERIES else r.get(c, "") for c in columns]
                              for r in rows)]:
        writer.writerow(values)
        lines.append(buffer.getvalue()[:-2] + "\n")
        buffer.seek(0)
        buffer.truncate()
    return "".join(lines)


# --------------------------------------------------------------------------------- documentation


def label_map(meta: Meta) -> list[str] | None:
    """Column k of the probabilities is class `label_map(meta)[k]` (classification), or the label of
    P(positive) > 0.5 at index 1 (binary); None for regression."""
    if meta.task == "classification":
        return class_names(meta, meta.output_size)
    if meta.task == "binary":
        return list(meta.classes) if len(meta.classes) == 2 else ["0", "1"]
    return None


def describe(meta: Meta, far: float, refuse: float) -> str:
    """What the model takes and returns, in words: the registered model's description and the
    `description` of its MLmodel metadata (far, refuse: screening's FAR_SIGMAS and REFUSE_SIGMAS)."""
    static = meta.static_channels
    channels = [c for c in meta.channels if c not in static]
    labels = label_map(meta)
    if meta.task == "classification":
        out = (f"(N, {meta.output_size}) class probabilities, column k the class labelled {_quoted(labels)}[k] "
               f"(what `ctsweep predict` prints as `prediction`)")
    elif meta.task == "binary":
        out = f"(N,) P(class {labels[1]!r}); the prediction is {labels[1]!r} above 0.5, else {labels[0]!r}"
    else:
        out = f"(N, {meta.output_size}) regression outputs in the units of the training targets"
    units = ("token ids (whole numbers 0 .. vocab_size - 1)" if meta.vocab_size else
             "original units, as in the raw data, NOT the standardised data/processed splits")
    return (f"Input: series in {units}: the long table (series, time, one column per channel) or padded arrays "
            f"x (N, L, C), t (N, L), optional mask (N, L); channels in order: {_quoted(channels)}"
            + (f", then static channels (one value per series, repeated at each step): {_quoted(static)}"
               if static else "; no static channels")
            + (f". Values more than {refuse:g} training standard deviations from a channel's training mean "
               f"are refused (naming the series), more than {far:g} warned about; input that looks "
               f"standardised is refused" if not meta.vocab_size else "")
            + f". Output{' per step (an L axis after N)' if meta.per_step else ''}: {out}; with "
              f"params={{'output': 'table'}} the rows `ctsweep predict` writes, with the predicted label.")


def model_metadata(meta: Meta, far: float, refuse: float) -> dict[str, Any]:
    """The MLmodel file's `metadata` (`model.metadata.metadata` of a loaded pyfunc model)."""
    return {"input_units": "token ids" if meta.vocab_size else "original",
            "channels": list(meta.channels), "static_channels": list(meta.static_channels),
            "task": meta.task, "per_step": meta.per_step, "classes": label_map(meta),
            "outputs": list(OUTPUTS), "warn_beyond_std": far, "refuse_beyond_std": refuse,
            "description": describe(meta, far, refuse)}


def _quoted(names: list[str] | None, most: int = 40) -> str:
    names = names or []
    more = f", ... ({len(names)} in all)" if len(names) > most else ""
    return "[" + ", ".join(repr(n) for n in names[:most]) + more + "]"
