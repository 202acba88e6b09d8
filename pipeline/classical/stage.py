"""`ctsweep classical DATASET`: the classical reference of one prepared dataset, scored as the
trials are, written to results/DATASET/classical.json.

    status          "ok", "failed" (the classifier raised or ran out of time: `reason`) or
                    "not_applicable" (no classical model accepts the data: `reason`)
    classifier      MiniRocket, 1-NN DTW, or for a per-step task one-step ridge or logistic
                    regression (pipeline.classical.choice), with `library` (aeon's or scikit-learn's version)
    metric, test    the dataset's metric on the test split (pipeline.training.metrics.score)
    train_seconds   the model's training time on one core (fit only)
    trained_on      "train+val": it has nothing to tune, so the validation split trains it too
    n_train, n_test, seed, time_limit_s; `unit`: "steps" where those count observed steps (the
                    one-step models), absent where they count series
    machine, threads the machine it trained on (pipeline.runtime.machine) and its one thread

The file is replaced whole or not at all (pipeline.stores.files.write_json), and only a readable
processed dataset gets one: a corrupt one raises the error that names `ctsweep prepare`.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.classical.choice import LIBRARY, ONE_STEP, choose, task_refusal
from pipeline.classical.fit import Fitted, fit_predict
from pipeline.config import ClassicalParams
from pipeline.runtime import machine
from pipeline.data.contract import Meta, Split, load_dataset, load_meta
from pipeline.stores.files import write_json
from pipeline.stores.paths import classical_result_path, processed_dir

TRAINED_ON = "train+val"


def _rows(meta: Meta, fitted: Fitted) -> np.ndarray:
    """(M, O) outputs shaped as a model's, one row per series or per observed step: a regressor's
    predictions; a classifier's class probabilities for several classes, the log-odds of class 1
    for a binary task."""
    if meta.task == "regression":
        return fitted.outputs
    k = 2 if meta.task == "binary" else meta.output_size
    full = np.zeros((len(fitted.outputs), k))
    full[:, fitted.classes] = fitted.outputs
    if meta.task != "binary":
        return full
    p = np.clip(full[:, 1], 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))[:, None]


def _outputs(meta: Meta, test: Split, fitted: Fitted) -> np.ndarray:
    """The test split's outputs as a model gives them: (N, O), or (N, L, O) for a per-step task
    with each observed step's row in its place (0 where nothing is observed: no metric reads it)."""
    rows = _rows(meta, fitted)
    if not meta.per_step:
        return rows
    mask = test.mask.astype(bool)
    full = np.zeros((*mask.shape, rows.shape[1]))
    full[mask] = rows
    return full


def _score(meta: Meta, test: Split, fitted: Fitted) -> float:
    import torch

    from pipeline.training.metrics import score

    output = torch.from_numpy(_outputs(meta, test, fitted).astype(np.float32))
    return score(meta, output, torch.from_numpy(test.y), torch.from_numpy(test.mask))


def _base(meta: Meta, params: ClassicalParams) -> dict[str, Any]:
    # the child that trains it runs on this machine, on one thread (pipeline.classical.fit)
    return {"library": f"aeon {version('aeon')}", "metric": meta.metric, "seed": params.seed,
            "time_limit_s": params.time_limit_s, "machine": machine.describe("cpu"), "threads": 1}


def evaluate(meta: Meta, splits: dict[str, Split], params: ClassicalParams) -> dict[str, Any]:
    """The record (module docstring) of the classical reference of a dataset's splits."""
    base = _base(meta, params)
    choice = choose(meta, splits["train"], splits["val"], splits["test"])
    if isinstance(choice, str):
        return {"status": "not_applicable", "reason": choice, **base}
    fitted = fit_predict(choice, params.seed, params.time_limit_s)
    library = LIBRARY[choice.classifier]
    base["library"] = f"{library} {version(library)}"
    sizes = {"n_train": len(choice.y_train), "n_test": len(choice.test),
             **({"unit": "steps"} if choice.classifier in ONE_STEP else {})}  # else series
    if isinstance(fitted, str):
        return {"status": "failed", "classifier": choice.classifier, "reason": fitted, **base, **sizes}
    return {"status": "ok", "classifier": choice.classifier, "test": round(_score(meta, splits["test"], fitted), 6),
            "train_seconds": round(fitted.seconds, 3), "trained_on": TRAINED_ON, **base, **sizes}


def run(root: Path, dataset: str, params: ClassicalParams) -> dict[str, Any]:
    """Compute and write results/DATASET/classical.json; returns the record."""
    folder = processed_dir(root, dataset)
    meta = load_meta(folder)  # a task no classifier fits is told without reading the arrays
    refused = task_refusal(meta)
    if refused:
        record = {"dataset": dataset, "status": "not_applicable", "reason": refused, **_base(meta, params)}
    else:
        data = load_dataset(folder)
        record = {"dataset": dataset, **evaluate(data.meta, data.splits, params)}
    write_json(classical_result_path(root, dataset), record)
    return record


def summary(record: dict[str, Any]) -> str:
    """One line for the command's output."""
    if record["status"] == "ok":
        return (f"{record['dataset']}: {record['classifier']} ({record['library']}) test {record['metric']} "
                f"{record['test']:.4f}, trained in {record['train_seconds']:.1f} s on one core")
    what = "failed" if record["status"] == "failed" else "no classical reference"
    return f"{record['dataset']}: {what}: {record['reason']}"


