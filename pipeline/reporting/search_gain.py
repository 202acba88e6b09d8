"""Search gain: how much the search improved on the family's reference configuration.

Every search's first trial is the family's published reference configuration (the space's
`reference`, given to Optuna as its first point: pipeline.sweep.scheduling.make_searcher), so
trial 0 of each search repeat is the reference. The gain of a repeat is its best trial's kept
validation score minus the reference trial's, signed so that a positive gain is an improvement
(for a metric where lower is better, reference minus best). With several repeats the cell shows
the mean of their gains.

A gain is only a comparison of equal budgets: where ASHA stopped the reference trial before the
best trial's epochs (or it failed, or the record has no reference: a family without one, or a
record written before searches kept it), the cell says why instead of a number.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from pipeline.reporting.numbers import signed

REFERENCE_TRIAL = 0  # the reference is the first point Optuna is given: trial number 0 of a repeat


@dataclass(frozen=True)
class Gain:
    """A search's gain over its reference (None where it cannot be compared) and why not."""

    value: float | None
    why_not: str = ""

    def cell(self, metric: str) -> str:
        """The table's cell: the signed gain, or "n/a (why)"."""
        return f"n/a ({self.why_not})" if self.value is None else signed(self.value, metric)


def _repeats(search: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(repeat, its summary) of every ok repeat: the record itself when it has no `repeats`."""
    if search.get("repeats"):
        return [(int(r["repeat"]), r) for r in search["repeats"] if r.get("status") == "ok"]
    return [(int(search.get("repeat", 0)), search)] if search.get("status", "ok") == "ok" else []


def _repeat_gain(search: dict[str, Any], repeat: int, summary: dict[str, Any], mode: str) -> Gain:
    trials = [t for t in search.get("trials", []) if int(t.get("repeat", 0)) == repeat]
    reference = next((t for t in trials if t.get("number") == REFERENCE_TRIAL), None)
    best = next((t for t in trials if t.get("number") == summary.get("best_trial")), None)
    if reference is None or best is None:
        return Gain(None, "no reference trial in the record")
    if reference.get("status") != "ok" or reference.get("best_val") is None:
        return Gain(None, "the reference trial failed")
    if reference.get("epochs", 0) < best.get("epochs", 0):
        return Gain(None, f"ASHA stopped the reference after {reference['epochs']} of the best trial's "
                          f"{best['epochs']} epochs")
    diff = summary["best_val"] - reference["best_val"]
    return Gain(diff if mode == "max" else -diff)


def search_gain(search: dict[str, Any] | None, mode: str) -> Gain:
    """The gain of a family's search record (the mean over its repeats), or why there is none."""
    if not search or not search.get("reference"):
        return Gain(None, "no reference configuration")
    gains = [_repeat_gain(search, r, s, mode) for r, s in _repeats(search)]
    if not gains:
        return Gain(None, "no completed search")
    missing = [g for g in gains if g.value is None]
    if missing:
        return missing[0] if len(gains) == 1 else Gain(None, f"{len(missing)} of {len(gains)} repeats: "
                                                              f"{missing[0].why_not}")
    return Gain(statistics.fmean(g.value for g in gains if g.value is not None))
