"""Cluster fill of sweeps as they run on a cluster (issue 33): trials of 30 s and more, warm
worker processes, and the two ways of keeping the records.

    .venv/bin/python -m benchmarks.fill.run --workload long --modes sqlite,postgres --out benchmarks/results/fill-postgres

The modes of the cluster-fill benchmark that compare the stores (benchmarks/fill/run.py's `main` runs
them, benchmarks/fill/report.py's `render` tables them), both through today's driver (one
`search_many()` over every family, the driver's own pending-trial limit), with the same synthetic
trial, seeds and local 32-slot Ray:

- sqlite:   MLflow and Optuna in the project's SQLite files (the embedded default, `make run`);
- postgres: every trial logs through `mlflow server` (pipeline/stores/tracking_server.py, the
  command `make mlflow-server` runs) whose backend is the project's own PostgreSQL
  (pipeline/stores/postgres.py, `make postgres`), and the Optuna studies go to PostgreSQL too.

The `long` workload (LONG) is the one-dataset workload with epochs of 15-40 s (a family median
around 20 s) and ASHA's first rung at 2 epochs, so the shortest trial sleeps 30 s, and with its
Ray workers warmed before the clock starts (fill.Workload.warm_workers; Tune's trial actors
turned out not to run in them, so each trial process still imports torch, MLflow and Tune in the
clock: 32 at once on this machine's 2 cores). The server and PostgreSQL are started before the
clock too, and each mode has its own project, stores and Ray.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.fill import workload as fill

# Both through today's driver: search_many over every family, Tune's pending-trial limit set by it.
MODES = ("sqlite", "postgres")

# 12 families x 32 trials of 2 or 4 epochs (ASHA grace 2, reduction 2: about half reach epoch 4),
# epochs of 15-40 s (no epoch of any trial under 15 s: every trial sleeps at least 30 s): about
# 384 x 60 s of sleep, some 12 minutes of 32 slots per mode.
LONG = replace(fill.Workload(), num_samples=32, epochs=4, grace_period=2, reduction_factor=2,
               epoch_s=20.0, family_sigma=0.3, epoch_min_s=15.0, epoch_max_s=40.0, warm_workers=True,
               epoch_floor_s=15.0)

SERVER_WORKERS = 4  # `make mlflow-server`'s MLFLOW_WORKERS default


@contextlib.contextmanager
def postgres_stores(root: Path) -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
    """The project's PostgreSQL (a free port of 127.0.0.1) and a tracking server over it (its
    folder <root>/mlflow-server); yields (MLFLOW_TRACKING_URI of the server, `search.optuna_storage`
    of its optuna database). Both stopped at the end, by their PIDs, the database's folder removed.
    The data directory is a folder of its own under the system's temporary folder, traversable
    by all: run as root, the server runs as `nobody` (pipeline/stores/postgres.py), who cannot
    enter the benchmark's private scratch folder."""
    from pipeline.stores import postgres
    from pipeline.stores.tracking_server import TrackingServer, free_port

    base = Path(tempfile.mkdtemp(prefix="ctsweep-bench-pg-"))
    base.chmod(0o711)
    data = base / "pgdata"
    try:
        server = postgres.start(data, port=free_port())
        tracking = TrackingServer(root / "mlflow-server", backend=server.url("mlflow"), workers=SERVER_WORKERS)
        try:
            url = tracking.start()
            yield {"MLFLOW_TRACKING_URI": url}, {"optuna_storage": server.url("optuna")}
        finally:
            tracking.stop()
            postgres.stop(data)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def stores_for(label: str) -> Any:
    """The stores context of a mode (fill.run_mode's `stores`)."""
    return postgres_stores if label == "postgres" else fill.sqlite_stores


def run_mode(work: Path, label: str, workload: fill.Workload) -> dict[str, Any]:
    """One store mode through today's driver (fill.MODES["after"]), in its own project and Ray."""
    out = fill.run_mode(work, label, workload, stores=stores_for(label), driver=fill.MODES["after"])
    if label == "postgres":  # the server's log, for a look at what it did (errors, retries)
        log = work / label / "mlflow-server" / "server.log"
        text = log.read_text() if log.exists() else None
        out["server_errors"] = text.count("Traceback") if text is not None else None
        if text and "Traceback" in text:  # the first one, so that a report (or a failed test) says which
            out["server_first_error"] = text[text.index("Traceback"):][:3000]
    return out
