"""Your own data as a dataset: `{kind: local, path: ...}` (LocalParams in pipeline/config/datasets.py).

Formats, by extension (the layouts of one file or a folder: pipeline/data/kinds/local/files.py):
  * .csv  long format, one row per observation: series, time, channel columns, a label column
          (pipeline/data/kinds/local/long_csv.py). Splits: train.csv/test.csv[/val.csv] in a folder, else the
          file's `split` column (train/val/test per series), else the seeded rule below.
  * .ts   aeon's format (read by aeon's load_from_ts_file, as the uea kind does), univariate or
          multivariate, equal or unequal length, classification (@classLabel) or regression
          (@targetLabel): <Name>_TRAIN.ts + <Name>_TEST.ts in a folder, or one file split by rule.
          Steps that are NaN in every channel are not observations; times are the step indices.
  * .npz  train.npz, val.npz, test.npz already in the processed-dataset contract (x, t, mask, y:
          pipeline/data/contract.py), checked with the contract's own checks; or one such file,
          split by rule. Only standardisation and the metadata are added.

Splits by rule: 70/15/15 (1 - val_fraction - test_fraction / val_fraction / test_fraction),
seeded, stratified by class for per-sequence classification (contract.stratified_split). A
missing validation split is carved from train: val_fraction of it, stratified the same way.

What is not given is inferred from the train labels where that is unambiguous (task.py):
  * task: labels that are not all numbers are class names -> classification; integers (1 and 1.0
    alike) with at most MAX_INFERRED_CLASSES distinct values -> classification; numbers with a
    fraction -> regression (one output per sequence or step). More distinct integers are
    ambiguous (counts? class ids?): ConfigError naming `prepare.<name>.task`.
  * two classes stay `classification` (two outputs, softmax, accuracy), as the uea kind and the
    UCR literature report them; `task: binary` gives one logit and AUROC (imbalanced data).
  * metric: accuracy (classification), auroc (binary), mse (regression).
  * classes: sorted train labels (numbers sorted as numbers); `classes` sets names and order.
  * per_step: true when a label varies within any series; per-step labels are scored at
    observed steps only.
A class in val or test that train never has is a DataError naming the file and series.
Channels are standardised with train statistics (contract.standardise).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline.data.contract import SPLITS, Dataset, Meta, Split, pad_sequences, standardise, stratified_split
from pipeline.data.kinds.local.files import check_file, raw_layout, shown_name
from pipeline.data.kinds.local.long_csv import Part, read_long_csv
from pipeline.data.kinds.local.task import DEFAULT_METRIC, canonical_class, infer_task, label_numbers
from pipeline.errors import DataError, excerpt

if TYPE_CHECKING:
    from pipeline.config.datasets import LocalParams

Record = tuple[Part, int]  # series i of a file


def raw_files(p: LocalParams) -> list:
    """Nothing to download: `fetch` (local/files.py) copies the user's files instead."""
    return []


def build(name: str, p: LocalParams, raw_dir: Path) -> Dataset:
    """The dataset's train/val/test splits from the copies in raw_dir, standardised with train statistics."""
    files = raw_layout(raw_dir)
    shown = {k: shown_name(f) for k, f in files.items()}
    for k, f in files.items():  # the copies, checked again: build may run on copies fetched earlier
        check_file(f, shown[k])
    if next(iter(files.values())).suffix.lower() == ".npz":
        from pipeline.data.kinds.local.npz import build_npz

        return build_npz(name, p, files, shown)
    parts = {k: read_ts(f, shown[k]) if f.suffix.lower() == ".ts" else read_long_csv(f, p.label, p.split, shown[k])
             for k, f in files.items()}
    first = parts.get("train", parts.get("all"))
    for part in parts.values():
        if part.channels != first.channels:
            raise DataError(f"{part.where}: channels {excerpt(part.channels)} differ from {first.where}'s "
                            f"{excerpt(first.channels)}; "
                            f"allowed: the same channels, in the same order, in every file")
    groups = _groups(parts, p)
    per_step = _per_step(groups, p)
    labels = {k: [_labels(part, i, per_step) for part, i in records] for k, records in groups.items()}
    fit = "train" if "train" in groups else "all"
    task, classes = infer_task(name, p, np.concatenate(labels[fit]),
                               regression=any(part.regression for part in parts.values()), where=groups[fit][0][0].where)
    origin = "the `classes` key" if p.classes is not None else "the classes of the train labels"
    y = {k: [_encode(part, i, lab, task, classes, origin) for (part, i), lab in zip(records, labels[k])]
         for k, records in groups.items()}
    if task != "regression":
        _check_seen(groups, y, classes)
    strata = None if per_step or task == "regression" else np.asarray([v[0] for v in y[fit]])
    index = _assign(groups, strata, p, groups[fit][0][0].where)
    splits = {split: _to_split([(groups[g][j], y[g][j]) for g, j in picks], task, per_step)
              for split, picks in index.items()}
    splits, mean, std = standardise(splits)
    meta = Meta(
        name=name, task=task, per_step=per_step, output_size=len(classes) if task == "classification" else 1,
        metric=p.metric or DEFAULT_METRIC[task], channels=list(first.channels),
        source=f"local {p.path} ({_how(parts)}), seed {p.seed}", sizes={k: len(splits[k]) for k in SPLITS},
        norm_mean=mean.tolist(), norm_std=std.tolist(), classes=classes,
    )
    return Dataset(meta, {k: splits[k] for k in SPLITS})


