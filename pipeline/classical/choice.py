"""Which classical model a processed dataset admits, or why none does.

The candidates, strongest first: MiniRocket (Dempster et al. 2021), which needs series of one
length without missing values, then the one-nearest-neighbour classifier under dynamic time
warping, which takes series of unequal length. On the UCR archive's bake-off (Middlehurst et al.
2024) MiniRocket ranks well above 1-NN DTW; 1-NN DTW is the classical baseline that accepts
unequal lengths. Neither models irregular sampling: a series whose observations are not evenly
spaced in time, or which misses steps inside it (NaN between observed steps), is refused with
the reason, in one line.

A per-step task (a target at every step: Walker2d's next state, Person Activity's activity) gets
a linear one-step model from scikit-learn, from each observed step's channels and the time since
the previous observed step to that step's target: ridge regression for a regression task, its
penalty chosen by leave-one-out cross-validation on the training data (RidgeCV), multinomial
logistic regression on standardised inputs for a classification one. It reads no other step: the
classical floor of "what this step alone says". Regression with one target per series is refused
with the reason.

In the processed contract (pipeline.data.contract) a series of unequal length is its observed
steps first, then padding (mask False, x NaN); anything else that is masked is a missing step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.data.contract import Meta, Split

MINIROCKET, DTW = "MiniRocket", "1-NN DTW"
RIDGE, LOGISTIC = "one-step ridge regression", "one-step logistic regression"
ONE_STEP = (RIDGE, LOGISTIC)  # models of a per-step task: their rows are observed steps
LIBRARY = {MINIROCKET: "aeon", DTW: "aeon", RIDGE: "scikit-learn", LOGISTIC: "scikit-learn"}
RIDGE_ALPHAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)  # RidgeCV's candidates, by leave-one-out


@dataclass(frozen=True)
class Choice:
    """The model for a dataset and its inputs as the library takes them. For the classifiers,
    `train` and `test` are (N, C, L) arrays where every series has the same length, else lists of
    (C, L_n) arrays, and `y_train` (N,) the labels; for the ONE_STEP models, (S, C + 1) arrays of
    the observed steps (channels, then the time since the previous observed step) and `y_train`
    their targets, (S, O) for RIDGE, (S,) labels for LOGISTIC. `train` is the training split
    followed by the validation split."""

    classifier: str
    train: np.ndarray | list[np.ndarray]
    y_train: np.ndarray
    test: np.ndarray | list[np.ndarray]


def _series(split: Split) -> list[np.ndarray] | str:
    """The split's series as (C, L_n) arrays of their observed steps, or why aeon cannot take them."""
    mask = split.mask.astype(bool)
    lengths = mask.sum(axis=1)
    if (lengths == 0).any():
        return "a series without any observed step"
    steps = np.arange(mask.shape[1])
    if (mask != (steps[None, :] < lengths[:, None])).any():
        return "series with missing steps (irregularly sampled): no aeon classifier models the gaps"
    out = []
    for x, t, n in zip(split.x, split.t, lengths):
        values = x[:n]
        if np.isnan(values).any():
            return "missing channel values at observed steps: no aeon classifier accepts them"
        gaps = np.diff(t[:n].astype(np.float64))
        if len(gaps) and not np.allclose(gaps, gaps[0], rtol=1e-4, atol=1e-6 * max(1.0, abs(float(gaps[0])))):
            return "observations unevenly spaced in time: aeon's classifiers assume equal intervals"
        out.append(np.ascontiguousarray(values.T, dtype=np.float64))
    return out


def _stacked(series: list[np.ndarray], equal: bool) -> np.ndarray | list[np.ndarray]:
    return np.stack(series) if equal else series


def _steps(split: Split, regression: bool) -> np.ndarray | str:
    """(S, C + 1): every observed step's channels and the time since the series' previous observed
    step (0 at its first), in the mask's row-major order; or why the ridge model cannot take them."""
    mask = split.mask.astype(bool)
    rows = []
    for x, t, m in zip(split.x, split.t, mask):
        times = t[m].astype(np.float64)
        rows.append(np.column_stack([x[m].astype(np.float64), np.diff(times, prepend=times[:1])]))
    steps = np.concatenate(rows) if rows else np.zeros((0, split.x.shape[2] + 1))
    if np.isnan(steps).any():
        return f"missing channel values at observed steps: the {RIDGE if regression else LOGISTIC} takes complete steps"
    return steps


def _step_targets(split: Split, regression: bool) -> np.ndarray:
    """The targets of the observed steps, in the order of `_steps`: (S, O) for regression, (S,)
    labels for classification."""
    y = split.y[split.mask.astype(bool)]
    return y.reshape(len(y), -1).astype(np.float64) if regression else y.astype(np.int64)


def _one_step(regression: bool, train: Split, val: Split, test: Split) -> Choice | str:
    found = {name: _steps(split, regression) for name, split in (("train", train), ("val", val), ("test", test))}
    for name, got in found.items():
        if isinstance(got, str):
            return f"{got} (the {name} split)"
    targets = np.concatenate([_step_targets(train, regression), _step_targets(val, regression)])
    return Choice(RIDGE if regression else LOGISTIC, np.concatenate([found["train"], found["val"]]), targets,
                  found["test"])


def task_refusal(meta: Meta) -> str | None:
    """Why no classical model fits the dataset's task, read from meta.json alone; None where one may."""
    if meta.task == "regression" and not meta.per_step:
        return ("a regression task with one target per series: the classical reference covers "
                "classification and per-step regression")
    return None


def choose(meta: Meta, train: Split, val: Split, test: Split) -> Choice | str:
    """The strongest candidate that accepts the dataset, with its inputs; or one line saying why
    none does (not an error: the report shows the line)."""
    refused = task_refusal(meta)
    if refused:
        return refused
    if meta.per_step:
        return _one_step(meta.task == "regression", train, val, test)
    found = {name: _series(split) for name, split in (("train", train), ("val", val), ("test", test))}
    for name, got in found.items():
        if isinstance(got, str):
            return f"{got} (the {name} split)"
    every = [s for got in found.values() for s in got]
    equal = len({s.shape[1] for s in every}) == 1
    fit_on = found["train"] + found["val"]
    labels = np.concatenate([train.y, val.y]).astype(np.int64)
    return Choice(MINIROCKET if equal else DTW, _stacked(fit_on, equal), labels, _stacked(found["test"], equal))
