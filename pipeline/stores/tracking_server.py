"""The MLflow tracking server `make mlflow-server` starts, as an object a script can start, kill
and start again (the PostgreSQL tests and the cluster-fill benchmark use it).

The same command line as the Makefile's: `mlflow server` over a backend store (an SQLite file by
default, or the project's PostgreSQL: pipeline/stores/postgres.py), proxying artifacts into
`<folder>/artifacts`, so clients need no shared disk. It runs in a session of its own, so
`kill` and `stop` reach its workers and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from pipeline.errors import CtsweepError
from pipeline.stores import tracking


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# MLflow 3's server starts a job runner with eight huey consumer processes by default (for its
# GenAI jobs: prompt optimisation, trace roll-ups), none of which ctsweep uses: about 12 CPU-seconds
# at every start here, and they poll for the server's whole life. Off unless the environment says
# otherwise (MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true); the Makefile's `mlflow-server` does the same.
JOB_EXECUTION = "false"

# uvicorn's supervisor pings each worker every half second and kills one that has not answered
# within --timeout-worker-healthcheck (5 s by default), then starts another. On a machine loaded
# with trial processes a worker starting up (importing MLflow's app) can miss 5 s again and again:
# the server's workers were killed and restarted for 90 s until its start gave up (the
# PostgreSQL search test, a restart beside 8 trials). 60 s still replaces a hung worker. uvicorn
# reads its options from UVICORN_* variables, so this reaches it through `mlflow server`; a
# value already in the environment wins. The Makefile's `mlflow-server` sets the same.
WORKER_HEALTHCHECK_S = "60"


class TrackingServer:
    """`mlflow server` on `host:port` (a free port by default) that keeps its port and store
    across restarts: `kill` it as a crash would, `start` it again. `backend`: the store's URL
    (default `sqlite:///<folder>/mlflow.db`); its log is `<folder>/server.log`, appended to."""

    def __init__(self, folder: Path, backend: str | None = None, host: str = "127.0.0.1",
                 port: int | None = None, workers: int = 2) -> None:
        self.folder, self.host, self.workers = Path(folder), host, workers
        self.backend = backend or f"sqlite:///{self.folder / 'mlflow.db'}"
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.log = self.folder / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180) -> str:
        """Start the server; return its URL once /health answers and its store is open. The wait:
        on 2 cores beside a test suite's three workers and eight trials, its two workers took 80 s
        to import MLflow's app and answer (a CI run's PostgreSQL search test gave up at 90 s)."""
        env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": JOB_EXECUTION,
               "UVICORN_TIMEOUT_WORKER_HEALTHCHECK": WORKER_HEALTHCHECK_S, **os.environ,
               "MLFLOW_DISABLE_TELEMETRY": "true"}
        env.pop("MLFLOW_TRACKING_URI", None)
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend,
                 "--artifacts-destination", str(self.folder / "artifacts"), "--host", self.host,
                 "--port", str(self.port), "--workers", str(self.workers)],
                stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=self.folder, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                tracking.ensure_store(self.url)
                return self.url
            except CtsweepError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mlflow server did not come up: {self.log.read_text()[-3000:]}") from None
                time.sleep(0.3)

    def _signal_all(self, sig: int) -> None:
        """Send `sig` to every process of the server's session (its workers too)."""
        assert self.proc is not None
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.getsid(int(entry.name)) == self.proc.pid:
                        os.kill(int(entry.name), sig)

    def kill(self) -> None:
        """SIGKILL the server and its workers, as a crash would: no clean shutdown."""
        if self.proc is not None:
            self._signal_all(signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM the server's session, then SIGKILL what is left after `grace_s`."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        self.kill()  # stragglers of the session