def _how(parts: dict[str, Part]) -> str:
    if "all" not in parts:
        return "the files' train/test splits" + ("" if "val" in parts else ", validation carved from train")
    return "its split column" if parts["all"].splits is not None else "split by rule, stratified where classes allow"


# ---------------------------------------------------------------------------------- reading


def read_ts(path: Path, where: str) -> Part:
    """An aeon .ts file as a Part: observed steps only, step indices as times; `where` names it."""
    from pipeline.data.kinds.uea import observed_rows, read_ts as read

    series, labels = read(path, where, targets_ok=True)
    counts = sorted({s.shape[1] for s in series})
    if len(counts) != 1:
        raise DataError(f"{where}: series have different channel counts {counts}; allowed: one count per file")
    values, times = observed_rows(series, where)
    regression = labels.dtype.kind == "f"
    return Part(where=where, ids=[str(i) for i in range(len(series))], values=values, times=times,
                labels=[np.asarray([lab]) for lab in labels], channels=[f"c{c}" for c in range(counts[0])],
                regression=regression)


# ---------------------------------------------------------------------------------- labels


def _groups(parts: dict[str, Part], p: LocalParams) -> dict[str, list[Record]]:
    """Series by split: the files' splits, the split column's, or all of them ("all")."""
    if "all" not in parts:
        return {k: [(part, i) for i in range(len(part.ids))] for k, part in parts.items()}
    part = parts["all"]
    if part.splits is None:
        return {"all": [(part, i) for i in range(len(part.ids))]}
    groups = {s: [(part, i) for i, v in enumerate(part.splits) if v == s] for s in ("train", "val", "test")}
    for s in ("train", "test"):
        if not groups[s]:
            raise DataError(f"{part.where}: column {excerpt(p.split)} names no {s!r} series; allowed: train and test "
                            f"series, val optional (else carved from train)")
    return {k: v for k, v in groups.items() if v}


def _per_step(groups: dict[str, list[Record]], p: LocalParams) -> bool:
    """`per_step` as given, else whether any series' label varies."""
    for records in groups.values():
        for part, i in records:
            labels = part.labels[i]
            differs = np.flatnonzero(labels != labels[0])
            if len(differs) and p.per_step is None:
                return True
            if len(differs) and p.per_step is False:
                j = differs[0]
                raise DataError(f"{part.where}: {part.at(i, j)}: label {excerpt(labels[j])} differs from "
                                f"{excerpt(labels[0])} earlier "
                                f"in the series; with `per_step: false` a series has one label")
    return bool(p.per_step)


def _labels(part: Part, i: int, per_step: bool) -> np.ndarray:
    """Series i's labels: one per step when per_step (a .ts label repeated), else its one label."""
    labels = part.labels[i]
    if per_step and len(labels) != len(part.values[i]):
        return np.repeat(labels[:1], len(part.values[i]))
    return labels if per_step else labels[:1]


