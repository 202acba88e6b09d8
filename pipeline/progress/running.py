"""The stages running now in a project, read from its MLflow store: what `ctsweep status` shows
from another terminal (or another machine sharing the store) while a run goes on.

A parent run stays RUNNING when its driver was killed (it is resumable), so a parent counts as
running only while its driver is alive: a process with that pid on this host, or any driver on
another host (this one cannot see it; the line names the host).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pipeline.stores.paths import tracking_uri

if TYPE_CHECKING:
    from pipeline.progress.model import Snapshot


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _sqlite_file(uri: str) -> Path | None:
    """The file of a local SQLite store (sqlite:///path); None for any other store."""
    if not uri.startswith("sqlite:"):
        return None
    path = urlparse(uri).path
    return Path(path[1:] if path.startswith("//") else path)


def _store_exists(uri: str) -> bool:
    """False for a local SQLite store whose file is not there: nothing ran, and reading must not create it."""
    path = _sqlite_file(uri)
    return path is None or path.is_file()


def _none_running(uri: str) -> bool:
    """True when a local SQLite store holds no run in status RUNNING, read with sqlite3 alone.

    Most `ctsweep status` calls come after a run: the answer is then "nothing running", and
    importing MLflow to learn it costs 1-4 s. The file is opened read-only and MLflow's own
    `runs` table is asked directly (its schema since MLflow 1.x: `status`, `lifecycle_stage`);
    anything unexpected (another schema, a locked or damaged file, another store) answers False,
    and the caller asks MLflow as before."""
    path = _sqlite_file(uri)
    if path is None:
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)) as db:
            row = db.execute("SELECT 1 FROM runs WHERE status = 'RUNNING' AND lifecycle_stage = 'active' LIMIT 1")
            return row.fetchone() is None
    except sqlite3.Error:
        return False


def running(root: Path) -> list[tuple[Snapshot, str]]:
    """[(snapshot, where)] of every stage of the project running now; `where`: "" on this host,
    else "on <host>"."""
    uri = tracking_uri(root)
    if not _store_exists(uri) or _none_running(uri):
        return []
    # Late: MLflow, only when a run may be going on (or the store is not a local SQLite file).
    from pipeline.progress.read import STAGES, STARTED, driver_of, live_parents, snapshot
    from pipeline.stores import tracking

    client = tracking.MlflowClient(uri)
    exp_ids = [e.experiment_id for e in client.search_experiments(filter_string="name LIKE 'ctsweep/%'")]
    here, found = socket.gethostname(), []
    for stage in STAGES:
        parents = live_parents(client, exp_ids, stage)
        drivers = {driver_of(p) for p in parents}
        live = {d for d in drivers if d[0] != here or _alive(d[1])}
        if not live:
            continue
        since = min(float(p.data.tags[STARTED]) for p in parents if driver_of(p) in live)
        snap = snapshot(client, exp_ids, stage, since)
        if snap is not None:
            hosts = sorted({h for h, _ in live if h != here})
            found.append((snap, f"on {', '.join(hosts)}" if hosts else ""))
    return found
