"""The stages running now in a project, read from its MLflow store: what `ctsweep status` shows
from another terminal (or another machine sharing the store) while a run goes on.

A parent run stays RUNNING when its driver was killed (it is resumable), so a parent counts as
running only while its driver is alive: a process with that pid on this host, or any driver on
another host (this one cannot see it; the line names the host).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from pipeline.progress.model import Snapshot
from pipeline.progress.read import STAGES, STARTED, driver_of, live_parents, snapshot
from pipeline.stores import tracking


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


def _store_exists(uri: str) -> bool:
    """False for a local SQLite store whose file is not there: nothing ran, and reading must not create it."""
    if not uri.startswith("sqlite:"):
        return True
    path = urlparse(uri).path
    return Path(path[1:] if path.startswith("//") else path).is_file()


def running(root: Path) -> list[tuple[Snapshot, str]]:
    """[(snapshot, where)] of every stage of the project running now; `where`: "" on this host,
    else "on <host>"."""
    uri = tracking.tracking_uri(root)
    if not _store_exists(uri):
        return []
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
