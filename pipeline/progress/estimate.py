"""The time a stage has left, from the epochs its trials or seeds have trained so far.

    remaining work  W = sum over units u of  t_u * ( q_u * e_u  +  sum over running r of max(e_u - c_r, 1) )
    pace            P = D / busy,   D = sum over all work of (epochs trained * its epoch seconds)
    time left         = W / P

t_u: the median of the unit's last epoch times (a final unit with none timed yet: its search's
epoch time, Unit.prior_epoch_s); q_u: its trials or seeds not started yet; c_r: a running one's
epochs so far; e_u: the epochs a trial or seed of the unit is expected to train, the mean of its
ended ones, else the stage's ended ones' mean share of their budget times the unit's budget, else
the whole budget; busy: the time since the first trial or seed started (the stage's own start-up,
Ray's and the data's, is behind it and does not slow what is left). Dividing by the pace measured
so far, rather than by the slots, carries everything an epoch's training time leaves out
(validation, a trial's start-up, MLflow) and however many trials actually ran at once. An
estimate, not a bound: ASHA and patience decide later how long the rest train.

None (no estimate shown) until the stage has trained an epoch, or while a unit with work left has
no epoch time to go by.
"""

from __future__ import annotations

import statistics

from pipeline.progress.model import Snapshot, Unit


def epoch_time(unit: Unit) -> float | None:
    """t_u: the median last-epoch time of the unit's work, else its prior (Unit.prior_epoch_s)."""
    timed = [w.epoch_seconds for w in unit.work if w.epoch_seconds]
    return statistics.median(timed) if timed else unit.prior_epoch_s


def budget_share(snapshot: Snapshot) -> float | None:
    """The mean share of its unit's epoch budget that the stage's ended work trained (None: none ended)."""
    shares = [min(1.0, w.epochs / u.max_epochs) for u in snapshot.units for w in u.work
              if w.ended and w.epochs > 0 and u.max_epochs > 0]
    return statistics.fmean(shares) if shares else None


def expected_epochs(unit: Unit, share: float | None) -> float:
    """e_u: the mean epochs of the unit's ended work, else `share` of its budget, else its budget."""
    ended = [w.epochs for w in unit.work if w.ended and w.epochs > 0]
    if ended:
        return statistics.fmean(ended)
    return unit.max_epochs * (share if share is not None else 1.0)


def remaining_epoch_seconds(unit: Unit, share: float | None) -> float | None:
    """W's term of one unit: its expected training seconds left; None when it has work left and
    no epoch time."""
    expected = expected_epochs(unit, share)
    queued = max(0, unit.total - len(unit.work))
    epochs = queued * expected + sum(max(expected - w.epochs, 1.0) for w in unit.running)
    if epochs <= 0:
        return 0.0
    t = epoch_time(unit)
    return None if t is None else epochs * t


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
    share = budget_share(snapshot)
    left = [remaining_epoch_seconds(u, share) for u in snapshot.units]
    if any(x is None for x in left):
        return None
    return sum(left) / (done / busy)  # type: ignore[arg-type]
