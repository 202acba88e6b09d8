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

The range (time_range): the same W / P with each trial's or seed's epochs at the two cases it may
come to, rather than at their expectation, which is wrong either way when a seed may stop by
patience after 20 epochs or run its 100:

- low: every final seed stops as patience would: a running one at the mean of the unit's seeds
  that patience stopped having trained at least as far (before any did: the search's measure,
  Unit.prior_epochs, the chosen configuration's best epoch + patience), never before patience
  lets it (patience_floor); one not started, the mean of those seeds (or the prior). A search
  trial ASHA may stop stops at its next rung.
- high: every seed and trial not yet ended runs its whole budget, and the race's seeds that may
  still be added (Unit.most) are trained too.

Ended work counts as it ended in both, so the range narrows as seeds end. A final unit whose
seeds have no epoch time yet takes its search's (Unit.prior_epoch_s) times the stage's load:
how much slower the other units' seeds train here than their searches measured (load_factor).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pipeline.progress import asha
from pipeline.progress.model import FAILED, Snapshot, Unit, Work


PRIOR_WEIGHT = 5  # epochs a final unit's search-measured epoch time counts as, beside its seeds' own


def epoch_time(unit: Unit, load: float = 1.0) -> float | None:
    """t_u: the mean last-epoch time of the unit's work (a final unit: beside its prior, see the
    code), else its prior (Unit.prior_epoch_s) times `load` (load_factor). A search unit's trials not started yet are TPE's proposals, never its
    study's trial 0 (the paper's reference configuration, where the space has one), whose epoch
    often costs far less or more than the space's proposals do: once a proposal has been timed,
    the proposals' mean."""
    timed = [w.epoch_seconds for w in unit.work if w.epoch_seconds]
    proposals = [w.epoch_seconds for w in unit.work if w.epoch_seconds and w.label != 0] if unit.asha else []
    if proposals:
        return statistics.fmean(proposals)
    if timed and unit.prior_epoch_s:
        # A final unit: its seeds' epochs weighted by how many each trained, its search's (scaled
        # by the load) counting as PRIOR_WEIGHT of them: a lone seed's first epoch (its start-up,
        # another seed's beside it) ran 27 times its search's in a run of the docs, 4 times over its run.
        pairs = [(w.epochs, w.epoch_seconds) for w in unit.work if w.epoch_seconds and w.epochs > 0]
        weight = sum(n for n, _ in pairs) + PRIOR_WEIGHT
        return (sum(n * t for n, t in pairs) + PRIOR_WEIGHT * unit.prior_epoch_s * load) / weight
    if timed:
        return statistics.fmean(timed)
    return unit.prior_epoch_s * load if unit.prior_epoch_s else None


def load_factor(snapshot: Snapshot) -> float:
    """How much slower (above 1) or faster the stage's units train their epochs than their searches
    measured them: the training seconds of every epoch trained so far by units with a search
    measure (Unit.prior_epoch_s) over what those epochs took in their searches (1 with none). The
    search ran under another load (the machine's other work, its own trials beside it): on a
    loaded machine every family's seeds slowed alike, five-fold in a run of the docs, so a unit
    not yet timed is best guessed at its search's time scaled as the timed ones were. Weighted by
    epochs, so that one seed's first epoch (its start-up, the noisiest) does not set it."""
    here = searched = 0.0
    for u in snapshot.units:
        for w in u.work:
            if u.prior_epoch_s and w.epoch_seconds and w.epochs > 0:
                here += w.epochs * w.epoch_seconds
                searched += w.epochs * u.prior_epoch_s
    return here / searched if searched > 0 else 1.0


def budget_share(snapshot: Snapshot) -> float | None:
    """The mean share of its unit's epoch budget that the stage's ended work trained (None: none ended)."""
    shares = [min(1.0, w.epochs / u.max_epochs) for u in snapshot.units for w in u.work
              if w.ended and w.epochs > 0 and u.max_epochs > 0]
    return statistics.fmean(shares) if shares else None


def expected_total(unit: Unit, trained: int, share: float | None = None, stale: int | None = None) -> float:
    """T_u(c) of a running trial or seed: the mean epochs of the unit's ended work that trained at
    least `trained` (at least trained + 1); when none of the unit's work has ended, `share` of its
    budget (the stage's ended work's, budget_share), or without one its search's measure
    (Unit.prior_epochs) while the seed has not trained that far; else its whole budget.
    Never below what patience leaves it (patience_floor)."""
    ended = [w.epochs for w in unit.work if w.ended and w.epochs > 0]
    longer = [e for e in ended if e >= trained]
    if longer:
        guess = max(statistics.fmean(longer), trained + 1.0)
    elif not ended and share is not None:
        guess = max(unit.max_epochs * share, trained + 1.0)
    elif not ended and unit.prior_epochs and unit.prior_epochs > trained:
        guess = unit.prior_epochs  # its search's measure, before any of the stage's seeds ended
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
    running: expected_total), else `share` of its budget, else its search's measure
    (Unit.prior_epochs), else its budget."""
    started = [float(w.epochs) if w.ended else expected_total(unit, w.epochs, share, w.stale) for w in unit.work
               if not (w.ended and w.epochs <= 0)]
    if started:
        return statistics.fmean(started)
    if share is None and unit.prior_epochs:
        return min(float(unit.max_epochs), unit.prior_epochs)
    return unit.max_epochs * (share if share is not None else 1.0)


def _running_left(unit: Unit, w: Work, t: float, share: float | None) -> float:
    return (expected_total(unit, w.epochs, share, w.stale) - w.epochs) * (w.epoch_seconds or t)


def remaining_epoch_seconds(unit: Unit, share: float | None, survival: dict[int, float] | None = None,
                            load: float = 1.0) -> float | None:
    """W's term of one unit: its expected training seconds left; None when it has work left and
    no epoch time. A search unit with ASHA's rules counts epochs by them (`survival`: asha.survival)."""
    queued = max(0, unit.total - len(unit.work))
    if not queued and not unit.running:
        return 0.0
    t = epoch_time(unit, load)
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


