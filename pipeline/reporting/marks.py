"""When a cell (dataset, family) of the results table cannot be trusted: the marks and their rules.

    not_converged  more than half of the family's nominal final seeds (lr x 1) are not converged.
                   A seed is not converged when any of these holds (issue 29):
                   - short: it trained fewer than MIN_STEPS optimiser steps, whatever stopped it;
                   - improving: its training ended at the budget (`stop` is "max_epochs" or
                     "time_limit", not "patience"; records older than `stop` count as
                     "max_epochs") while its validation metric was still improving: the best value
                     of its last quarter of epochs (at least one) beats the best before them by
                     more than IMPROVEMENT_TOL x |that earlier best|;
                   - falling: its training or its validation loss was still clearly falling when
                     it stopped, however it stopped: the last quarter of epochs lowered the
                     loss's minimum by more than FALLING_SHARE of everything it fell from the
                     first epoch (a curve that levelled off makes a small share of its fall at
                     the end; one cut short makes a quarter or more), and by more than NOISE_K
                     times the curve's own epoch-to-epoch noise (a flat curve's noise would
                     otherwise read as a fall: see epoch_noise).
                   Records from before a criterion's inputs were kept (steps, loss curves) are
                   judged by the criteria they can be.
    edge           the best configuration lies in the outer EDGE_FRACTION of a searched numeric
                   range (float or int with low/high; measured in log space when the range is
                   log-uniform): the search may have stopped short of a better value outside it.
                   Categorical keys are never marked, nor integer ranges of fewer than
                   MIN_INT_VALUES values (solver_steps in [1, 4]): their ends are a quarter or
                   more of the choices each, so sitting there says nothing about the range. Nor
                   is a search whose trials completed fewer than two (num_samples 1: the
                   reference alone, as the reproduction profiles run it): it compared nothing,
                   so where its configuration sits in the range says nothing either.
    mostly_failed  more than FAILED_SHARE of the search's trials failed (n_failed / n_trials).
    failed         every search trial failed (the final record's status is "failed"): the cell
                   has no scores; its detail is the record's `errors`.
    not_causal     on a per-step task, the family's output at a step reads inputs after it (the
                   final record's `reads_later_steps`, set by the final stage for a family with no
                   causal variant, which runs as published: CDR-NDE-heat's Laplacian, for one;
                   issue 30). Its detail starts "reads later steps: not comparable on next-step
                   prediction"; the paper's figure beside the cell carries the same symbol.
    search_not_saturated  the search's expected best validation score over its trials still rose
                   by more than SATURATION_SHARE between half its trials and all of them
                   (pipeline.reporting.show_your_work, which sets it from the search record).
    time_limited   a final seed's training was cut by `final.time_limit_s` (its `stop` is
                   "time_limit"): the wall-clock guard fired, so the seed trained fewer epochs than
                   the budget gave it, and how many depended on the machine's load. Its detail
                   names the seeds and the epochs each trained of the budget.
    no_better_than_trivial  the cell's test scores are not shown better than the trivial baseline
                   under its table (a one-sided t-test at p < TRIVIAL_ALPHA: pipeline.reporting.trivial,
                   which sets it; it needs the processed data, which these records do not hold).

Every function takes the plain final / search records (see the record contracts in final.py and
search.py) and returns `Mark`s; the report, `ctsweep status` and `promote` all use these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.training.budget import MIN_STEPS  # optimiser steps: a seed that took fewer has not trained

NOT_CONVERGED, EDGE, MOSTLY_FAILED, FAILED = "not_converged", "edge", "mostly_failed", "failed"
NOT_CAUSAL = "not_causal"
NOT_SATURATED = "search_not_saturated"
NO_BETTER_THAN_TRIVIAL = "no_better_than_trivial"
TIME_LIMITED = "time_limited"
LATER_STEPS = "reads later steps: not comparable on next-step prediction"  # the not_causal detail's start
BUDGET_STOPS = ("max_epochs", "time_limit")  # a seed stopped by `patience` has converged by definition
LEGACY_STOP = "max_epochs"  # records written before seeds carried `stop` trained every epoch
LAST_FRACTION = 0.25  # the tail of the curve that must not beat the rest for a seed to count as converged
IMPROVEMENT_TOL = 0.005  # relative: a gain of at most 0.5% of |best| is noise, not progress
FALLING_SHARE = 0.15  # of a loss's whole fall: more in the last quarter of epochs is a fall cut short
# A fall of at most NOISE_K x the curve's noise (epoch_noise) is not evidence of a fall. Flat curves
# with Gaussian noise, a training and a validation loss per seed (17-60 epochs, 4,000 simulated seeds
# each): FALLING_SHARE alone marked 26-30 % of the seeds and so (2 seeds of 3) 16-22 % of the cells;
# with NOISE_K 2, 0.35-1.4 % of the seeds and at most 0.06 % of the cells (simulated 2026-11-27;
# tests/test_marks.py checks 1,000 flat 30-epoch curves: 148 read as falling before, 1 now).
NOISE_K = 2.0
EDGE_FRACTION = 0.05  # outer share of a searched range, at each end, that counts as its edge
MIN_INT_VALUES = 5  # an integer range with fewer values is a handful of choices, like a categorical
FAILED_SHARE = 0.5  # more failed trials than this share marks the search as mostly failed
TRIVIAL_ALPHA = 0.05  # the one-sided test against the trivial baseline (pipeline.reporting.trivial)
# A search whose expected best (pipeline.reporting.show_your_work) still rose by more than this share of
# its value from half its trials to all of them is not saturated.
SATURATION_SHARE = 0.01

# a failed cell prints "failed" instead
SYMBOLS = {NOT_CONVERGED: "†", EDGE: "‡", MOSTLY_FAILED: "§", NOT_CAUSAL: "¶", NOT_SATURATED: "↑",
           NO_BETTER_THAN_TRIVIAL: "∅", TIME_LIMITED: "τ"}
RULES = {
    NOT_CONVERGED: (f"not converged: more than half of the final seeds trained fewer than {MIN_STEPS} optimiser "
                    f"steps, or stopped while their training or validation loss was still falling (their last "
                    f"{LAST_FRACTION:.0%} of epochs made more than {FALLING_SHARE:.0%} of the loss's fall and more than "
                    f"{NOISE_K:g}x its epoch-to-epoch noise), or ended "
                    f"at their epoch or time budget while validation was still improving (the best score of their "
                    f"last {LAST_FRACTION:.0%} of epochs beat the earlier best by more than {IMPROVEMENT_TOL:.1%})"),
    EDGE: (f"at the edge: the best configuration lies in the outer {EDGE_FRACTION:.0%} of a searched range "
           f"(in log space for log-uniform ranges; integer ranges of fewer than {MIN_INT_VALUES} values are "
           f"choices, never marked; nor a search of one completed trial, which compared nothing), so a better "
           f"value may lie outside it"),
    MOSTLY_FAILED: f"mostly failed: more than {FAILED_SHARE:.0%} of the search's trials failed",
    FAILED: "failed: every search trial failed, so the family has no scores",
    NOT_CAUSAL: ("not causal: on this per-step task the family's output at a step reads inputs after that step, "
                 "where a later input can be the step's target (walker2d's is the next input), so neither its "
                 "score nor the paper's figure beside it (same mark) compares with causal families'"),
    NOT_SATURATED: (f"search not saturated: the expected best validation score of the search (Dodge et al. 2019, "
                    f"over its completed trials) rose by more than {SATURATION_SHARE:.0%} of its value from half "
                    f"the trials to all of them, so more trials would likely have found a better configuration"),
    TIME_LIMITED: ("cut by the time limit: final.time_limit_s stopped one or more final seeds before their epoch "
                   "budget, so how far they trained depended on the machine's load (the seeds and their epochs "
                   "are named)"),
    NO_BETTER_THAN_TRIVIAL: ("no better than trivial: a one-sided one-sample t-test of the test scores (per seed; per "
                             "search repeat where there are repeats) does not find them better than the trivial "
                             f"baseline's test score under the table at p < {TRIVIAL_ALPHA:g} (a single score cannot "
                             "be tested)"),
}


@dataclass(frozen=True)
class Mark:
    """One reason not to trust a cell: the rule's name (a key of RULES) and what triggered it."""

    mark: str
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"mark": self.mark, "detail": self.detail}


