"""What a running stage has done so far, as read from its MLflow runs (pipeline.progress.read):
one `Unit` per (dataset, family) with the state of each of its trials or seeds (`Work`), and one
`Snapshot` per stage. Plain data: the estimate (estimate.py) and the renderers (render.py) take
it, so both are checked on hand-made snapshots."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SEARCH, FINAL = "search", "final"
RUNNING, DONE, STOPPED, FAILED = "running", "done", "stopped early", "failed"


@dataclass(frozen=True)
class Work:
    """One trial (search) or seed (final) of a unit.

    `label`: the Optuna trial number or the seed; `state`: RUNNING, DONE (ran its whole budget,
    or a seed that ended by its own rule), STOPPED (a search trial ASHA, patience or the time limit
    ended early) or FAILED; `epochs`: epochs trained so far; `epoch_seconds`: the last epoch's
    training time (None before the first); `best`: its best validation score so far; `started`:
    when its run started, in seconds since the epoch (None: not known); `stale`: the epochs since
    its last progress, early stopping's count (pipeline.training.selection.PROGRESS_RULE; None:
    not logged); `retried`: a final seed Ray started again after its worker or node died (its
    earlier run abandoned: pipeline.progress.read.superseded)."""

    label: int
    state: str
    epochs: int = 0
    epoch_seconds: float | None = None
    best: float | None = None
    started: float | None = None
    stale: int | None = None
    retried: bool = False

    @property
    def tag(self) -> str:
        """" (retried)" for a seed started again, else ""."""
        return " (retried)" if self.retried else ""

    @property
    def ended(self) -> bool:
        return self.state != RUNNING


@dataclass(frozen=True)
class Rungs:
    """ASHA's rules for a search unit's trials (pipeline.progress.asha): `epochs`, the rungs below the
    epoch budget where it may stop a trial; `keep`, the share it lets go on past each (1 /
    reduction_factor); `free`, the trials of each study numbered below this (its first
    rounds_in_flight rounds) that it never stops; `repeats`, the unit's studies."""

    epochs: tuple[int, ...]
    keep: float
    free: int = 0
    repeats: int = 1


@dataclass(frozen=True)
class Unit:
    """One (dataset, family) of a stage: `total` trials or seeds to run, each of at most
    `max_epochs` epochs; `round_size`: the search's trials proposed together and `rounds` their
    number per search repeat (None: final); `mode`: "max" or "min", which validation score is best."""

    dataset: str
    family: str
    total: int
    max_epochs: int
    mode: str = "max"
    round_size: int | None = None
    rounds: int | None = None
    work: tuple[Work, ...] = ()
    prior_epoch_s: float | None = None  # a final seed's epoch as its search measured it (before any is timed)
    asha: Rungs | None = None  # a search unit's ASHA rules (None: a final unit, or a run from before the tag)
    patience: int | None = None  # a final unit's early stopping: epochs without progress that stop a seed
    # A final seed's epochs when patience stops it, as the family's search measured (the chosen
    # configuration's trial: its best epoch + patience); the estimate's patience case before a seed ends.
    prior_epochs: float | None = None
    # The most trials or seeds the unit may come to (a final unit: its seeds once the race has
    # given every family its max_seeds; None: `total`): counted at the high end of the estimate only.
    most: int | None = None

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.family}"

    def count(self, state: str) -> int:
        return sum(w.state == state for w in self.work)

    @property
    def ended(self) -> int:
        """Trials or seeds that ended, however (done, stopped early or failed)."""
        return sum(w.ended for w in self.work)

    @property
    def finished(self) -> bool:
        return self.ended >= self.total

    @property
    def best(self) -> float | None:
        scores = [w.best for w in self.work if w.best is not None and math.isfinite(w.best)]
        if not scores:
            return None
        return max(scores) if self.mode == "max" else min(scores)

    @property
    def round(self) -> tuple[int, int] | None:
        """(current round, rounds) of a search unit, 1-based: the round of the newest trial
        started (trial numbers k * round_size onwards form round k + 1); None for a final unit."""
        if not self.round_size:
            return None
        rounds = self.rounds or max(1, math.ceil(self.total / self.round_size))
        started = [w.label for w in self.work]
        return (min(rounds, max(started) // self.round_size + 1) if started else 1), rounds

    @property
    def running(self) -> tuple[Work, ...]:
        return tuple(w for w in self.work if w.state == RUNNING)


@dataclass(frozen=True)
class Snapshot:
    """A stage at one moment: `started` and `now` in seconds since the epoch (the stage's start
    in its driver, and the time of the reading)."""

    stage: str
    started: float
    now: float
    units: tuple[Unit, ...] = field(default_factory=tuple)

    @property
    def elapsed(self) -> float:
        return max(0.0, self.now - self.started)

    @property
    def total(self) -> int:
        return sum(u.total for u in self.units)

    @property
    def ended(self) -> int:
        return sum(min(u.ended, u.total) for u in self.units)