def _pace_and_factors(snapshot: Snapshot) -> tuple[float, float | None, dict[int, float], float] | None:
    """(seconds of training per second of wall clock so far, budget_share, ASHA's survival,
    load_factor): what time_left and time_range both divide and scale by; None before any epoch."""
    done, busy = trained_epoch_seconds(snapshot), busy_seconds(snapshot)
    if done <= 0 or busy <= 0:
        return None
    return done / busy, budget_share(snapshot), asha.survival(snapshot), load_factor(snapshot)


def _time_left(snapshot: Snapshot, pace: float, share: float | None, survival: dict[int, float],
               load: float) -> float | None:
    left = [remaining_epoch_seconds(u, share, survival, load) for u in snapshot.units]
    if any(x is None for x in left):
        return None
    return sum(left) / pace  # type: ignore[arg-type]


def time_left(snapshot: Snapshot) -> float | None:
    """Seconds until the stage ends, as the module says; None while there is nothing to go by."""
    factors = _pace_and_factors(snapshot)
    return None if factors is None else _time_left(snapshot, *factors)


RANGE_SHARE = 0.2  # ends closer than this (high <= low x 1.2): one figure, the expectation within them


@dataclass(frozen=True)
class Range:
    """The time left, in seconds: `low` if every seed stops as patience would (ASHA stops every
    trial it may at the next rung), `high` if every one runs its budget and the race adds every
    seed it may; `expected`: time_left clipped into them (None: not estimated)."""

    low: float
    high: float
    expected: float | None = None

    @property
    def single(self) -> float | None:
        """The one figure to show when the ends are close (RANGE_SHARE), else None (show the range)."""
        if self.high > self.low * (1 + RANGE_SHARE):
            return None
        mid = (self.low + self.high) / 2 if self.expected is None else self.expected
        return min(self.high, max(self.low, mid))