def _encode(part: Part, i: int, labels: np.ndarray, task: str, classes: list[str], origin: str) -> np.ndarray:
    """Labels -> class indices (int64) or targets (float32); one value, or one per step."""
    if task == "regression":
        values = label_numbers(labels)
        if values is None or not np.isfinite(values).all():
            numbers = pd.to_numeric(pd.Series(labels, dtype=object), errors="coerce").to_numpy(np.float64)
            j = int(np.flatnonzero(~np.isfinite(numbers))[0])
            raise DataError(f"{part.where}: {part.at(i, j)}: label {excerpt(labels[j])} is not a finite number; "
                            f"regression needs finite numeric labels")
        return values.astype(np.float32)
    index = {c: k for k, c in enumerate(classes)}
    out = np.empty(len(labels), np.int64)
    for j, label in enumerate(labels):
        k = index.get(canonical_class(label))
        if k is None:
            raise DataError(f"{part.where}: {part.at(i, j)}: class {excerpt(canonical_class(label))} is not among "
                            f"{origin} {excerpt(classes)}; allowed: classes that train has (and `classes` lists, "
                            f"when given)")
        out[j] = k
    return out


def _check_seen(groups: dict[str, list[Record]], y: dict[str, list[np.ndarray]], classes: list[str]) -> None:
    """DataError for a val or test class that no train series has: no model could learn it."""
    if "train" not in groups:
        return  # split by rule: stratified, so every class with enough series is in train
    seen = set(np.concatenate(y["train"]).tolist())
    for split in ("val", "test"):
        for (part, i), labels in zip(groups.get(split, []), y.get(split, [])):
            new = np.flatnonzero(~np.isin(labels, list(seen)))
            if len(new):
                train = excerpt([classes[k] for k in sorted(seen)])
                raise DataError(f"{part.where}: {part.at(i, int(new[0]))}: class {excerpt(classes[labels[new[0]]])} "
                                f"never appears in the train split (train has {train}); "
                                f"allowed: classes that train has")


# ---------------------------------------------------------------------------------- splitting


def _assign(groups: dict[str, list[Record]], strata: np.ndarray | None, p: LocalParams, where: str
            ) -> dict[str, list[tuple[str, int]]]:
    """{"train", "val", "test"} -> (group, index in group): the given splits, val carved, or the rule."""
    from sklearn.model_selection import train_test_split

    def failed(n: int, exc: ValueError) -> DataError:  # sklearn: a class too small to stratify, or too few series
        return DataError(f"{where}: cannot split {n} series (seed {p.seed}): {' '.join(str(exc).split())}")

    if "all" in groups:  # the rule, as every kind with one pool of series splits it
        n = len(groups["all"])
        fractions = (1 - p.val_fraction - p.test_fraction, p.val_fraction, p.test_fraction)
        try:
            index = stratified_split(strata if strata is not None else np.zeros(n), p.seed, fractions)
        except ValueError as exc:
            raise failed(n, exc) from None
        return {k: [("all", int(j)) for j in v] for k, v in index.items()}
    out = {k: [(k, j) for j in range(len(v))] for k, v in groups.items()}
    if "val" not in groups:  # as contract.carve_validation, for per-step and regression labels too
        n = len(groups["train"])
        try:
            train, val = train_test_split(np.arange(n), test_size=p.val_fraction, random_state=p.seed, stratify=strata)
        except ValueError as exc:
            raise failed(n, exc) from None
        out["train"], out["val"] = [("train", int(j)) for j in np.sort(train)], [("train", int(j)) for j in np.sort(val)]
    return out


def _to_split(chosen: list[tuple[Record, np.ndarray]], task: str, per_step: bool) -> Split:
    """Series and their encoded labels -> one padded Split."""
    values = [part.values[i] for (part, i), _ in chosen]
    times = [part.times[i] for (part, i), _ in chosen]
    x, t, mask = pad_sequences(values, times)
    n, length = mask.shape
    dtype = np.float32 if task == "regression" else np.int64
    if per_step:
        y = np.zeros((n, length), dtype)
        for row, (_, labels) in enumerate(chosen):
            y[row, : len(labels)] = labels
    else:
        y = np.asarray([labels[0] for _, labels in chosen], dtype)
    if task == "regression":
        y = y[..., None]  # one output: (N, 1) or (N, L, 1)
    return Split(x, t, mask, y)
