"""The trivial baselines under every results table, and the mark of a cell that does not beat them.

A trivial predictor ignores the inputs. Its score is what a table's numbers must be read against:
49 % accuracy is chance on a balanced two-class task and a fine result on a ten-class one.

    majority class   accuracy: every series (or, per step, every observed step) is given the most
                     frequent label of the training split (ties: the smaller label).
    constant score   AUROC: one score for every series ranks no positive above a negative (0.5).
    training mean    MSE: every target is predicted by the training targets' mean (per output).
    last value       per-step regression: a step's target is predicted by the target of the
                     series' previous observed step (its first step by the training mean). On
                     next-step prediction (walker2d: the target of step i is the state after it)
                     that repeats the last state the series has seen, one step stale where the
                     step before was dropped.

Each is scored by the metric the trials are scored by (pipeline.training.metrics.score, on the
same processed splits, the same observed steps), never by a formula of its own. Where a dataset
has two (per-step regression), the one better on validation is the baseline, as the best family
is chosen on validation.

A cell is marked `no_better_than_trivial` (marks.RULES) when a one-sided one-sample t-test of its
test scores (per seed, or per search repeat when the dataset's families have several:
tables.test_units) does not find them better than the baseline's test score at p < TRIVIAL_ALPHA. A single
score cannot be tested: such a cell is marked, as it is not shown to be better.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from pipeline.data.contract import Meta, load_meta
from pipeline.errors import CtsweepError
from pipeline.reporting.marks import NO_BETTER_THAN_TRIVIAL, TRIVIAL_ALPHA, Mark
from pipeline.reporting.numbers import fmt
from pipeline.reporting.tables import p_value, test_units
from pipeline.stores.paths import processed_dir

@dataclass(frozen=True)
class Trivial:
    """One trivial predictor's scores: `name` as the table prints it, `detail` what it predicted."""

    name: str
    detail: str
    val: float
    test: float

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "detail": self.detail, "val": round(self.val, 6), "test": round(self.test, 6)}


@dataclass(frozen=True)
class _Targets:
    """A split's targets and observed steps: y (N,), (N, O), (N, L) or (N, L, O); mask (N, L)."""

    y: np.ndarray
    mask: np.ndarray


def _targets(folder: Path, split: str) -> _Targets:
    """y and mask of one processed split, without x (the largest array, which no baseline reads)."""
    path = folder / f"{split}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            return _Targets(z["y"], z["mask"].astype(bool))
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise CtsweepError(f"{path}: {first_line}") from None


def _observed(meta: Meta, t: _Targets) -> np.ndarray:
    """The targets the metric scores: (M,) or (M, O), per step only the observed steps."""
    return t.y[t.mask] if meta.per_step else t.y


def _score(meta: Meta, output: np.ndarray, t: _Targets) -> float:
    """`output` (raw outputs shaped as a model's: (N, O) or (N, L, O)) scored as a trial is."""
    import torch

    from pipeline.training.metrics import score

    return score(meta, torch.from_numpy(np.ascontiguousarray(output, dtype=np.float32)),
                 torch.from_numpy(t.y), torch.from_numpy(t.mask))


def _constant(meta: Meta, t: _Targets, row: np.ndarray) -> np.ndarray:
    """`row` (O,) as every output of a split: (N, O), or (N, L, O) per step."""
    shape = (*t.mask.shape, len(row)) if meta.per_step else (len(t.y), len(row))
    return np.broadcast_to(row.astype(np.float32), shape)


def _label_predictor(meta: Meta, train: _Targets) -> tuple[str, str, np.ndarray]:
    """(name, detail, output row) of the majority class, or of the constant score for AUROC."""
    labels = _observed(meta, train).astype(np.int64).ravel()
    k = 2 if meta.task == "binary" else meta.output_size
    counts = np.bincount(labels, minlength=k)
    top = int(np.argmax(counts))  # the first of equal counts: the smaller label
    if meta.metric == "auroc":
        return "constant score", "one score for every series", np.zeros(1)
    if meta.task == "binary":
        row = np.array([1.0 if top == 1 else -1.0])
    else:
        row = np.zeros(k)
        row[top] = 1.0
    label = meta.classes[top] if top < len(meta.classes) else str(top)
    return "majority class", f"class {label}: {counts[top]:,} of {counts.sum():,} training targets", row


def _last_values(meta: Meta, t: _Targets, mean: np.ndarray) -> np.ndarray:
    """Per-step regression: at each observed step the target of the series' previous observed
    step, the training mean at its first. (N, L, O)."""
    y = t.y.reshape(*t.mask.shape, -1).astype(np.float32)
    out = np.broadcast_to(mean.astype(np.float32), y.shape).copy()
    for n in range(len(y)):
        steps = np.flatnonzero(t.mask[n])
        out[n, steps[1:]] = y[n, steps[:-1]]
    return out