def low_total(unit: Unit, w: Work) -> float:
    """The epochs a running final seed trains in all if patience stops it as soon as it may be
    expected to: the mean of the unit's seeds patience stopped (ended before their budget) that
    trained at least as far, else its search's measure (Unit.prior_epochs) if it has not trained
    that far, never before patience lets it (patience_floor), at least one epoch more."""
    c = w.epochs
    if c >= unit.max_epochs:
        return float(c)
    stopped = [v.epochs for v in unit.work if v.ended and 0 < v.epochs < unit.max_epochs and v.state != FAILED]
    longer = [e for e in stopped if e >= c]
    guess = statistics.fmean(longer) if longer else (unit.prior_epochs or 0.0)
    return min(float(unit.max_epochs), max(guess, patience_floor(unit, c, w.stale), c + 1.0))


def low_queued(unit: Unit, share: float | None) -> float:
    """The epochs of a final seed not started yet, in the patience case: the mean of the unit's
    seeds patience stopped, else its search's measure, else the expectation (expected_epochs)."""
    stopped = [v.epochs for v in unit.work if v.ended and 0 < v.epochs < unit.max_epochs and v.state != FAILED]
    if stopped:
        return statistics.fmean(stopped)
    if unit.prior_epochs:
        return min(float(unit.max_epochs), unit.prior_epochs)
    return expected_epochs(unit, share)


def _next_rung(unit: Unit, trained: int) -> int:
    """The epoch a search trial that has trained `trained` stops at if ASHA stops it at its next rung."""
    assert unit.asha is not None
    return min((r for r in unit.asha.epochs if trained < r < unit.max_epochs), default=unit.max_epochs)


def range_epoch_seconds(unit: Unit, share: float | None, survival: dict[int, float],
                        load: float = 1.0) -> tuple[float, float] | None:
    """(low, high): the unit's training seconds left at the two ends (Range); None when it has
    work left and no epoch time to go by."""
    queued = max(0, unit.total - len(unit.work))
    extra = max(0, (unit.most or 0) - max(unit.total, len(unit.work)))  # the race's seeds: high end only
    if not queued and not unit.running and not extra:
        return 0.0, 0.0
    t = epoch_time(unit, load)
    if t is None:
        return None
    m = float(unit.max_epochs)
    high = sum((m - w.epochs) * (w.epoch_seconds or t) for w in unit.running if w.epochs < m)
    high += (queued + extra) * m * t
    if unit.asha is not None:
        first = min(queued, asha.queued_free(unit))
        low = sum(max(0.0, (m if asha.free(unit, w) else _next_rung(unit, w.epochs)) - w.epochs)
                  * (w.epoch_seconds or t) for w in unit.running)
        low += (first * m + (queued - first) * _next_rung(unit, 0)) * t
        return low, high
    if unit.patience is None and unit.round_size:  # a search unit from before ASHA's rules were tagged
        low = remaining_epoch_seconds(unit, share, survival, load) or 0.0
        return min(low, high), high
    low = sum((low_total(unit, w) - w.epochs) * (w.epoch_seconds or t) for w in unit.running)
    low += queued * low_queued(unit, share) * t
    return low, high


def time_range(snapshot: Snapshot) -> Range | None:
    """The time left as a Range (the module's low and high ends, over the same pace as
    time_left); None while there is nothing to go by."""
    factors = _pace_and_factors(snapshot)
    if factors is None:
        return None
    pace, share, survival, load = factors
    ends = [range_epoch_seconds(u, share, survival, load) for u in snapshot.units]
    if any(x is None for x in ends):
        return None
    low = sum(x[0] for x in ends) / pace  # type: ignore[index]
    high = sum(x[1] for x in ends) / pace  # type: ignore[index]
    expected = _time_left(snapshot, *factors)
    return Range(low, max(low, high), None if expected is None else min(max(low, high), max(low, expected)))
