"""Several families searched at once in one Ray Tune experiment, each as if it ran alone, and
each decided the same way whatever the load or the number of trials at once.

Why one experiment per dataset and not one per family side by side: Ray Tune runs one
experiment per driver (`tuner.fit()` blocks, and Ray documents several Tune experiments in one
cluster at once as unsupported), and searches run one after another leave the cluster's slots
idle whenever a search has fewer trials left than slots. Here one experiment holds every
family's search of a dataset, so a free slot goes to whichever family has a trial to propose
(ray-project/ray#11764 asks for exactly this), while nothing is shared between families.

A *unit* is one search: a family and a repeat (`search.repeats`; repeat r samples with
`sampler_seed + r` and trains with `trial_seed + r`). Each unit has its own Optuna study, budget
(`num_samples`) and ASHA rungs:

- `FamilySearcher` holds one Optuna study per unit (pipeline.sweep.scheduling's
  BudgetAwareOptunaSearch). A trial's config carries its family under FAMILY_KEY, its repeat
  under REPEAT_KEY and its Optuna trial number under TRIAL_NUMBER_KEY (all stripped before the
  trial sees it).
- Rounds: a unit proposes `round_size` trials together (trial numbers k*round_size onwards), and
  its study is told their results only when the whole round has ended, in trial-number order;
  until then the unit proposes nothing more (other units' trials keep the slots busy). So what
  TPE proposes depends on the results alone, never on which trial reported first, how many ran
  at once (`max_concurrent`, a cap on a unit's live trials, only spreads a round over time) or
  how loaded the machine was. The round size is a search parameter, not a machine property.
- Rounds in flight (`rounds_in_flight` = n, default 1): round k may be proposed once rounds
  0..k-n have been told, so n rounds run at once and a slot freed by a round's fast trials goes
  to the unit's next round instead of waiting for the round's slowest trial (the wait the fill
  and cluster benchmarks measured). To keep proposals independent of timing, round j is told
  only when it has ended *and* the last trial of round j+n-1 has been proposed: every proposal
  of round k then sees exactly rounds 0..k-n, whenever their trials ended. The price: TPE learns
  from a round n-1 rounds later than it could.
- `FamilyScheduler` holds one ASHA per unit (ResumableASHA): a trial is judged against the
  earlier rounds of its own unit only, never by arrival order (scheduling.py, 3.).

One dataset per experiment keeps the metric and its direction common to every trial (Tune's
experiment-wide `metric`/`mode`), and keeps DVC's stage per dataset.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any, Callable, Union

from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher

from pipeline.sweep.saturation import Pool, rising
from pipeline.sweep.scheduling import BudgetAwareOptunaSearch, ResumableASHA
# The config's bookkeeping keys and their readers live in trial_keys (standard library only, for
# the trial process); re-exported here, where the searcher that writes them is.
from pipeline.sweep.trial_keys import (FAMILY_KEY, REPEAT_KEY, TRIAL_NUMBER_KEY, family_of,  # noqa: F401
                                       repeat_of, trial_number_of, without_family)

Unit = tuple[str, int]  # (family, repeat): one search


def unit_of(config: Mapping[str, Any]) -> Unit:
    """The search (family, repeat) a trial belongs to."""
    return family_of(config), repeat_of(config)


def _unit(key: Union[str, Unit]) -> Unit:
    return (key, 0) if isinstance(key, str) else (str(key[0]), int(key[1]))


class FamilySearcher(Searcher):
    """One seeded Optuna study per unit (family, repeat) behind one Tune searcher, told in rounds.

    `suggest` asks the unit with the most work left first (see `_by_work_left`), each within its
    own budget, its cap on live trials and its current round; it returns None while no unit may
    propose, and FINISHED once every budget is spent. A unit's results are held until
    its round has ended, then told to its study in trial-number order. Keys given as a family
    name mean that family's repeat 0.
    """

    def __init__(self, searchers: Mapping[Any, BudgetAwareOptunaSearch], budgets: Mapping[Any, int],
                 max_concurrent: int, metric: str, mode: str, round_size: int, rounds_in_flight: int = 1,
                 pools: Mapping[Any, Pool] | None = None, rise: float = 0.0) -> None:
        super().__init__(metric=metric, mode=mode)
        self._searchers = {_unit(k): s for k, s in searchers.items()}
        self._budgets = {_unit(k): int(n) for k, n in budgets.items()}
        # search.saturation (pipeline.sweep.saturation): a unit's budget grows by rounds from its
        # group's pool while its curve rises; without pools each unit has its fixed budget
        self._pools: dict[Unit, Pool] = {_unit(k): pool for k, pool in (pools or {}).items()}
        self._rise = rise
        self._max_concurrent = max_concurrent
        self._round_size = round_size
        self._in_flight = rounds_in_flight
        self._given = {u: 0 for u in self._searchers}
        self._told = {u: 0 for u in self._searchers}  # trials of finished rounds, told to the study
        self._live: dict[Unit, set[str]] = {u: set() for u in self._searchers}
        self._held: dict[Unit, dict[str, tuple[dict | None, bool]]] = {u: {} for u in self._searchers}
        self._unit_of: dict[str, Unit] = {}
        self._round_of: dict[str, int] = {}  # trial id -> its round in its unit (given // round_size)
        self._cursor = 0
        self._seconds: dict[Unit, list[float]] = {u: [] for u in self._searchers}  # ended trials' run times
        self._planned_hook: Callable[[Unit, int], None] | None = None  # watch_planned; never pickled
        self._planned_said: dict[Unit, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        # The driver's hook (watch_planned) holds an MLflow client and a thread pool: not state.
        return {k: v for k, v in self.__dict__.items() if k not in ("_planned_hook", "_planned_said")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled by Tuner.restore: a searcher saved before rounds in flight had one, and recorded
        # no trial's round (each then belongs to the oldest round: _tell_ended_rounds); one saved
        # before the work-left order knows no trial's run time.
        self.__dict__.update({"_in_flight": 1, "_round_of": {}, "_pools": {}, "_rise": 0.0, **state})
        self._seconds = {u: list(self.__dict__.get("_seconds", {}).get(u, [])) for u in self._searchers}
        self._planned_hook, self._planned_said = None, {}

    @property
    def families(self) -> list[str]:
        return sorted({f for f, _ in self._searchers})

    @property
    def units(self) -> list[Unit]:
        return list(self._searchers)

    def study_searcher(self, family: str, repeat: int = 0) -> BudgetAwareOptunaSearch:
        """The unit's own OptunaSearch (its `_ot_study` is the unit's study)."""
        return self._searchers[(family, repeat)]

    @property
    def total_samples(self) -> int:
        """The most trials the searches may run (Tune's num_samples, a bound: the searcher says
        FINISHED when it is done): every fixed budget, and each saturating unit's cap. Priced trials
        let cheap families run more trials than the num_samples x units at par, never past their caps."""
        return sum(self._budgets[u] if u not in self._pools else self._pools[u].cap for u in self._budgets)

    def _budget(self, unit: Unit) -> int:
        """Trials the unit may propose so far: its fixed budget, or what its pool granted it."""
        pool = self._pools.get(unit)
        return self._budgets[unit] if pool is None else pool.budget(unit)

    def _exhausted(self, unit: Unit) -> bool:
        """Whether the unit will propose nothing more: its budget spent, or stopped by its pool."""
        pool = self._pools.get(unit)
        return self._given[unit] >= self._budgets[unit] if pool is None else pool.done(unit)

    def planned(self, unit: Unit) -> int:
        """Trials the unit is expected to run, for the progress display: its fixed budget; for a
        saturating unit its share (num_samples) or what its pool granted it, whichever is more,
        while it runs, and the trials it proposed once it stopped."""
        pool = self._pools.get(unit)
        if pool is None:
            return self._budgets[unit]
        if pool.done(unit):
            return self._given[unit]
        return max(pool.budget(unit), self._budgets[unit])

    def watch_planned(self, hook: Callable[[Unit, int], None]) -> None:
        """Call `hook(unit, planned(unit))` now for every unit and again whenever a pool's decision
        changes what a unit is expected to run (a grant, a stop). The hook runs in Tune's loop: it
        must only queue its work."""
        self._planned_hook, self._planned_said = hook, {}
        self._tell_planned()

    def _tell_planned(self) -> None:
        if self._planned_hook is None:
            return
        for unit in self._searchers:
            n = self.planned(unit)
            if self._planned_said.get(unit) != n:
                self._planned_said[unit] = n
                self._planned_hook(unit, n)

    def stop_reason(self, unit: Unit) -> str | None:
        """Why a saturating unit stopped (flattened, cap, budget); None without a pool or while it runs."""
        pool = self._pools.get(unit)
        return None if pool is None else pool.reason.get(unit)

    def unit_scores(self, unit: Unit) -> list[float]:
        """Each told, not failed trial's best reported validation score (every epoch it reported):
        the scores the report's expected-best curve is drawn from."""
        from optuna.trial import TrialState

        best = max if self.mode == "max" else min
        trials = self._searchers[unit]._ot_study.get_trials(deepcopy=False)
        return [best(t.intermediate_values.values()) for t in trials
                if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and t.intermediate_values]

    def _ask_pool(self, unit: Unit) -> None:
        """Once a saturating unit has told every trial it was given, its pool decides its next round."""
        pool = self._pools.get(unit)
        if pool is None or pool.done(unit) or self._live[unit] or self._held[unit]:
            return
        if self._given[unit] == self._told[unit] == pool.budget(unit):
            pool.ask(unit, rising(self.unit_scores(unit), self.mode, self._rise))
            self._tell_planned()  # a grant or a stop: the progress display's totals follow

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        # Each unit's study was built with the experiment's metric and mode: nothing to change.
        return True

    def _round_end(self, unit: Unit) -> int:
        """How many trials the unit may have proposed until its oldest untold round is told:
        that round and the `rounds_in_flight` - 1 after it."""
        return min(self._budget(unit), self._told[unit] + self._in_flight * self._round_size)

    def suggest(self, trial_id: str) -> dict[str, Any] | None | str:
        units = list(self._searchers)
        if all(self._exhausted(u) for u in units):
            return Searcher.FINISHED
        for unit in self._by_work_left():
            if self._given[unit] >= self._round_end(unit) or len(self._live[unit]) >= self._max_concurrent:
                continue
            config = self._searchers[unit].suggest(trial_id)
            if config is None or config == Searcher.FINISHED:
                continue
            self._round_of[trial_id] = self._given[unit] // self._round_size
            self._given[unit] += 1
            self._live[unit].add(trial_id)
            self._unit_of[trial_id] = unit
            self._tell_ended_rounds(unit)  # the round's last proposal may be what its oldest round waited for
            self._cursor = (units.index(unit) + 1) % len(units)
            number = self._searchers[unit].trial_number(trial_id)
            return {FAMILY_KEY: unit[0], REPEAT_KEY: unit[1],
                    **({} if number is None else {TRIAL_NUMBER_KEY: number}), **config}
        return None

    def _by_work_left(self) -> list[Unit]:
        """The units, the one with the most work left first: its trials not yet proposed times its
        mean trial run time so far (every unit's mean until it has one; 1 s before any trial
        ended); round robin from the one after the last served among equals (at the start, all).

        Why: a unit's rounds run one after another (at most `rounds_in_flight` at once), so the
        unit with the most work left is the one the search's end waits for; served first, its
        rounds start early and the last free slots go to short trials, not to a slow family's
        last round (the tail the fill benchmark measured: 34 % of the idle slot time). Only the
        order in which units take free slots changes: what each unit proposes depends on its own
        told rounds alone, so no trial's configuration or result depends on it."""
        units = list(self._searchers)
        ended = [s for u in units for s in self._seconds[u]]
        default = sum(ended) / len(ended) if ended else 1.0
        turn = [units[(self._cursor + i) % len(units)] for i in range(len(units))]

        def work_left(unit: Unit) -> float:
            seconds = self._seconds[unit]
            return (self._budget(unit) - self._given[unit]) * (sum(seconds) / len(seconds) if seconds else default)
        return sorted(turn, key=work_left, reverse=True)  # stable: round robin among equals

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # An intermediate value of a RUNNING trial: TPE ignores running trials when it samples,
        # so recording it at once changes no proposal of the current round.
        unit = self._unit_of.get(trial_id)
        if unit is not None:
            self._searchers[unit].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        unit = self._unit_of.get(trial_id)
        if unit is None or trial_id not in self._live[unit]:
            return  # told already (Tune may report an errored trial twice)
        self._live[unit].discard(trial_id)
        self._held[unit][trial_id] = (result, error)
        if result and isinstance(result.get("time_total_s"), (int, float)):  # Tune's run time of the trial
            self._seconds[unit].append(float(result["time_total_s"]))
        self._tell_ended_rounds(unit)

    def _tell_ended_rounds(self, unit: Unit) -> None:
        """Tell the study its oldest round, while that round has ended and every proposal that must
        not see it (up to the end of the rounds in flight) has been made; the next round may begin."""
        while self._given[unit] == self._round_end(unit) and self._given[unit] > self._told[unit]:
            oldest = self._told[unit] // self._round_size
            # a trial proposed before rounds were recorded per trial (an old experiment's state,
            # one round in flight) belongs to the oldest round
            if any(self._round_of.get(t, oldest) == oldest for t in self._live[unit]) \
                    or not self._end_round(unit, oldest):
                return
        self._ask_pool(unit)

    def _end_round(self, unit: Unit, oldest: int) -> int:
        """Tell the study the round's results in trial-number order; returns how many were told."""
        searcher = self._searchers[unit]
        ended = [t for t in self._held[unit] if self._round_of.get(t, oldest) == oldest]
        for trial_id in sorted(ended, key=lambda t: (searcher.trial_number(t) is None, searcher.trial_number(t) or 0, t)):
            result, error = self._held[unit].pop(trial_id)
            searcher.on_trial_complete(trial_id, result=result, error=error)
        self._told[unit] += len(ended)
        return len(ended)

    def finished(self, family: str) -> bool:
        """Whether every repeat of `family` has proposed its whole budget and told its study every
        trial's end: its studies will not change again in this run."""
        units = [u for u in self._searchers if u[0] == family]
        return bool(units) and all(self._exhausted(u) and self._given[u] == self._budget(u) == self._told[u]
                                   and not self._live[u] and not self._held[u] for u in units)

    def live_trials(self) -> dict[str, int]:
        """{family: trials proposed and not yet complete}, over the family's repeats."""
        live: dict[str, int] = {}
        for (family, _), ids in self._live.items():
            live[family] = live.get(family, 0) + len(ids)
        return live

    # Tune saves the searcher with the experiment state and restores it into the unpickled one.
    # Every unit's study state is saved with the bookkeeping; OptunaSearch's own save/restore
    # is the same copy of its __dict__.
    _STATE = ("_given", "_told", "_live", "_held", "_unit_of", "_round_of", "_cursor", "_seconds", "_pools")

    def save(self, checkpoint_path: str) -> None:
        state = {name: getattr(self, name) for name in self._STATE}
        state["studies"] = {u: s.__dict__.copy() for u, s in self._searchers.items()}
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(state, handle)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as handle:
            state = pickle.load(handle)
        if "family_of" in state:  # saved before units and rounds: every trial was told at once
            state = {"_given": {_unit(f): n for f, n in state["given"].items()},
                     "_live": {_unit(f): ids for f, ids in state["live"].items()},
                     "_unit_of": {t: _unit(f) for t, f in state["family_of"].items()}, "_cursor": state["cursor"],
                     "studies": {_unit(f): s for f, s in state["studies"].items()}}
            state["_told"] = {u: n - len(state["_live"].get(u, ())) for u, n in state["_given"].items()}
            state["_held"] = {u: {} for u in state["_given"]}
        state.setdefault("_round_of", {})  # saved before rounds in flight: one round, its trials all oldest
        state.setdefault("_seconds", {u: [] for u in self._searchers})  # saved before the work-left order
        state.setdefault("_pools", self._pools)  # saved before saturation: the pools as built
        for name in self._STATE:
            setattr(self, name, state[name])
        for unit, study_state in state["studies"].items():
            self._searchers[unit].__dict__.update(study_state)


class FamilyScheduler(FIFOScheduler):
    """One ASHA per unit: every decision is the trial's own unit's ASHA's. Keys given as a family
    name mean that family's repeat 0."""

    def __init__(self, schedulers: Mapping[Any, ResumableASHA]) -> None:
        super().__init__()
        self._schedulers = {_unit(k): s for k, s in schedulers.items()}
        self._supports_buffered_results = False  # ASHA judges every epoch's result as it comes

    def of(self, family: str, repeat: int = 0) -> ResumableASHA:
        return self._schedulers[(family, repeat)]

    def _for(self, trial: Any) -> ResumableASHA:
        return self._schedulers[unit_of(trial.config)]

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return all(s.set_search_properties(metric, mode, **spec) for s in self._schedulers.values())

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._for(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._for(trial).on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        return self._for(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._for(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._for(trial).on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        return "; ".join(f"{f}/{r}: {s.debug_string()}" for (f, r), s in self._schedulers.items())


__all__ = ["FAMILY_KEY", "REPEAT_KEY", "TRIAL_NUMBER_KEY", "FamilySearcher", "FamilyScheduler", "Unit", "family_of",
           "repeat_of", "trial_number_of", "unit_of", "without_family"]
