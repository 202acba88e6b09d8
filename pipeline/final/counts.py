"""Scores that count: a final record's means from each seed's (correct, scored) counts.

Accuracy is a ratio of counts. Averaged as floats, five seeds' 53/54, 54/54, ... give means
that differ in the last bits with the order of the sum, and such a difference once decided
which of four families tied at 266 of 270 validation series was "best". From the counts, the
mean is an exact Fraction turned into one float: equal counts, equal bits, in any order.
"""

from __future__ import annotations

import statistics
from fractions import Fraction
from typing import Any, Sequence

SPLITS = ("val", "test")


def summary(values: Sequence[float | Fraction]) -> tuple[float, float]:
    """(mean, sample standard deviation with ddof = 1; 0 for a single value). Exact Fractions
    (split_summary) are summed exactly, so their mean is the same bits in any order."""
    if values and all(isinstance(v, Fraction) for v in values):
        return float(statistics.mean(values)), statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def exact_scores(runs: Sequence[dict[str, Any]], split: str) -> list[float | Fraction]:
    """Each run's `split` ("val" or "test") score: the exact Fraction of its counts
    (`<split>_counts`, [correct, scored]) where every run has them, else its float score."""
    key = f"{split}_counts"
    if runs and all(r.get(key) for r in runs):
        return [Fraction(int(r[key][0]), int(r[key][1])) for r in runs]
    return [r[split] for r in runs]


def split_summary(runs: Sequence[dict[str, Any]], split: str) -> tuple[float, float]:
    """(mean, std) of the runs' `split` scores over runs, from counts where they were recorded."""
    return summary(exact_scores(runs, split))



def summed_counts(runs: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """{"val_counts": [correct, scored], "test_counts": [...]} summed over the runs, for each split
    every run has counts of; empty for metrics that are no ratio of counts (AUROC, MSE)."""
    out = {}
    for split in SPLITS:
        key = f"{split}_counts"
        if runs and all(r.get(key) for r in runs):
            out[key] = [sum(int(r[key][0]) for r in runs), sum(int(r[key][1]) for r in runs)]
    return out


def count_metrics(result: dict[str, Any]) -> dict[str, int]:
    """A seed result's counts as MLflow metrics (final_val_correct, final_val_scored, ...), so a
    resumed stage rebuilds them (counts_from_metrics)."""
    return {f"final_{split}_{name}": int(result[f"{split}_counts"][i]) for split in SPLITS
            if result.get(f"{split}_counts") for i, name in enumerate(("correct", "scored"))}


def counts_from_metrics(metrics: dict[str, float]) -> dict[str, list[int]]:
    """The inverse of count_metrics over a run's logged metrics; empty where none were logged."""
    return {f"{split}_counts": [int(metrics[f"final_{split}_correct"]), int(metrics[f"final_{split}_scored"])]
            for split in SPLITS if f"final_{split}_correct" in metrics and f"final_{split}_scored" in metrics}


def mean_loss(runs: Sequence[dict[str, Any]]) -> float | None:
    """Mean validation loss at the kept epochs, the tie-break of equal counts; None when a run has none."""
    losses = [r.get("val_loss") for r in runs]
    return None if any(v is None for v in losses) else statistics.fmean(losses)
