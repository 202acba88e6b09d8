"""The search algorithm and the scheduler, with two corrections to how they work together.

1. ASHA stops weak trials after a few epochs. Ray's OptunaSearch would then tell Optuna that
   the stopped trial's last (truncated) score is its final value, and TPE would compare a
   2-epoch score with 4-epoch ones as equals. Here a trial that ends before `epochs` is told to
   Optuna as PRUNED: TPE ranks pruned trials below every completed one (by the step they reached,
   then their last intermediate value, which OptunaSearch reports each epoch). A trial that
   failed is FAIL even when it reported epochs before failing (OptunaSearch would say COMPLETE).
   The result a trial stops on (its last epoch, ASHA's cut or max_t) reaches the searcher only
   with the trial's completion; it is recorded as an intermediate value too, so the study holds
   every epoch a trial reported, as MLflow does.
2. `Tuner.restore` restores the search algorithm's state but builds the scheduler from its
   pickled, empty initial state: ASHA's rung history (the scores every trial had at each rung)
   is lost, so after a restore the first trials to reach a rung face no cutoff and weak ones run
   to the end. Here the restored ASHA refills its rungs from the per-epoch `val_metric` history
   in MLflow of the trials the search already ran, before it judges any new result.
3. Ray's ASHA judges a trial at a rung against whatever trials happened to reach that rung
   before it: under load, or with more trials at once, another trial arrives first and the same
   search stops different trials. Here a trial of round k (its Optuna number // round size,
   pipeline.sweep.families) is judged against the trials of rounds 0..k-1 only, which have all
   ended before round k began (its family's searcher holds the next round back until then): a
   decision depends on the trial's own scores and on earlier rounds, never on arrival order.
   Within the first round no trial is stopped (nothing earlier to compare with), as Ray's ASHA
   never stops the first trial to reach a rung. With n rounds in flight (`rounds_in_flight`), round
   k is judged against rounds 0..k-n, the ones its searcher had seen end before proposing it; the
   first n rounds stop no trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
import numpy as np
from ray.tune.schedulers import ASHAScheduler, TrialScheduler
from ray.tune.search.optuna import OptunaSearch

from pipeline.stores import tracking
from pipeline.sweep import run_lookup
from pipeline.sweep.trial_keys import NUMBER_TAG, REPEAT_TAG

EPOCH = "epoch"  # the time attribute: our own epoch counter survives restarts from a checkpoint


class BudgetAwareOptunaSearch(OptunaSearch):
    """OptunaSearch telling Optuna PRUNED for trials stopped before `max_epochs`, FAIL for errors,
    with every epoch a trial reported among its intermediate values."""

    def __init__(self, *args: Any, max_epochs: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_epochs = max_epochs

    def trial_number(self, trial_id: str) -> int | None:
        """The Optuna trial number of a Ray trial this searcher proposed (None if it proposed none)."""
        trial = self._ot_trials.get(trial_id)
        return None if trial is None else trial.number

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Report an epoch to Optuna once. A trial restored from its checkpoint (a resumed search, a
        retried trial) trains again the epochs after that checkpoint and reports their steps a
        second time; Optuna keeps the first value and warns "step=N is already reported" for
        each (18-21 lines on a resumed default search). The steps already in the study are read
        once per trial, at its first result in this process."""
        trial = self._ot_trials.get(trial_id)
        step = result.get("training_iteration")
        if trial is not None and step is not None and trial_id not in self._completed_trials:
            reported = self.__dict__.setdefault("_reported_steps", {})  # absent in a searcher saved before it
            if trial_id not in reported:
                reported[trial_id] = set(trial.storage.get_trial(trial._trial_id).intermediate_values)
            if step in reported[trial_id]:
                return
            reported[trial_id].add(step)
        super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if not error and result is not None and trial_id not in self._completed_trials:
            self._report_last(trial_id, result)
        if error or (result is not None and result.get(EPOCH, self._max_epochs) < self._max_epochs):
            result = None  # OptunaSearch: no value + error -> FAIL, no value + no error -> PRUNED
        super().on_trial_complete(trial_id, result, error)

    def _report_last(self, trial_id: str, result: dict) -> None:
        """Record the trial's last result as an intermediate value. Tune hands the result on which
        a trial stops to on_trial_complete only, never to on_trial_result: ASHA's STOP, which also
        ends every trial that reaches max_t, and the last result of a trial whose function returns.
        OptunaSearch tells Optuna only the final value then, so the study would miss the last epoch
        of every trial, completed or pruned (the dashboard's curves and the importances at ASHA's
        rung need it). The step is the training iteration, as OptunaSearch reports every epoch."""
        trial = self._ot_trials.get(trial_id)
        value, step = result.get(self._metric), result.get("training_iteration", result.get(EPOCH))
        if trial is not None and value is not None and step is not None and value == value:  # NaN: not reportable
            if step not in trial.storage.get_trial(trial._trial_id).intermediate_values:
                trial.report(value, step)


