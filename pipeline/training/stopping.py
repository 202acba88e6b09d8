"""How long a final seed trains: early stopping, the epoch budget and the wall-clock cap, keeping
the best validation epoch (pipeline.training.loop.Trainer runs the epochs)."""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

from pipeline.training.budget import MIN_STEPS
from pipeline.training.loop import Trainer
from pipeline.training.selection import beats

__all__ = ["BudgetedRun", "train_to_budget", "with_patience"]


def with_patience(train_cfg: dict[str, Any], patience: int | None) -> dict[str, Any]:
    """The training keys with early stopping after `patience` epochs, unless the configuration
    sets its own `patience` (a family's paper protocol keeps it) or `patience` is None."""
    if patience is None or train_cfg.get("patience"):
        return train_cfg
    return {**train_cfg, "patience": patience}


class BudgetedRun(NamedTuple):
    """What train_to_budget returns: per epoch the validation metric (`curve`), training seconds,
    mean training loss and validation loss; the best epoch's weights and its 1-based number; why
    training stopped ("patience", "max_epochs" or "time_limit"); the optimiser steps taken and
    those of one epoch."""
    curve: list[float]
    seconds: list[float]
    best_state: dict[str, Any] | None
    best_epoch: int
    stop: str
    train_losses: list[float] = []
    val_losses: list[float] = []
    steps: int = 0
    steps_per_epoch: int = 0


def train_to_budget(trainer: Trainer, epochs: int, time_limit_s: float | None, mode: str,
                    on_epoch: Callable[[dict[str, float]], None] | None = None,
                    min_steps: int = MIN_STEPS) -> BudgetedRun:
    """Train until early stopping, `epochs` or the wall-clock cap, whichever comes first, keeping
    the weights of the best validation epoch: the best metric, and among epochs that tie on it
    the lowest validation loss (`beats`). Early stopping (`patience`) counts epochs without
    progress: neither a better metric nor a lower loss (selection.PROGRESS_RULE), and never ends a
    run before `min_steps` optimiser steps (budget.MIN_STEPS: what the not-converged rule calls
    trained). `on_epoch` receives each epoch's metrics.

    The cap is checked before each epoch against the slowest epoch so far (training and
    validation), so training stops before it would run past `time_limit_s`, never midway; the
    first epoch always runs."""
    curve: list[float] = []
    seconds: list[float] = []
    train_losses: list[float] = []
    val_losses: list[float] = []
    best, best_state, best_epoch, slowest = None, None, 0, 0.0
    started = time.monotonic()
    def outcome(stop: str) -> BudgetedRun:
        return BudgetedRun(curve, seconds, best_state, best_epoch, stop, train_losses, val_losses,
                           trainer.steps, trainer.steps_per_epoch)

    while trainer.epoch < epochs:
        if time_limit_s is not None and curve and time.monotonic() - started + slowest > time_limit_s:
            return outcome("time_limit")
        epoch_start = time.monotonic()
        m = trainer.run_epoch()
        slowest = max(slowest, time.monotonic() - epoch_start)
        if on_epoch is not None:
            on_epoch(m)
        curve.append(m["val_metric"])
        seconds.append(m["epoch_seconds"])
        train_losses.append(m.get("train_loss"))
        val_losses.append(m.get("val_loss"))
        if beats(m["val_metric"], m.get("val_loss"), best, mode):
            best, best_state, best_epoch = (m["val_metric"], m.get("val_loss")), trainer.weights(), len(curve)
        if trainer.stopped_early and trainer.steps >= min_steps:  # `patience` epochs without progress
            return outcome("patience")
    return outcome("max_epochs")
