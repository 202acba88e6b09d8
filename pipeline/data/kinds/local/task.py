"""What the `local` kind infers from a dataset's training labels: the task and the class names.

Text labels, or integers (1, 1.0 and "1.0" alike) with at most MAX_INFERRED_CLASSES distinct
values -> classification; other numbers -> regression; anything else needs `task` in params.yaml.
Shared by the long-CSV and .ts reader (dataset.py) and the .npz reader (npz.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline.errors import ConfigError, DataError, excerpt

if TYPE_CHECKING:
    from pipeline.config.datasets import LocalParams

MAX_INFERRED_CLASSES = 20
DEFAULT_METRIC = {"classification": "accuracy", "binary": "auroc", "regression": "mse"}


def label_numbers(labels: np.ndarray) -> np.ndarray | None:
    """The labels as float64 when every one is a number, else None."""
    if labels.dtype.kind in "fiub":
        return labels.astype(np.float64)
    values = pd.to_numeric(pd.Series(labels, dtype=object), errors="coerce").to_numpy(np.float64)
    return None if np.isnan(values).any() else values


def canonical_class(label: object) -> str:
    """A class name: 1, 1.0 and "1.0" are the same class "1"."""
    try:
        v = float(label)
    except (TypeError, ValueError):
        return str(label)
    return str(int(v)) if np.isfinite(v) and v == int(v) else str(label)


def infer_task(name: str, p: LocalParams, train: np.ndarray, regression: bool, where: str) -> tuple[str, list[str]]:
    """The task and class names (module docstring, "inferred"), from the train labels (flat)."""
    numbers = label_numbers(np.unique(train))
    task = p.task or ("regression" if regression else None)
    if task is None:
        if numbers is None:
            task = "classification"
        elif (numbers == np.round(numbers)).all():
            if len(numbers) > MAX_INFERRED_CLASSES:
                raise ConfigError(f"prepare.{name}.task: cannot infer; the train labels of {where} are {len(numbers)} "
                                  f"distinct integers (classes are inferred up to {MAX_INFERRED_CLASSES}); allowed: "
                                  f"classification, binary, regression")
            task = "classification"
        else:
            task = "regression"
    if p.metric is not None and p.metric not in _fits(task):
        raise ConfigError(f"prepare.{name}.metric: {p.metric!r} does not fit the task {task!r}"
                          f"{'' if p.task else ' inferred from the labels of ' + where}; allowed: {_fits(task)} "
                          f"(or set `task`)")
    if task == "regression":
        if numbers is None:
            text = next(str(v) for v in np.unique(train) if label_numbers(np.asarray([v])) is None)
            raise ConfigError(f"prepare.{name}.task: regression needs numeric labels; {where} has labels such as "
                              f"{excerpt(text)}")
        return task, []
    if p.classes is not None:
        classes = [str(c) for c in p.classes]
    else:
        found = sorted({canonical_class(v) for v in np.unique(train)}, key=lambda c: (label_numbers(np.asarray([c])) is None, _sort_key(c)))
        classes = found
    if task == "binary" and len(classes) != 2:
        raise ConfigError(f"prepare.{name}.task: binary needs 2 classes; the train labels of {where} have "
                          f"{len(classes)}: {excerpt(classes)}; allowed: `task: classification`, or `classes` naming 2")
    if len(classes) < 2:
        raise DataError(f"{where}: the train series have one class {excerpt(classes)}; allowed: at least two classes")
    return task, classes


def _sort_key(c: str) -> tuple:
    try:
        return (float(c), "")
    except ValueError:
        return (0.0, c)


def _fits(task: str) -> list[str]:
    from pipeline.config.datasets import _METRICS

    return _METRICS[task]
