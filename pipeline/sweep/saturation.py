"""Searches that go on while they still gain (`search.saturation`), within one budget of trials.

A family's search (a unit: family and repeat, pipeline.sweep.families) first runs `min_trials`
trials. Each time it has told its study every trial it was given, it asks for one more round:

- it stops, *flattened*, when its curve no longer rises: the expected best validation score of
  all its completed trials beats that of half of them by no more than `rise` of its value
  (Dodge et al. 2019, Eq. 1: pipeline.comparison.expected_best, the curve behind the report's ↑);
- it stops at the *cap* when it has `max_trials`;
- otherwise it asks the pool for a round, and stops on the *budget* if the pool cannot give one.

The pool holds one budget per dataset and repeat: `num_samples` trials of each of its families,
minus the first `min_trials` of each. A trial is priced at its family's cost (pipeline.sweep.costs:
its reference configuration's seconds per epoch in the zoo benchmark, relative to the median
family, a committed table), at ASHA's max_t: a round's price is known when it is granted, so no
grant waits on how many epochs ASHA let the last round's trials run. Why priced: a flattened
family's unused trials are worth what they would have cost; handed on at par to a family whose
trials cost five times as much, they made a saturating search slower than the fixed budget it
replaces (docs/benchmarks/saturation.md). Why a committed price and not each trial's measured
seconds: the grants would then depend on the machine and its load, and so would the results.

Why grants wait sometimes. Units end their rounds in an order set by timing, and a pool shared by
units must not be spent first come, first served: the same results would then give other
searches on a loaded machine. Requests are granted as if taken in a fixed order of priority, the
round asked for first and the units' order (params.yaml's) among equals: a request is granted at
once when the pool covers it and every request of higher priority that may still come, refused
when the pool cannot hold a round, and otherwise waits until those requests are made or
forgone. The unit's slots go meanwhile to the other units' trials. So every decision depends on
the units' told results alone, never on when they arrived (tests/test_saturation.py).
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Sequence

ACTIVE, WAITING, STOPPED = "active", "waiting", "stopped"
FLATTENED, CAP, BUDGET = "flattened", "cap", "budget"


def rising(scores: Sequence[float], mode: str, rise: float) -> bool:
    """Whether the expected best of all `scores` beats the expected best of half of them by more
    than `rise` of its value (fewer than two scores: nothing to compare, not rising)."""
    from pipeline.comparison.expected_best import expected_max

    if len(scores) < 2:
        return False
    full, half = expected_max(list(scores), len(scores), mode), expected_max(list(scores), math.ceil(len(scores) / 2), mode)
    gain = full - half if mode == "max" else half - full
    return gain > rise * abs(full)


class Pool:
    """Extension rounds for one group of units, granted in the fixed order of priority (module
    docstring). `units` in priority order among equal rounds; `base`, `cap`: trials per unit
    before its first request and at most; `total`: the group's budget, in trials priced at
    `costs` ({unit: price of one trial}, whole numbers so that sums are exact; 1 each if None)."""

    def __init__(self, units: Sequence[Hashable], base: int, cap: int, total: int, round_size: int,
                 costs: Mapping[Hashable, int] | None = None) -> None:
        self.units = list(units)
        self.round_size = round_size
        self.base = base
        self.max_rounds = (cap - base) // round_size
        self.cost = {u: int((costs or {}).get(u, 1)) for u in self.units}
        self.left = total - base * sum(self.cost.values())
        self.granted = {u: 0 for u in self.units}
        self.state = {u: ACTIVE for u in self.units}
        self.reason: dict[Hashable, str] = {}

    def __setstate__(self, state: dict) -> None:
        # a pool saved by a search started before trials were priced: every trial costs 1, as then
        self.__dict__.update(state)
        self.__dict__.setdefault("cost", {u: 1 for u in self.units})

    @property
    def cap(self) -> int:
        """The most trials a unit may reach: its first rounds and every extension round."""
        return self.base + self.max_rounds * self.round_size

    def budget(self, unit: Hashable) -> int:
        """Trials the unit may propose so far."""
        return self.base + self.granted[unit] * self.round_size

    def ask(self, unit: Hashable, still_rising: bool) -> list[Hashable]:
        """The unit has told every trial of its budget: stop it, or queue its request for one more
        round. Returns the units whose budget grew (granted now, this one or others waiting)."""
        if self.state[unit] != ACTIVE:
            return []
        if not still_rising:
            self._stop(unit, FLATTENED)
        elif self.granted[unit] >= self.max_rounds:
            self._stop(unit, CAP)
        else:
            self.state[unit] = WAITING
        return self.settle()

    def done(self, unit: Hashable) -> bool:
        return self.state[unit] == STOPPED

    def _stop(self, unit: Hashable, reason: str) -> None:
        self.state[unit], self.reason[unit] = STOPPED, reason

    def _priority(self, unit: Hashable) -> tuple[int, int]:
        return self.granted[unit] + 1, self.units.index(unit)

    def _round_price(self, unit: Hashable) -> int:
        return self.round_size * self.cost[unit]

    def _may_still_ask(self, other: Hashable, before: tuple[int, int]) -> int:
        """Rounds `other` may still ask for with a priority above `before`, not yet decided."""
        if self.state[other] == STOPPED:
            return 0
        last = before[0] if self.units.index(other) < before[1] else before[0] - 1  # its highest round above
        return max(0, min(last, self.max_rounds) - self.granted[other])

    def settle(self) -> list[Hashable]:
        """Decide every waiting request that can be decided now, in priority order."""
        grown: list[Hashable] = []
        changed = True
        while changed:
            changed = False
            for unit in sorted((u for u in self.units if self.state[u] == WAITING), key=self._priority):
                price = self._round_price(unit)
                if self.left < price:  # the pool only shrinks: it never will
                    self._stop(unit, BUDGET)
                    changed = True
                    continue
                mine = self._priority(unit)
                ahead = sum(self._may_still_ask(v, mine) * self._round_price(v) for v in self.units if v != unit)
                if self.left >= price + ahead:
                    self.granted[unit] += 1
                    self.left -= price
                    self.state[unit] = ACTIVE
                    grown.append(unit)
                    changed = True
        return grown
