"""Families' records built while the search still runs: as soon as a family's last trial has
ended and its studies have been told every trial, its record (closing its trials' MLflow runs,
copying its Optuna studies, fANOVA: pipeline.sweep.records.family_record) is built in a thread,
while the other families' trials go on in the slots.

Why: after a 12-family search through `mlflow server` on PostgreSQL, building the records one
after another, then eight at once, still left every trial slot idle for 73.5 s between the last
trial's end and the search's return (benchmarks/results/fill-postgres-r8-flight2-records). Built
as each family ends, only the families that end last are left for that gap.

The record is the one the search would have built at its end: the same trials, read from what
Tune hands its callbacks instead of the ResultGrid it returns afterwards (each reported epoch's
score, loss and steps; the trial's last result and config; its error, read from the same file
Ray's ResultGrid reads it from), the same studies (a finished family's are not told again) and
the same ASHA rungs. tests/test_postgres_search.py compares the two. Only when both stores are
database servers (pipeline.sweep.records.record_workers): an SQLite file has one writer, which
the running trials need. Not for a resumed search: its earlier trials' epochs were reported to
another driver.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from ray.tune import Callback

from pipeline.sweep.families import FamilySearcher, family_of
from pipeline.sweep.records import LOSS, METRIC

log = logging.getLogger(__name__)

KEPT = ("epoch", METRIC, LOSS, "steps")  # what trial_records reads of a trial's reported epochs


@dataclass(frozen=True)
class TrialOutcome:
    """What records.trial_records reads of a Tune `Result`, taken from the trial as it ended.

    `metrics_dataframe`: {key: [value per reported result]} for those of KEPT's keys any result
    had (NaN where a result lacked one, as Tune's table has it), None when it reported nothing."""

    config: dict[str, Any]
    metrics: dict[str, Any]
    metrics_dataframe: dict[str, list[float]] | None
    error: BaseException | None


Build = Callable[[str, list[TrialOutcome]], dict[str, Any]]  # (family key, its trials) -> record


class EarlyRecords(Callback):
    """A Tune callback that builds each family's record once the family is done (see the module).

    `expected`: {family key: trials the family will run} (num_samples x repeats). `futures` holds
    {family key: the record being built}; a family never done here (fewer trials than expected,
    an interrupted run) is built by the search at its end as before. `bind` gives it the
    searcher that runs, once Tune's Tuner holds it."""

    def __init__(self, build: Build, expected: dict[str, int], workers: int) -> None:
        self._build, self._expected, self._workers = build, dict(expected), workers
        self._rows: dict[str, list[dict[str, float]]] = {}
        self._ended: dict[str, dict[str, Any]] = {}
        self._searcher: FamilySearcher | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.futures: dict[str, Future] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its run config (this callback with it) into the experiment for Tuner.restore;
        # what is restored is inert: no searcher, so it never builds (a resumed search builds at its end).
        return {"_build": None, "_expected": {}, "_workers": 1, "_rows": {}, "_ended": {}, "_searcher": None,
                "_pool": None, "futures": {}}

    def bind(self, searcher: FamilySearcher) -> None:
        self._searcher = searcher

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if self._searcher is not None:
            self._rows.setdefault(trial.trial_id, []).append({k: _number(result[k]) for k in KEPT if k in result})

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)  # Tune calls it once retries are spent: a trial Ray retries has not ended

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """After each step of Tune's loop, when the searcher has been told what the step ended."""
        if self._searcher is None:
            return
        for key, ended in self._ended.items():
            if key in self.futures or len(ended) < self._expected.get(key, math.inf) or not self._searcher.finished(key):
                continue
            running = sum(t.status in ("RUNNING", "PENDING") for t in trials)
            log.info("%s: its %d trials have ended; record built while %d other trials run", key, len(ended), running)
            outcomes = [self._outcome(t) for t in ended.values()]
            self.futures[key] = self._executor().submit(self._build, key, outcomes)

    def close(self) -> None:
        """Wait for the records being built (their MLflow and Optuna writes end whole)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _end(self, trial: Any) -> None:
        if self._searcher is not None:
            self._ended.setdefault(family_of(trial.config), {})[trial.trial_id] = trial

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="ctsweep-record")
        return self._pool

    def _outcome(self, trial: Any) -> TrialOutcome:
        rows = self._rows.get(trial.trial_id, [])
        keys = [k for k in KEPT if any(k in row for row in rows)]  # Tune's table has a column where any had it
        frame = {k: [row.get(k, math.nan) for row in rows] for k in keys} if rows else None
        # As ray.tune.ResultGrid: a trial that ended TERMINATED has no error, else the one Ray kept
        error = None if trial.status == "TERMINATED" else (trial.get_pickled_error() or trial.get_error())
        return TrialOutcome(dict(trial.config), dict(trial.last_result or {}), frame, error)


def _number(value: Any) -> float:
    """A reported value as a float (NaN for one that is not a number; a missing one is NaN too, in _outcome)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
