"""Several families searched at once in one Ray Tune experiment, each as if it ran alone.

Why one experiment per dataset and not one per family side by side: Ray Tune runs one
experiment per driver (`tuner.fit()` blocks, and Ray documents several Tune experiments in one
cluster at once as unsupported), and searches run one after another leave the cluster's slots
idle whenever a search has fewer trials left than slots. Here one experiment holds every
family's search of a dataset, so a free slot goes to whichever family has a trial to propose
(ray-project/ray#11764 asks for exactly this), while nothing is shared between families:

- `FamilySearcher` holds one Optuna study per family (pipeline.sweep.scheduling's
  BudgetAwareOptunaSearch, seeded as before) with that family's budget (`num_samples`) and
  concurrency cap (`max_concurrent`); a trial's config carries its family under FAMILY_KEY and
  its Optuna trial number under TRIAL_NUMBER_KEY (both stripped before the trial sees it).
- `FamilyScheduler` holds one ASHA per family (ResumableASHA, refilled from that family's MLflow
  parent run after a restore): a trial is only ever compared with trials of its own family.

One dataset per experiment keeps the metric and its direction common to every trial (Tune's
experiment-wide `metric`/`mode`), and keeps DVC's stage per dataset.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher

from pipeline.sweep.scheduling import BudgetAwareOptunaSearch, ResumableASHA

FAMILY_KEY = "family"  # the config key naming a trial's family; never a model or training argument
# The config key holding the trial's number in its family's Optuna study (what optuna-dashboard
# shows as "Trial 3"): the trial's MLflow run name starts with it. Never a model or training argument.
TRIAL_NUMBER_KEY = "optuna_trial_number"
_BOOKKEEPING = (FAMILY_KEY, TRIAL_NUMBER_KEY)


def family_of(config: Mapping[str, Any]) -> str:
    """The family a trial belongs to (its config as Tune holds it)."""
    return str(config[FAMILY_KEY])


def trial_number_of(config: Mapping[str, Any]) -> int | None:
    """The trial's Optuna trial number, or None (a trial of an experiment started before it was kept)."""
    number = config.get(TRIAL_NUMBER_KEY)
    return None if number is None else int(number)


def without_family(config: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's own configuration: what the family's search space proposed."""
    return {k: v for k, v in config.items() if k not in _BOOKKEEPING}


class FamilySearcher(Searcher):
    """One seeded Optuna study per family behind one Tune searcher.

    `suggest` asks the families in turn (round robin from the one after the last served), each
    within its own budget of trials and its own cap on live trials; it returns None while every
    family with trials left is at its cap, and FINISHED once every budget is spent. Results go
    to the study of the trial's family only.
    """

    def __init__(self, searchers: Mapping[str, BudgetAwareOptunaSearch], budgets: Mapping[str, int],
                 max_concurrent: int, metric: str, mode: str) -> None:
        super().__init__(metric=metric, mode=mode)
        self._searchers = dict(searchers)
        self._budgets = {f: int(budgets[f]) for f in self._searchers}
        self._max_concurrent = max_concurrent
        self._given = {f: 0 for f in self._searchers}
        self._live: dict[str, set[str]] = {f: set() for f in self._searchers}
        self._family_of: dict[str, str] = {}
        self._cursor = 0

    @property
    def families(self) -> list[str]:
        return list(self._searchers)

    def study_searcher(self, family: str) -> BudgetAwareOptunaSearch:
        """The family's own OptunaSearch (its `_ot_study` is the family's study)."""
        return self._searchers[family]

    @property
    def total_samples(self) -> int:
        return sum(self._budgets.values())

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        # Each family's study was built with the experiment's metric and mode: nothing to change.
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None | str:
        names = list(self._searchers)
        if all(self._given[f] >= self._budgets[f] for f in names):
            return Searcher.FINISHED
        for offset in range(len(names)):
            family = names[(self._cursor + offset) % len(names)]
            if self._given[family] >= self._budgets[family] or len(self._live[family]) >= self._max_concurrent:
                continue
            config = self._searchers[family].suggest(trial_id)
            if config is None or config == Searcher.FINISHED:
                continue
            self._given[family] += 1
            self._live[family].add(trial_id)
            self._family_of[trial_id] = family
            self._cursor = (self._cursor + offset + 1) % len(names)
            number = self._searchers[family].trial_number(trial_id)
            return {FAMILY_KEY: family, **({} if number is None else {TRIAL_NUMBER_KEY: number}), **config}
        return None

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        family = self._family_of.get(trial_id)
        if family is not None:
            self._searchers[family].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        family = self._family_of.get(trial_id)
        if family is None or trial_id not in self._live[family]:
            return  # told already (Tune may report an errored trial twice)
        self._live[family].discard(trial_id)
        self._searchers[family].on_trial_complete(trial_id, result=result, error=error)

    def live_trials(self) -> dict[str, int]:
        """{family: trials proposed and not yet complete}."""
        return {f: len(ids) for f, ids in self._live.items()}

    # Tune saves the searcher with the experiment state and restores it into the unpickled one.
    # Every family's study state is saved with the bookkeeping; OptunaSearch's own save/restore
    # is the same copy of its __dict__.
    def save(self, checkpoint_path: str) -> None:
        state = {"given": self._given, "live": self._live, "family_of": self._family_of, "cursor": self._cursor,
                 "studies": {f: s.__dict__.copy() for f, s in self._searchers.items()}}
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(state, handle)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as handle:
            state = pickle.load(handle)
        self._given, self._live = state["given"], state["live"]
        self._family_of, self._cursor = state["family_of"], state["cursor"]
        for family, study_state in state["studies"].items():
            self._searchers[family].__dict__.update(study_state)


class FamilyScheduler(FIFOScheduler):
    """One ASHA per family: every decision is the trial's own family's ASHA's."""

    def __init__(self, schedulers: Mapping[str, ResumableASHA]) -> None:
        super().__init__()
        self._schedulers = dict(schedulers)
        self._supports_buffered_results = False  # ASHA judges every epoch's result as it comes

    def of(self, family: str) -> ResumableASHA:
        return self._schedulers[family]

    def _for(self, trial: Any) -> ResumableASHA:
        return self._schedulers[family_of(trial.config)]

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
        return "; ".join(f"{f}: {s.debug_string()}" for f, s in self._schedulers.items())


__all__ = ["FAMILY_KEY", "TRIAL_NUMBER_KEY", "FamilySearcher", "FamilyScheduler", "family_of", "trial_number_of",
           "without_family"]