def is_failed(final: dict[str, Any]) -> bool:
    """Whether a final record is the record of a family whose every search trial failed."""
    return final.get("status") == "failed"


def still_improving(curve: list[float], mode: str) -> bool:
    """Whether the best of the curve's last quarter (at least one epoch) beats the best before it
    by more than IMPROVEMENT_TOL (relative). A curve of one epoch has nothing to compare: False."""
    values = [v for v in curve if isinstance(v, (int, float)) and math.isfinite(v)]
    tail = max(1, int(len(values) * LAST_FRACTION))
    head, last = values[:-tail], values[-tail:]
    if not head:
        return False
    pick = max if mode == "max" else min
    before, after = pick(head), pick(last)
    gain = after - before if mode == "max" else before - after
    return gain > IMPROVEMENT_TOL * abs(before)


def epoch_noise(values: list[float]) -> float:
    """The standard deviation of a curve's epoch-to-epoch noise, robust to its trend and to jumps:
    the scaled median absolute deviation of its first differences, over sqrt(2) (the difference
    of two independent draws has sqrt(2) times their spread). A steady trend moves the differences'
    median, not their spread, so a cleanly falling curve has noise 0. Fewer than 2 values: 0."""
    if len(values) < 2:
        return 0.0
    from scipy.stats import median_abs_deviation  # late: `ctsweep status` reads the marks without scipy

    return float(median_abs_deviation(np.diff(values), scale="normal")) / math.sqrt(2.0)


