"""A trial or seed process's start-up, as its MLflow run records it.

A Ray worker that runs a search trial or a final seed spends seconds before its first batch: Ray
starts the process and connects it to the cluster, the trainable is unpickled, which imports
the trial's modules (torch, MLflow, Ray Tune), and the trial itself creates its run, loads its
data and builds its model. Tune hands the next trial of a search to the same process
(`reuse_actors`) and Ray gives the next seed a pooled worker, so only the first trial or seed of
a process pays the first three. These tags say how much, on every run (seconds, wall clock):

    startup_trial_in_process   1 for the first trial or seed of its process, 2 for the next, ...
    startup_worker_s           the process's creation to the start of the trial module's imports
                               (Ray's worker start, the actor's creation); first in a process only
    startup_imports_s          the trial module's imports (torch, MLflow, Ray Tune, the package)
                               and whatever the process imported up to the trial; first only
    startup_to_trial_s         the imports' end to the trial's first line (Tune's set-up of the
                               trial, the dataset fetched from Ray's object store); first only
    startup_setup_s            the trial's first line to its first batch: the MLflow run, the
                               data, the model, a checkpoint restored

`benchmarks/cluster/trial_startup.py` reads them (docs/benchmarks/cluster.md). Standard library
only, and psutil for the process's creation time: this module is imported before torch.
"""

from __future__ import annotations

import time
from typing import Any

# Set by mark_imports_started / mark_imports_done from the module that imports the trial's
# libraries (pipeline.sweep.trial, pipeline.final.seeds), once per process: a module is imported once.
_imports: dict[str, float] = {}
_trials = 0


def mark_imports_started() -> None:
    """Stamp the start of the trial module's imports (the first call in a process counts)."""
    _imports.setdefault("started", time.time())


def mark_imports_done() -> None:
    """Stamp their end (the first call in a process counts)."""
    _imports.setdefault("done", time.time())


def _process_created() -> float | None:
    try:
        import psutil  # Ray's own dependency; only here, at a trial's first line

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 -- a platform psutil cannot read: the tags go without it
        return None


def tags(entered: float, ready: float) -> dict[str, Any]:
    """The start-up tags (module docstring) of the trial that began at `entered` and had its
    trainer built at `ready` (time.time() both); the process's own only for its first trial."""
    global _trials
    _trials += 1
    out: dict[str, Any] = {"startup_trial_in_process": _trials, "startup_setup_s": round(ready - entered, 3)}
    started, done = _imports.get("started"), _imports.get("done")
    if _trials == 1 and started is not None and done is not None:
        created = _process_created()
        if created is not None:
            out["startup_worker_s"] = round(started - created, 3)
        out["startup_imports_s"] = round(done - started, 3)
        out["startup_to_trial_s"] = round(entered - done, 3)
    return out
