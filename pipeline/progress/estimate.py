"""The time a stage has left, from the epochs its trials or seeds have trained so far.

    time left = W / P
    W = sum over units u of ( sum over running r of (T_u(c_r) - c_r) * t_r  +  q_u * T_u(0) * t_u )
    P = D / busy,   D = sum over all work of (epochs trained * its last epoch time)

c_r: a running trial's or seed's epochs so far, t_r its last epoch time; q_u: the unit's trials or
seeds not started yet; t_u: the mean last epoch time of the unit's work (a search unit's
proposals' once one is timed, its reference left out: epoch_time; a final unit with none timed
yet: its search's epoch time, Unit.prior_epoch_s).

T_u(c): the epochs a trial or seed that has trained c of them is expected to train in all.
- A search trial: by ASHA's rules (pipeline.progress.asha): the first rounds' trials their whole
  budget, the others the budget weighted by the chance of getting past each rung.
- A final seed (patience), or a search unit without ASHA's rules (a run from before they were
  tagged): patience stops most before their budget, and the ones that end first are the ones
  stopped first, so the mean of the ended ones alone would say too little: a running one that has
  trained c epochs is expected to train as long as the unit's ended ones that trained at least c
  did on average (at least c + 1), or its whole budget when none did; one not started yet, the
  mean of the unit's started ones so counted. A unit none of whose work has ended takes the
  stage's ended work's mean share of its budget (the whole budget before any ended). A running
  seed trains at least c + patience - s, s its epochs since its last progress (patience_floor).

busy: the time since the first trial or seed started (the stage's own start-up is behind it).
Dividing by the pace measured so far, rather than by the slots, carries everything an epoch's
training time leaves out (validation, a trial's start-up, MLflow) and however many trials ran at
once. An estimate, not a bound: ASHA and patience decide later how long the rest train, and a
search's later proposals may train slower or faster than the ones so far.

None (no estimate shown) until the stage has trained an epoch, or while a unit with work left has
no epoch time to go by.
"""

from __future__ import annotations

import statistics

from pipeline.progress import asha
from pipeline.progress.model import Snapshot, Unit, Work


def epoch_time(unit: Unit) -> float | None:
    """t_u: the mean last-epoch time of the unit's work, else its prior (Unit.prior_epoch_s). A
    search unit's trials not started yet are TPE's proposals, never its study's trial 0 (the
    paper's reference configuration, where the space has one), whose epoch often costs far less or
    more than the space's proposals do: once a proposal has been timed, the proposals' mean."""
    timed = [w.epoch_seconds for w in unit.work if w.epoch_seconds]
    proposals = [w.epoch_seconds for w in unit.work if w.epoch_seconds and w.label != 0] if unit.asha else []
    if proposals:
        return statistics.fmean(proposals)
    return statistics.fmean(timed) if timed else unit.prior_epoch_s


def budget_share(snapshot: Snapshot) -> float | None:
    """The mean share of its unit's epoch budget that the stage's ended work trained (None: none ended)."""
    shares = [min(1.0, w.epochs / u.max_epochs) for u in snapshot.units for w in u.work
              if w.ended and w.epochs > 0 and u.max_epochs > 0]
    return statistics.fmean(shares) if shares else None


def expected_total(unit: Unit, trained: int, share: float | None = None, stale: int | None = None) -> float:
    """T_u(c) of a running trial or seed: the mean epochs of the unit's ended work that trained at
    least `trained` (at least trained + 1); when none of the unit's work has ended, `share` of its
    budget (the stage's ended work's, budget_share); else, or without a share, its whole budget.
    Never below what patience leaves it (patience_floor)."""
    ended = [w.epochs for w in unit.work if w.ended and w.epochs > 0]
    longer = [e for e in ended if e >= trained]
    if longer:
        guess = max(statistics.fmean(longer), trained + 1.0)
    elif not ended and share is not None:
        guess = max(unit.max_epochs * share, trained + 1.0)
    else:
        return float(max(unit.max_epochs, trained + 1))
    return max(guess, patience_floor(unit, trained, stale))


