"""A trial time limit that cannot hold one epoch is refused before Ray starts (issue 31).

`search.trial_time_limit_s` (or the family's `family_time_limit_s`) guards against a hung trial;
a trial that has not finished its first epoch within it fails, so a limit below one epoch fails
every trial, the paper's reference first, a minute into the search. params.yaml refuses limits
under a second (pipeline/config/limits.py); here the rule is measured:

    one optimiser step of the family's reference configuration, at its batch size on the real
    training split, timed on this machine with the trial's CPU threads, times the steps of one
    epoch (pipeline/training/budget.py: passes x batches, `search.min_steps` included) must fit
    in the limit.

The first step (a fresh model's warm-up) is timed first: when the limit holds an epoch of steps
that slow, nothing more is measured. Otherwise a second step is timed, and only a limit below an
epoch of those refuses: validation, logging and the warm-up are left out, so the estimate is a
floor of the real first epoch and a refusal is never a close call. Trials on a GPU or spread over
several workers are not measured here (the driver's CPU says nothing about them); nor is a
reference the trainer itself refuses or cannot step (the trial reports that).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from pipeline.config import SearchParams
from pipeline.data.contract import Dataset, take
from pipeline.errors import ConfigError
from pipeline.spaces import split_config
from pipeline.sweep.plans import FamilyPlan, time_limit_key
from pipeline.training.budget import effective_batch, steps_per_epoch
from pipeline.training.loop import Trainer, TrainSettings


def _subset(data: Dataset, batch: int) -> Dataset:
    """One batch of training series, and two of validation and test (the trainer prepares every split)."""
    def first(name: str, n: int) -> Any:
        split = data.splits[name]
        return take(split, np.arange(min(n, len(split.y))))

    splits = {"train": first("train", batch), "val": first("val", 2), "test": first("test", 2)}
    return replace(data, splits=splits, folder=None)  # folder None: no cached or precomputed whole-split inputs


def step_seconds(plan: FamilyPlan, p: SearchParams, data: Dataset, enough: float) -> tuple[float, int] | None:
    """(seconds of one optimiser step of the reference, steps in one epoch), the step timed once
    and again only when `enough` seconds an epoch would not hold the first; None when the
    reference cannot be stepped here."""
    train_cfg, model_cfg = split_config({**plan.space.fixed, **plan.space.reference})
    threads = torch.get_num_threads()
    try:
        settings = TrainSettings(**train_cfg)
        n_train = len(data.splits["train"].y)
        steps = steps_per_epoch(n_train, settings.batch_size, p.epochs, p.min_steps)
        torch.set_num_threads(max(1, int(plan.res.cpu)))  # as the trial will (pipeline/sweep/trial.py)
        batch = effective_batch(settings.batch_size, n_train)
        trainer = Trainer(plan.family, model_cfg, settings, _subset(data, batch), p.trial_seed, "cpu", p.epochs, 0)
        seconds = _timed(trainer)
        if seconds * steps > enough:
            seconds = min(seconds, _timed(trainer))
        return seconds, steps
    except Exception:  # noqa: BLE001 - a reference that fails to train is the trial's to report
        return None
    finally:
        torch.set_num_threads(threads)


def _timed(trainer: Trainer) -> float:
    start = time.perf_counter()
    trainer.train_epoch()  # one batch: the subset is one batch of series
    return time.perf_counter() - start


def check_time_limit(plan: FamilyPlan, p: SearchParams, data: Dataset, dataset: str) -> None:
    """Refuse the family's trial time limit when one epoch of its reference cannot fit in it."""
    limit = p.time_limit_for(plan.family)
    if limit is None or plan.res.gpu > 0 or plan.res.workers > 1:
        return
    measured = step_seconds(plan, p, data, limit)
    if measured is None or measured[0] * measured[1] <= limit:
        return
    seconds, steps = measured
    epoch, key = seconds * steps, time_limit_key(p, plan.family)
    unset = "null for no limit" if key.endswith("trial_time_limit_s") else "without this family's entry"
    raise ConfigError(
        f"params.yaml: key `{key}`: {limit:g} s cannot hold one epoch of {dataset}/{plan.family}: at its reference "
        f"configuration one optimiser step took {seconds:.3g} s on this machine and an epoch is {steps} steps, at "
        f"least {epoch:.3g} s before validation; allowed: at least {epoch:.3g} s (a guard against a hung trial: "
        f"several times that), or {unset}")
