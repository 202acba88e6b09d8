"""What a search trial's process needs, shared by the single-process trial (pipeline.sweep.trial)
and the data-parallel one (pipeline.sweep.distributed): the trial's context, the dataset as this
node can see it, and the name of a trial's checkpoint file. Both import this module and neither
imports the other at module level, so the sweep modules import each other without a cycle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from pipeline.data.contract import Dataset
from pipeline.errors import TrialFailedError

STATE_FILE = "state.pt"  # a trial's checkpoint: the Trainer's state, single-process or rank 0's


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial process needs besides its sampled config; all paths absolute."""

    dataset: str
    family: str
    dataset_dir: str
    epochs: int
    seed: int
    cpus: float
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    time_limit_s: float | None = None
    gpus: float = 0.0
    workers: int = 1  # above 1: data-parallel over Ray Train workers (pipeline.sweep.distributed)
    time_limit_key: str = "search.trial_time_limit_s"  # the params.yaml key that set time_limit_s
    trial_number: int | None = None  # the trial's number in its family's Optuna study (0, 1, ...)
    repeat: int = 0  # which repeat of the family's search (`search.repeats`); `seed` already includes it
    min_steps: int = 1  # optimiser steps over `epochs` at least (`search.min_steps`, pipeline/training/budget.py)
    data_provenance: str = ""  # meta.json's provenance, tagged on the trial's run ("": data as published)
    checkpoint_every_s: float = 0.0  # `search.checkpoint_every_s`: seconds between a trial's checkpoints (0: every epoch)

    def first_epoch_too_slow(self) -> TrialFailedError:
        """The error of a trial whose first epoch outran the time limit: it names the key to raise."""
        return TrialFailedError(f"first epoch exceeded the trial time limit of {self.time_limit_s:g} s "
                                f"({self.time_limit_key})")


def local_dataset(data: Dataset) -> Dataset:
    """The dataset shipped through Ray's object store, keeping its folder (for the input caches)
    only where this node can see it: a worker node of a cluster usually cannot."""
    if data.folder is not None and not Path(data.folder).is_dir():
        return dataclasses.replace(data, folder=None)
    return data