@dataclass(frozen=True)
class HistorySource:
    """Where a restored scheduler finds the trials' per-epoch metric: the search's MLflow parent run."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    metric: str

    repeat: int = 0  # the search repeat whose trials count (tag `search_repeat`; untagged runs: repeat 0)

    def load(self) -> tuple[dict[str, dict[int, float]], dict[str, int]]:
        """({ray trial id: {epoch: metric}}, {ray trial id: Optuna trial number}) of every trial of
        this repeat logged under the parent run (a run without a number tag has none)."""
        client = tracking.MlflowClient(self.tracking_uri)
        steps, numbers = {}, {}
        for run in run_lookup.children(client, self.experiment_id, self.parent_run_id):
            tags = run.data.tags
            trial_id = tags.get("ray_trial_id")
            if trial_id and int(tags.get(REPEAT_TAG, 0)) == self.repeat:
                steps[trial_id] = run_lookup.metric_steps(client, run.info.run_id, self.metric)
                if tags.get(NUMBER_TAG) is not None:
                    numbers[trial_id] = int(tags[NUMBER_TAG])
        return steps, numbers


class ResumableASHA(ASHAScheduler):
    """ASHA (one bracket, time attribute `epoch`) deciding by rounds (3. above), that refills its
    rungs after Tuner.restore.

    `round_size`: trials per round of the family's study. A trial's round is its Optuna trial
    number (config key `optuna_trial_number`) // round_size; a trial without one (tests, an old
    experiment's trials) gets the order in which it was added instead. `rounds_in_flight` = n:
    round k is judged against rounds 0..k-n (pipeline.sweep.families).
    """

    def __init__(self, history: HistorySource, round_size: int = 1, rounds_in_flight: int = 1, **kwargs: Any) -> None:
        super().__init__(time_attr=EPOCH, brackets=1, **kwargs)
        self._history = history
        self._refilled = False
        self._round_size = round_size
        self._in_flight = rounds_in_flight
        self._round: dict[str, int] = {}  # trial id -> round; refilled trials of unknown number: -1
        self._added = 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled: Tuner.restore is rebuilding the experiment; refill before the first decision.
        # A scheduler pickled before rounds existed judged every trial as its own round.
        self.__dict__.update({"_round_size": 1, "_in_flight": 1, "_round": {}, "_added": 0, **state})
        self._refilled = False

    def refill(self, history: dict[str, dict[int, float]], numbers: dict[str, int] | None = None) -> int:
        """Record each trial's metric at every rung it reached; returns how many entries were added.
        `numbers`: the trials' Optuna numbers (their rounds); a trial without one counts as earlier
        than every trial still to come."""
        added = 0
        for trial_id in history:
            number = (numbers or {}).get(trial_id)
            self._round.setdefault(trial_id, -1 if number is None else number // self._round_size)
        for milestone, recorded in self._brackets[0]._rungs:  # (epoch, {trial_id: signed metric})
            for trial_id, steps in history.items():
                value = steps.get(int(milestone))
                if value is not None and trial_id not in recorded:
                    recorded[trial_id] = self._metric_op * value
                    added += 1
        return added

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        if not self._refilled:
            self._refilled = True
            self.refill(*self._history.load())
        super().on_trial_add(tune_controller, trial)
        number = (getattr(trial, "config", None) or {}).get(NUMBER_TAG)
        self._round[trial.trial_id] = (self._added if number is None else int(number)) // self._round_size
        self._added += 1

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if EPOCH not in result or self._metric not in result:
            return TrialScheduler.CONTINUE
        action = self._judge(trial.trial_id, result[EPOCH], self._metric_op * result[self._metric])
        if result[EPOCH] >= self._max_t:  # the budget is spent: every trial stops there
            action = TrialScheduler.STOP
        self._num_stopped += action == TrialScheduler.STOP
        return action

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if EPOCH in result and self._metric in result:  # the result a trial ends on is recorded too
            self._judge(trial.trial_id, result[EPOCH], self._metric_op * result[self._metric])
        self._trial_info.pop(trial.trial_id, None)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._trial_info.pop(trial.trial_id, None)

    def _judge(self, trial_id: str, epoch: float, value: float) -> str:
        """Record the trial at the highest rung it has newly reached and decide there: STOP when it
        is below the top 1/reduction_factor of the earlier rounds' scores at that rung."""
        bracket = self._brackets[0]
        for milestone, recorded in bracket._rungs:  # highest rung first
            if epoch < milestone or trial_id in recorded:
                continue
            mine = self._round.get(trial_id, 0)
            # earlier: rounds 0..mine-n, and refilled trials of unknown round (-1), all ended before this one began
            earlier = [v for t, v in recorded.items()
                       if (r := self._round.get(t, -1)) < 0 or r <= mine - self._in_flight]
            recorded[trial_id] = value
            if earlier and value < np.nanpercentile(earlier, (1 - 1 / bracket.rf) * 100):
                return TrialScheduler.STOP
            return TrialScheduler.CONTINUE
        return TrialScheduler.CONTINUE

    def rung_sizes(self) -> dict[float, int]:
        """{rung epoch: trials recorded there}, for logs and tests."""
        return {milestone: len(recorded) for milestone, recorded in self._brackets[0]._rungs}


def make_searcher(define_by_run: Any, reference: dict[str, Any] | None, metric: str, mode: str, seed: int,
                  n_startup_trials: int, max_epochs: int) -> BudgetAwareOptunaSearch:
    """Seeded TPE through Optuna: the same seed proposes the same first configurations."""
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
    return BudgetAwareOptunaSearch(define_by_run, metric=metric, mode=mode, sampler=sampler,
                                   points_to_evaluate=[reference] if reference else None, max_epochs=max_epochs)
