"""A stage that loses its Ray cluster stops within a minute, with one line.

A driver whose cluster's head goes away does not always end: Ray's core worker may retry the GCS
for good, printing "Failed to connect to GCS at ..." (a second head beside a first, stopped by
Ray 30 s after it started, left a search doing that for more than ten minutes), or it exits the
process at once, status 1, with a line of Ray's own log. Neither says what happened.

`ClusterWatch` is a thread beside the stage: every `every_s` it opens a TCP connection to the
head's GCS port. The kernel answers for a listening port even when the head is busy, so a
*refused* connection means the GCS is gone; `refused_s` of refusals (or `silent_s` of timeouts:
a remote head out of reach) end the process with one line and status 1. Standard library only.

Why exit at once and not stop gracefully: a graceful stop asks the cluster to stop its trials and
save the experiment, and the cluster is what is gone. What ended is kept: every finished trial
and seed is in MLflow, and the stage's result files are written whole or not at all, so the same
command resumes once a cluster is back.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Callable

EVERY_S = 2.0
REFUSED_S = 6.0  # refused connections for this long: the head's GCS has exited
SILENT_S = 40.0  # connections timing out for this long: a head out of reach (a remote cluster)


def probe(address: str, timeout_s: float = 3.0) -> str:
    """'ok', 'refused' or 'silent': one TCP connection to `address` ("host:port")."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return "ok"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "silent"


def lost_line(address: str, seconds: float, from_env: bool) -> str:
    advice = ("once that cluster is back (or unset RAY_ADDRESS to run on a Ray of this machine)" if from_env
              else "")
    return (f"ctsweep: error: lost the Ray cluster at {address}: its head has not answered for {seconds:.0f} s "
            f"(stopped, crashed or out of reach); the trials and seeds that ended are kept, and the same command "
            f"resumes {advice or 'when run again'}")


def _exit(line: str) -> None:
    stream = sys.__stderr__ or sys.stderr
    if stream.isatty():
        stream.write("\x1b[?25h\n")  # the live display hid the cursor: show it again
    stream.write(line + "\n")
    stream.flush()
    os._exit(1)


class ClusterWatch(threading.Thread):
    """Watches the GCS at `address` until `stop()`; calls `on_lost(line)` (default: print it and
    exit with status 1) once it has been gone for `refused_s` (or out of reach for `silent_s`)."""

    def __init__(self, address: str, from_env: bool, every_s: float = EVERY_S, refused_s: float = REFUSED_S,
                 silent_s: float = SILENT_S, on_lost: Callable[[str], None] = _exit) -> None:
        super().__init__(name="ctsweep-cluster-watch", daemon=True)
        self.address, self._from_env, self._every = address, from_env, every_s
        self._limits = {"refused": refused_s, "silent": silent_s}
        self._on_lost, self._stopped = on_lost, threading.Event()

    def run(self) -> None:
        since: float | None = None
        while not self._stopped.wait(self._every):
            state = probe(self.address)
            if state == "ok":
                since = None
                continue
            since = since if since is not None else time.monotonic()
            gone = time.monotonic() - since
            if gone >= self._limits[state] and not self._stopped.is_set():
                self._on_lost(lost_line(self.address, gone + self._every, self._from_env))
                return

    def stop(self) -> None:
        self._stopped.set()