def loss_falling(losses: list[float]) -> bool:
    """Whether a loss curve (one value per epoch) was still clearly falling at its end: its last
    quarter of epochs (at least one) lowered the minimum before them by more than FALLING_SHARE of
    the whole fall from the first epoch to the lowest value, and by more than NOISE_K times the
    curve's epoch_noise. Fewer than two epochs: False."""
    values = [v for v in losses if isinstance(v, (int, float)) and math.isfinite(v)]
    tail = max(1, int(len(values) * LAST_FRACTION))
    head, last = values[:-tail], values[-tail:]
    if not head:
        return False
    fall, drop = values[0] - min(values), min(head) - min(last)
    return fall > 0 and drop > FALLING_SHARE * fall and drop > NOISE_K * epoch_noise(values)


def seed_reasons(seed: dict[str, Any], mode: str) -> list[str]:
    """Why a seed is not converged ("short", "improving", "falling"); empty when it is."""
    reasons = []
    steps = seed.get("steps")
    if isinstance(steps, int) and steps < MIN_STEPS:
        reasons.append("short")
    if seed.get("stop", LEGACY_STOP) in BUDGET_STOPS and still_improving(seed.get("curve", []), mode):
        reasons.append("improving")
    if loss_falling(seed.get("train_loss_curve") or []) or loss_falling(seed.get("val_loss_curve") or []):
        reasons.append("falling")
    return reasons


_REASON_TEXT = {"short": f"trained fewer than {MIN_STEPS} steps", "improving": "still improving at the budget",
                "falling": "stopped with a loss still falling"}


def not_converged(final: dict[str, Any]) -> Mark | None:
    """The not_converged mark of an ok final record, or None when at most half its seeds are."""
    seeds = final.get("seeds", [])
    reasons = [seed_reasons(s, final["mode"]) for s in seeds]
    late = [r for r in reasons if r]
    if not seeds or 2 * len(late) <= len(seeds):
        return None
    counts = [f"{sum(k in r for r in late)} {_REASON_TEXT[k]}" for k in _REASON_TEXT if any(k in r for r in late)]
    stops = sorted({s.get("stop", LEGACY_STOP) for s, r in zip(seeds, reasons) if r})
    return Mark(NOT_CONVERGED, f"{len(late)} of {len(seeds)} seeds not converged ({'; '.join(counts)}; stopped by "
                               f"{' / '.join(stops)})")


def _num(x: float) -> str:
    return f"{x:.3g}"


