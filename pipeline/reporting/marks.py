"""When a cell (dataset, family) of the results table cannot be trusted: the marks and their rules.

    not_converged  more than half of the family's nominal final seeds (lr x 1) are not converged:
                   a seed is not converged when its training ended at the budget (`stop` is
                   "max_epochs" or "time_limit", not "patience"; records older than `stop` count
                   as "max_epochs") while its validation curve was still improving, i.e. the best
                   value of its last quarter of epochs (at least one) beats the best value before
                   them by more than IMPROVEMENT_TOL x |that earlier best| in the record's direction.
    edge           the best configuration lies in the outer EDGE_FRACTION of a searched numeric
                   range (float or int with low/high; measured in log space when the range is
                   log-uniform): the search may have stopped short of a better value outside it.
                   Categorical keys are never marked, nor integer ranges of fewer than
                   MIN_INT_VALUES values (solver_steps in [1, 4]): their ends are a quarter or
                   more of the choices each, so sitting there says nothing about the range.
    mostly_failed  more than FAILED_SHARE of the search's trials failed (n_failed / n_trials).
    failed         every search trial failed (the final record's status is "failed"): the cell
                   has no scores; its detail is the record's `errors`.

Every function takes the plain final / search records (see the record contracts in final.py and
search.py) and returns `Mark`s; the report, `ctsweep status` and `promote` all use these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NOT_CONVERGED, EDGE, MOSTLY_FAILED, FAILED = "not_converged", "edge", "mostly_failed", "failed"
BUDGET_STOPS = ("max_epochs", "time_limit")  # a seed stopped by `patience` has converged by definition
LEGACY_STOP = "max_epochs"  # records written before seeds carried `stop` trained every epoch
LAST_FRACTION = 0.25  # the tail of the curve that must not beat the rest for a seed to count as converged
IMPROVEMENT_TOL = 0.005  # relative: a gain of at most 0.5% of |best| is noise, not progress
EDGE_FRACTION = 0.05  # outer share of a searched range, at each end, that counts as its edge
MIN_INT_VALUES = 5  # an integer range with fewer values is a handful of choices, like a categorical
FAILED_SHARE = 0.5  # more failed trials than this share marks the search as mostly failed

SYMBOLS = {NOT_CONVERGED: "†", EDGE: "‡", MOSTLY_FAILED: "§"}  # a failed cell prints "failed" instead
RULES = {
    NOT_CONVERGED: (f"not converged: more than half of the final seeds ended at their epoch or time budget while "
                    f"validation was still improving (the best score of their last {LAST_FRACTION:.0%} of epochs "
                    f"beat the earlier best by more than {IMPROVEMENT_TOL:.1%})"),
    EDGE: (f"at the edge: the best configuration lies in the outer {EDGE_FRACTION:.0%} of a searched range "
           f"(in log space for log-uniform ranges; integer ranges of fewer than {MIN_INT_VALUES} values are "
           f"choices, never marked), so a better value may lie outside it"),
    MOSTLY_FAILED: f"mostly failed: more than {FAILED_SHARE:.0%} of the search's trials failed",
    FAILED: "failed: every search trial failed, so the family has no scores",
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


def seed_not_converged(seed: dict[str, Any], mode: str) -> bool:
    """A seed stopped by its budget (not by patience) whose validation curve was still improving."""
    return seed.get("stop", LEGACY_STOP) in BUDGET_STOPS and still_improving(seed.get("curve", []), mode)


def not_converged(final: dict[str, Any]) -> Mark | None:
    """The not_converged mark of an ok final record, or None when at most half its seeds are."""
    seeds = final.get("seeds", [])
    late = [s for s in seeds if seed_not_converged(s, final["mode"])]
    if not seeds or 2 * len(late) <= len(seeds):
        return None
    stops = sorted({s.get("stop", LEGACY_STOP) for s in late})
    return Mark(NOT_CONVERGED, f"{len(late)} of {len(seeds)} seeds still improving when stopped by "
                               f"{' / '.join(stops)}")


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


def mostly_failed(n_trials: int, n_failed: int) -> Mark | None:
    """The mostly_failed mark when more than FAILED_SHARE of the trials failed, else None."""
    if n_trials <= 0 or n_failed / n_trials <= FAILED_SHARE:
        return None
    return Mark(MOSTLY_FAILED, f"{n_failed} of {n_trials} trials failed")


def failed_detail(final: dict[str, Any]) -> str:
    """A failed record's reasons as one line ("REASON (k trials); ..."), as the search recorded them."""
    errors = [" ".join(str(e).split()) for e in final.get("errors") or []]
    return "; ".join(errors) if errors else "no reason recorded"


def cell_marks(final: dict[str, Any], search: dict[str, Any] | None = None) -> list[Mark]:
    """Every mark of one cell, in RULES order. `search`: the search record, whose `space` is used
    when the final record has none (older final records)."""
    if is_failed(final):
        return [Mark(FAILED, failed_detail(final))]
    space = final.get("space") or (search or {}).get("space") or {}
    found = [not_converged(final), edge(final.get("config", {}), space),
             mostly_failed(final.get("n_trials", 0), final.get("n_failed", 0))]
    return [m for m in found if m is not None]
