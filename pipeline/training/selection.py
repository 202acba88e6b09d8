"""The one rule that picks "the best" anywhere: an epoch within a run, a trial within a search,
a seed's model within the final stage.

    the better validation metric; among equal metrics the lower validation loss (at the kept
    epoch); among those the earlier one (epoch, then Optuna trial number, then seed)

The rule reads scores and positions only, never the time or the order in which results arrived,
so two runs that computed the same numbers choose the same (issue 28). Ties are common: a
validation split of 54 series moves in steps of 1.85 %, and several trials reach 100 %.
"""

from __future__ import annotations

import math
from typing import Sequence

TIE_RULE = ("the better validation metric; on a tie the lower validation loss at the kept epoch; "
            "then the earlier epoch, trial number or seed")
# Early stopping reads the same pair (issue 29): on a validation split of 8 series the accuracy
# moves in steps of 12.5 % and stops changing long before the loss does, so an epoch that lowers
# the lowest validation loss so far is progress too, not only one that beats the kept epoch.
LOSS_PROGRESS = 1e-3  # relative: a fall of the lowest validation loss by more than 0.1 % is progress
PROGRESS_RULE = ("an epoch is progress when its validation metric beats the best so far or its validation "
                 f"loss is below the lowest so far by more than {LOSS_PROGRESS:.1%}; `patience` epochs without "
                 "progress stop a run")


def is_better(a: float, b: float | None, mode: str) -> bool:
    """Whether metric value `a` beats `b` (None: anything beats it) in direction `mode`."""
    return b is None or (a > b if mode == "max" else a < b)


def beats(metric: float, loss: float | None, best: tuple[float, float | None] | None, mode: str) -> bool:
    """Whether validation (metric, loss) beats the best so far (None: anything does): a better
    metric, or the same metric with a lower loss (no finite loss: never on a tie)."""
    if best is None or is_better(metric, best[0], mode):
        return True
    tied = metric == best[0] and loss is not None and math.isfinite(loss)
    return tied and (best[1] is None or not math.isfinite(best[1]) or loss < best[1])


def best_index(scores: Sequence[tuple[float | None, float | None]], mode: str) -> int | None:
    """The position of the best (metric, loss) pair by the rule, the earliest among equals; pairs
    without a metric (or a NaN one) never win. None when no pair has a metric.

    `scores` must already be in the rule's order (epochs, trial numbers or seeds ascending)."""
    best, where = None, None
    for i, (metric, loss) in enumerate(scores):
        if metric is None or metric != metric:
            continue
        if beats(metric, loss, best, mode):
            best, where = (metric, loss), i
    return where


def kept_epoch(metrics: dict[int, float], losses: dict[int, float], mode: str) -> int | None:
    """The epoch a run keeps: {epoch: validation metric} and {epoch: validation loss} -> the best
    epoch by the rule (None when no epoch has a metric)."""
    epochs = sorted(metrics)
    i = best_index([(metrics[e], losses.get(e)) for e in epochs], mode)
    return None if i is None else epochs[i]


def lowers_loss(loss: float | None, lowest: float | None) -> bool:
    """Whether validation loss `loss` is below the lowest so far by more than LOSS_PROGRESS
    (relative; any finite loss lowers None)."""
    if loss is None or not math.isfinite(loss):
        return False
    return lowest is None or loss < lowest - LOSS_PROGRESS * abs(lowest)


def progressed(metric: float, loss: float | None, best_metric: float | None, lowest: float | None,
               mode: str) -> bool:
    """Whether an epoch of validation (metric, loss) is progress for early stopping (PROGRESS_RULE):
    its metric beats the best so far, or its loss lowers the lowest so far by more than LOSS_PROGRESS.
    A metric tie with a barely lower loss moves the kept epoch (`beats`) but is no progress."""
    return is_better(metric, best_metric, mode) or lowers_loss(loss, lowest)