def patience_floor(unit: Unit, trained: int, stale: int | None) -> float:
    """The epochs a seed that has trained `trained`, the last `stale` of them without progress, trains
    at least: patience stops it only after `patience - stale` more such epochs (within its budget).
    A seed still improving is thus counted on for a full patience more, however early the unit's
    or the stage's other seeds stopped (0 without a patience or a logged count)."""
    if not unit.patience or stale is None:
        return 0.0
    return float(min(unit.max_epochs, trained + max(0, unit.patience - stale)))


def expected_epochs(unit: Unit, share: float | None) -> float:
    """T_u(0), for work not started: the mean over the unit's started work (ended: what it trained;
    running: expected_total), else `share` of its budget, else its budget."""
    started = [float(w.epochs) if w.ended else expected_total(unit, w.epochs, share, w.stale) for w in unit.work
               if not (w.ended and w.epochs <= 0)]
    if started:
        return statistics.fmean(started)
    return unit.max_epochs * (share if share is not None else 1.0)


def _running_left(unit: Unit, w: Work, t: float, share: float | None) -> float:
    return (expected_total(unit, w.epochs, share, w.stale) - w.epochs) * (w.epoch_seconds or t)


def remaining_epoch_seconds(unit: Unit, share: float | None, survival: dict[int, float] | None = None) -> float | None:
    """W's term of one unit: its expected training seconds left; None when it has work left and
    no epoch time. A search unit with ASHA's rules counts epochs by them (`survival`: asha.survival)."""
    queued = max(0, unit.total - len(unit.work))
    if not queued and not unit.running:
        return 0.0
    t = epoch_time(unit)
    if t is None:
        return None
    if unit.asha is not None:
        return _asha_left(unit, t, survival or {})
    return sum(_running_left(unit, w, t, share) for w in unit.running) + queued * expected_epochs(unit, share) * t


def _asha_left(unit: Unit, t: float, survival: dict[int, float]) -> float:
    """A search unit's training seconds left with asha.expected_total's epochs (the first rounds'
    trials: the whole budget)."""
    assert unit.asha is not None
    rungs, m = unit.asha, unit.max_epochs

    def total(w: Work) -> float:
        return float(m) if asha.free(unit, w) else asha.expected_total(rungs, m, w.epochs, survival)
    running = sum(max(0.0, total(w) - w.epochs) * (w.epoch_seconds or t) for w in unit.running)
    queued = max(0, unit.total - len(unit.work))
    first = min(queued, asha.queued_free(unit))
    return running + (first * m + (queued - first) * asha.expected_total(rungs, m, 0, survival)) * t


def trained_epoch_seconds(snapshot: Snapshot) -> float:
    """D: the training seconds of every epoch trained so far, failed trials' too (they took the time)."""
    return sum(w.epochs * (w.epoch_seconds or 0.0) for u in snapshot.units for w in u.work)


def busy_seconds(snapshot: Snapshot) -> float:
    """The wall time since the first trial or seed started (since the stage started if none says when)."""
    starts = [w.started for u in snapshot.units for w in u.work if w.started is not None]
    return snapshot.now - max(snapshot.started, min(starts)) if starts else snapshot.elapsed


def time_left(snapshot: Snapshot) -> float | None:
    """Seconds until the stage ends, as the module says; None while there is nothing to go by."""
    done, busy = trained_epoch_seconds(snapshot), busy_seconds(snapshot)
    if done <= 0 or busy <= 0:
        return None
    share, survival = budget_share(snapshot), asha.survival(snapshot)
    left = [remaining_epoch_seconds(u, share, survival) for u in snapshot.units]
    if any(x is None for x in left):
        return None
    return sum(left) / (done / busy)  # type: ignore[arg-type]
