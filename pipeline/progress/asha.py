"""How many epochs ASHA is expected to let a search trial train: the search's term of the estimate.

ASHA (pipeline.sweep.scheduling.ResumableASHA, one bracket) decides at its rungs r_1 < ... < r_K
below the epoch budget m (grace_period x reduction_factor^k, as Ray's _Bracket builds them): a
trial goes on past rung r_k only when its score there is not below the (1 - 1/rf) quantile of the
earlier rounds' scores at r_k, so by design about one trial in rf goes on (Li et al. 2020, ASHA).
A trial that has trained c epochs is therefore expected to train, in all,

    T(c) = c + sum over the rungs r_k above c of Q_k (r_k - r_{k-1})  +  Q_{K+1} (m - r_K)
    Q_k  = p_j multiplied over the rungs r_j above c and below r_k    (the chance it gets to r_k)
    r_0 = c (the sum starts where the trial is)

p_k, the share that went on past rung k: ASHA's 1/rf, updated by the stage's decided trials,

    p_k = (went on past r_k + 1) / (decided at r_k + rf)

(the design's rate as one pseudo-trial in rf that went on, so that the first few decisions do not
swing it; every unit of a search stage shares the rungs and the rule, so they are pooled). A trial
decided at r_k: one stopped there, or one that trained past it.

Why not the mean of the unit's ended trials: the first rounds of each study (rounds_in_flight
of them) are never stopped, there being nothing earlier to compare them with, so the trials that
end first trained the whole budget and the ones queued behind them mostly will not; and the mean
of the few ended ones swings with each. The first rounds' trials are counted at the budget.
"""

from __future__ import annotations

from pipeline.progress.model import STOPPED, Rungs, Snapshot, Unit, Work


def free(unit: Unit, work: Work) -> bool:
    """A trial of its study's first rounds, which ASHA never stops."""
    return unit.asha is not None and 0 <= work.label < unit.asha.free


def survival(snapshot: Snapshot) -> dict[int, float]:
    """{rung epoch: p_k} over the stage's search units with ASHA rules (the module's formula)."""
    went_on: dict[int, int] = {}
    decided: dict[int, int] = {}
    keep: dict[int, float] = {}
    for unit in snapshot.units:
        if unit.asha is None:
            continue
        for rung in unit.asha.epochs:
            keep.setdefault(rung, unit.asha.keep)
            for w in unit.work:
                if free(unit, w):
                    continue
                past, stopped_here = w.epochs > rung, w.state == STOPPED and w.epochs == rung
                went_on[rung] = went_on.get(rung, 0) + past
                decided[rung] = decided.get(rung, 0) + (past or stopped_here)
    return {rung: (went_on.get(rung, 0) + 1) / (decided.get(rung, 0) + 1 / keep[rung]) for rung in keep}


def expected_total(rungs: Rungs, max_epochs: int, trained: int, p: dict[int, float]) -> float:
    """T(c) of a trial (not of the first rounds) that has trained `trained` = c epochs."""
    total, reach, at = float(trained), 1.0, trained
    for rung in sorted(r for r in rungs.epochs if trained < r < max_epochs):
        total += reach * (rung - at)
        reach *= p.get(rung, rungs.keep)
        at = rung
    return total + reach * max(0, max_epochs - at)


def queued_free(unit: Unit) -> int:
    """The first rounds' trials of the unit not started yet (ASHA will not stop them)."""
    assert unit.asha is not None
    per_study = min(unit.asha.free, unit.total // max(1, unit.asha.repeats))
    started = sum(free(unit, w) for w in unit.work)
    return max(0, unit.asha.repeats * per_study - started)
