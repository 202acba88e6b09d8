"""Tag a search trial's MLflow run as Tune ends it, so that progress read from the store
(pipeline.progress.read) counts it ended at once: its run stays RUNNING until its family's record
closes it (pipeline.sweep.records.close_runs), since Tune ends the trial's process at its last
report. The tag says how Tune ended it (done: every epoch; stopped early; failed); the record's
closing sets the run's own status and outcome later, as before.

The tags are written by one thread of their own, so Tune's event loop never waits for the store;
a write that fails is logged and dropped (progress only). At the experiment's end the writes still
queued get `CLOSE_WAIT_S` to land, then are dropped: the records close every run right after, and
with the tracking server down each write would otherwise spend MLflow's retries (about 4 minutes)
in turn, holding the search's end for as many times that as trials ended (32 minutes for 8).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from ray.tune import Callback

from pipeline.progress.model import DONE, FAILED, STOPPED
from pipeline.progress.read import ENDED_TAG, ROUNDS, TOTAL
from pipeline.stores import tracking

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 10.0  # how long the experiment's end waits for the tag writes still queued


class ProgressTags(Callback):
    """Tags each ended trial's run with ENDED_TAG; `epochs`: a trial's whole budget (max_t)."""

    def __init__(self, tracking_uri: str, epochs: int) -> None:
        self._uri, self._epochs = tracking_uri, epochs
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctsweep-progress-tags")
        self._client: tracking.MlflowClient | None = None
        self._writes: list[Future] = []

    def _tag(self, run_id: str, state: str) -> None:
        self._set(run_id, {ENDED_TAG: state})

    def _set(self, run_id: str, tags: dict[str, Any]) -> None:
        try:
            if self._client is None:
                self._client = tracking.MlflowClient(self._uri)
            tracking.set_tags(self._client, run_id, tags)
        except Exception as exc:  # progress only: the record closes the run whatever happens here
            log.debug("progress tags %s of run %s not written: %s", sorted(tags), run_id, exc)

    def planned(self, parent_run_id: str, total: int, rounds: int) -> None:
        """Queue the number of trials a family's search is now expected to run, and its rounds (a
        saturating search's grants and stops: FamilySearcher.watch_planned), as its parent's
        progress tags; written in this callback's thread, in order, never in Tune's loop."""
        self._writes.append(self._pool.submit(self._set, parent_run_id, {TOTAL: total, ROUNDS: rounds}))

    def _ended(self, trial: Any, state: str) -> None:
        run_id = (trial.last_result or {}).get("mlflow_run_id")
        if run_id:
            self._writes.append(self._pool.submit(self._tag, run_id, state))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        epochs = int((trial.last_result or {}).get("epoch", 0) or 0)
        self._ended(trial, DONE if epochs >= self._epochs else STOPPED)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial, FAILED)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.close()

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Let the queued writes land for up to `wait_s`, then drop those not started; the one
        under way, if any, ends in its own thread (MLflow's retries bound it)."""
        wait(self._writes, timeout=wait_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles the run config with its experiment state
        return {"_uri": self._uri, "_epochs": self._epochs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_uri"], state["_epochs"])  # type: ignore[misc]