def trivial_baselines(folder: Path) -> list[Trivial]:
    """Every trivial predictor of the processed dataset in `folder`, scored on its validation and
    test splits (pipeline.data.contract); raises CtsweepError naming the file it cannot read."""
    meta = load_meta(folder)
    train, val, test = (_targets(folder, s) for s in ("train", "val", "test"))
    if meta.task != "regression":
        name, detail, row = _label_predictor(meta, train)
        return [Trivial(name, detail, *(_score(meta, _constant(meta, s, row), s) for s in (val, test)))]
    observed = _observed(meta, train).astype(np.float64)
    mean = observed.reshape(len(observed), -1).mean(axis=0)
    found = [Trivial("training mean", f"the mean of {len(observed):,} training targets",
                     *(_score(meta, _constant(meta, s, mean), s) for s in (val, test)))]
    if meta.per_step:
        found.append(Trivial("last value", "each step's target predicted by the previous observed step's",
                             *(_score(meta, _last_values(meta, s, mean), s) for s in (val, test))))
    return found


def baseline(found: list[Trivial], mode: str) -> Trivial:
    """The baseline a cell must beat: of several, the one better on validation (never on test)."""
    return max(found, key=lambda b: b.val if mode == "max" else -b.val)


def better_p(units: list[float], trivial: float, mode: str) -> float:
    """One-sided p-value of "the scores are better than `trivial`" (one-sample t-test); NaN when
    it cannot be computed (one score, or every score equal to `trivial`)."""
    if len(units) < 2:
        return math.nan
    if len(set(units)) == 1:  # no spread: better, equal (untestable) or worse for certain
        gain = units[0] - trivial if mode == "max" else trivial - units[0]
        return 0.0 if gain > 0 else math.nan if gain == 0 else 1.0
    alternative = "greater" if mode == "max" else "less"
    return float(sps.ttest_1samp(units, trivial, alternative=alternative).pvalue)


def no_better_than_trivial(final: dict[str, Any], by_repeat: bool, trivial: Trivial) -> tuple[Mark | None, float]:
    """(the mark of an ok final record whose test scores are not shown better than `trivial`'s
    test score, or None; the one-sided p-value, NaN where it cannot be computed)."""
    units = test_units(final, by_repeat)
    p = better_p(units, trivial.test, final["mode"])
    if p < TRIVIAL_ALPHA:
        return None, p
    metric, what = final["metric"], "search repeats" if by_repeat and final.get("repeats") else "seeds"
    why = f"{len(units)} {what[:-1] if len(units) == 1 else what}: no test" if math.isnan(p) else p_value(p)
    return Mark(NO_BETTER_THAN_TRIVIAL, f"test {fmt(final['test_mean'], None, metric)} against {trivial.name} "
                                        f"{fmt(trivial.test, None, metric)} ({why}, one-sided)"), p


def dataset_baselines(root: Path, dataset: str) -> list[Trivial] | str:
    """The trivial baselines of a prepared dataset, or why there are none (one line, no error: the
    report goes on without them). Paths in the reason are relative to `root`, so that the same
    project gives the same metrics.json wherever it lies."""
    folder = processed_dir(root, dataset)
    if not (folder / "meta.json").is_file():
        return f"no processed data in {folder.relative_to(root)} (`ctsweep prepare {dataset}` writes it)"
    try:
        return trivial_baselines(folder)
    except CtsweepError as exc:
        return " ".join(str(exc).replace(f"{root}{os.sep}", "").split())


def judge(ok: dict[str, dict[str, Any]], found: list[Trivial] | str,
          by_repeat: bool) -> tuple[dict[str, Mark], dict[str, float]]:
    """(family -> its no_better_than_trivial mark, family -> its one-sided p-value) over a
    dataset's ok final records; both empty where the baselines could not be computed."""
    if isinstance(found, str) or not ok:
        return {}, {}
    chosen = baseline(found, next(iter(ok.values()))["mode"])
    judged = {f: no_better_than_trivial(r, by_repeat, chosen) for f, r in ok.items()}
    return {f: m for f, (m, _) in judged.items() if m is not None}, {f: p for f, (_, p) in judged.items()}


def as_json(found: list[Trivial] | str, mode: str) -> dict[str, Any]:
    """metrics.json's entry of a dataset's baselines: every one and the name of the one cells must
    beat, or `not_computed` with the reason."""
    if isinstance(found, str):
        return {"not_computed": found}
    return {"trivial": [b.as_json() for b in found], "baseline": baseline(found, mode).name}


def trivial_rows(found: list[Trivial] | str, mode: str, metric: str, columns: int) -> list[str]:
    """The table's rows of the trivial baselines, test and validation scores (`columns`: the
    table's column count); none where they could not be computed."""
    if isinstance(found, str):
        return []
    chosen = baseline(found, mode)
    rows = []
    for b in found:
        name = f"*trivial: {b.name}*" + (" (the baseline)" if len(found) > 1 and b is chosen else "")
        rows.append(f"| {name} | {fmt(b.test, None, metric)} | {fmt(b.val, None, metric)} |" + " — |" * (columns - 3))
    return rows


def trivial_note(found: list[Trivial] | str) -> list[str]:
    """The line under a table that says what each trivial baseline predicted, or why there is none."""
    if isinstance(found, str):
        return [f"Trivial baseline not computed: {found}.", ""]
    what = "; ".join(f"{b.name}: {b.detail}" for b in found)
    return [f"Trivial baselines (*italic* rows), scored as the trials are on the same splits: {what}.", ""]