def _position(value: float, spec: dict[str, Any]) -> float | None:
    """Where `value` lies in [low, high]: 0 at low, 1 at high (log space for log ranges); None if
    the range is empty or unusable."""
    low, high = float(spec["low"]), float(spec["high"])
    if spec.get("log") and low > 0 and value > 0:
        low, high, value = math.log(low), math.log(high), math.log(value)
    if not high > low:
        return None
    return (value - low) / (high - low)


def _int_values(spec: dict[str, Any]) -> int:
    """How many values an integer range [low, high] in steps of `step` (default 1) holds."""
    step = spec.get("step") or 1
    return int((int(spec["high"]) - int(spec["low"])) // step) + 1


def edge(config: dict[str, Any], space: dict[str, Any]) -> Mark | None:
    """The edge mark of a best configuration against its searched space, or None. Keys the space
    does not search numerically, or that the configuration lacks (an inactive conditional), are skipped."""
    found = []
    for key, spec in sorted(space.items()):
        value = config.get(key)
        if (not isinstance(spec, dict) or spec.get("type") not in ("float", "int") or "low" not in spec
                or "high" not in spec or isinstance(value, bool) or not isinstance(value, (int, float))):
            continue
        if spec["type"] == "int" and _int_values(spec) < MIN_INT_VALUES:
            continue
        pos = _position(float(value), spec)
        if pos is None or EDGE_FRACTION < pos < 1 - EDGE_FRACTION:
            continue
        side = "lower" if pos <= EDGE_FRACTION else "upper"
        found.append(f"{key} at the {side} bound ({_num(value)} of [{_num(spec['low'])}, {_num(spec['high'])}])")
    return Mark(EDGE, "; ".join(found)) if found else None


def compared(final: dict[str, Any]) -> bool:
    """Whether the search behind a final record compared configurations: at least two trials
    completed (records without `n_trials` are taken to have)."""
    n_trials = final.get("n_trials")
    return n_trials is None or n_trials - final.get("n_failed", 0) >= 2


def mostly_failed(n_trials: int, n_failed: int) -> Mark | None:
    """The mostly_failed mark when more than FAILED_SHARE of the trials failed, else None."""
    if n_trials <= 0 or n_failed / n_trials <= FAILED_SHARE:
        return None
    return Mark(MOSTLY_FAILED, f"{n_failed} of {n_trials} trials failed")


def failed_detail(final: dict[str, Any]) -> str:
    """A failed record's reasons as one line ("REASON (k trials); ..."), as the search recorded them."""
    errors = [" ".join(str(e).split()) for e in final.get("errors") or []]
    return "; ".join(errors) if errors else "no reason recorded"


def not_causal(final: dict[str, Any]) -> Mark | None:
    """The not_causal mark of a final record that says its family reads later steps, else None."""
    reason = final.get("reads_later_steps")
    return Mark(NOT_CAUSAL, f"{LATER_STEPS} ({reason})") if reason else None


def time_limited(final: dict[str, Any]) -> Mark | None:
    """The time_limited mark of a final record one of whose seeds `final.time_limit_s` cut, else None."""
    seeds = final.get("seeds", [])
    cut = [s for s in seeds if s.get("stop") == "time_limit"]
    if not cut:
        return None
    budget = final.get("max_epochs") or final.get("epochs")
    each = ", ".join(f"seed {s.get('seed')} at epoch {s.get('epochs_trained', len(s.get('curve') or []))}"
                     + (f" of {budget}" if budget else "") for s in cut)
    limit = final.get("time_limit_s")
    return Mark(TIME_LIMITED, f"{len(cut)} of {len(seeds)} seeds cut by final.time_limit_s"
                              f"{f' ({limit:g} s)' if isinstance(limit, (int, float)) else ''}: {each}")


def cell_marks(final: dict[str, Any], search: dict[str, Any] | None = None) -> list[Mark]:
    """Every mark of one cell, in RULES order. `search`: the search record, whose `space` is used
    when the final record has none (older final records)."""
    if is_failed(final):
        return [Mark(FAILED, failed_detail(final))]
    space = final.get("space") or (search or {}).get("space") or {}
    found = [not_converged(final), edge(final.get("config", {}), space) if compared(final) else None,
             mostly_failed(final.get("n_trials", 0), final.get("n_failed", 0)), not_causal(final),
             time_limited(final)]
    return [m for m in found if m is not None]
