"""Real processes for the cluster tests: Ray nodes started with `ray start`, an `mlflow server`
and the project's own PostgreSQL (pipeline/stores/postgres.py).

Every process is started in its own session so a test can kill exactly one node (its raylet
and workers) or the whole cluster without touching any other Ray instance on the machine
(`ray stop` would stop them all).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.stores import postgres, tracking
from pipeline.stores.tracking_server import TrackingServer, free_port  # noqa: F401 - free_port: for the tests

BIN = Path(sys.executable).parent


def node_ip() -> str:
    """The address Ray nodes on this machine advertise (the host's own, not 127.0.0.1)."""
    from ray.util import get_node_ip_address

    return get_node_ip_address()


def _env() -> dict[str, str]:
    # Token authentication as Ray 2.60 enables it for local clusters; the token is ~/.ray/auth_token.
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update(RAY_AUTH_MODE="token", PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    return env


def _session(sid: int) -> list[int]:
    """The processes of session `sid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry.name)) == sid:
                    pids.append(int(entry.name))
    return pids


def _stop(proc: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGTERM the process's session (a `ray start --block` stops what it started), then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    for pid in _session(proc.pid):  # stragglers of the session, workers included
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


class RayCluster:
    """A head node and any number of worker nodes, all on this machine, each a `ray start --block`."""

    def __init__(self, head_cpus: int, log_dir: Path) -> None:
        self.port, self.log_dir = free_port(), log_dir
        self.address = f"{node_ip()}:{self.port}"
        self.nodes: list[subprocess.Popen] = []
        self._start(["--head", f"--port={self.port}", "--include-dashboard=false"], head_cpus, {}, "head")
        self.head = self.nodes[0]

    def _start(self, args: list[str], cpus: int, resources: dict[str, float], name: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}-{len(self.nodes)}.log", "w")
        proc = subprocess.Popen(
            [str(BIN / "ray"), "start", *args, f"--num-cpus={cpus}", "--num-gpus=0", "--disable-usage-stats",
             f"--resources={json.dumps(resources)}", "--block"],
            env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.nodes.append(proc)
        return proc

    def add_node(self, cpus: int, resources: dict[str, float] | None = None) -> subprocess.Popen:
        """Start a worker node and wait until the cluster counts it."""
        before = self.alive()
        proc = self._start([f"--address={self.address}"], cpus, resources or {}, "worker")
        self.wait_for(before + 1)
        return proc

    def kill_node(self, proc: subprocess.Popen) -> None:
        """SIGKILL every process of the node's session at once (its raylet, agents and workers,
        which Ray puts in process groups of their own): a machine lost at once."""
        for pid in _session(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()

    def alive(self) -> int:
        """Alive nodes, asked of the head in a separate process (this one may not be connected)."""
        code = "import ray; ray.init(); print('ALIVE', sum(n['Alive'] for n in ray.nodes()))"
        out = subprocess.run([sys.executable, "-c", code], env={**_env(), "RAY_ADDRESS": self.address},
                             capture_output=True, text=True, timeout=120)
        counts = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("ALIVE ")]
        return int(counts[-1]) if out.returncode == 0 and counts else 0

    def wait_for(self, n: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive() != n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Ray cluster did not reach {n} alive nodes; logs in {self.log_dir}")
            time.sleep(1)

    def close(self) -> None:
        for proc in reversed(self.nodes):  # workers first, then the head
            _stop(proc)


@contextlib.contextmanager
def mlflow_server(folder: Path, host: str = "127.0.0.1", workers: int = 2, backend: str | None = None
                  ) -> Iterator[str]:
    """`mlflow server` as `make mlflow-server` runs it (pipeline/stores/tracking_server.py), on a
    free port of `host`: its URL for the duration (an SQLite store in `folder` unless `backend`
    says otherwise). Takes about 8 s to start."""
    server = TrackingServer(folder, backend, host, workers=workers)
    try:
        yield server.start()
    finally:
        server.stop()


def store_client(uri: str) -> MlflowClient:
    """A client for a store a driver may be creating right now: open it as the drivers do
    (`tracking.ensure_store`, under the store's file lock), so that the watcher's first read and
    the driver's schema creation never race ("table ... already exists")."""
    tracking.ensure_store(uri)
    return MlflowClient(uri)


def watch(runs: Callable[[], list], condition: Callable[[list], object], action: Callable[[object], None],
          timeout_s: float = 600, every_s: float = 0.2) -> threading.Thread:
    """In the background: poll `runs()` (MLflow runs of a search in progress) until
    `condition(runs)` returns something, then call `action` with it once. `runs` may raise
    while the search has not created its experiment yet."""
    def loop() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                found = condition(runs())
            except Exception:  # nothing to look at yet
                found = None
            if found:
                action(found)
                return
            time.sleep(every_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def running_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[postgres.Server]:
    """The project's PostgreSQL in a temporary folder on a free port of 127.0.0.1; stopped by its
    PID at the end, which must leave no server process behind. The session fixture
    `postgres_session` (tests/conftest.py) starts one per test process.

    Run as root, the server runs as `nobody`, who cannot enter pytest's own temporary folders
    (mode 0700): the data directory then goes to a fresh folder under the system's temporary directory."""
    as_root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="ctsweep-pg-")) if as_root else tmp_path_factory.mktemp("pg")
    base.chmod(0o711)  # the server's user (nobody, as root) enters it; nobody lists or reads it
    started = postgres.start(base / "pgdata", port=free_port())
    try:
        yield started
    finally:
        try:
            assert postgres.stop(started.data) == started.pid
            deadline = time.monotonic() + 15
            while _alive(started.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not _alive(started.pid) and postgres.running(started.data) is None
        finally:
            if as_root:
                shutil.rmtree(base, ignore_errors=True)


def fresh_database(server: postgres.Server, name: str) -> str:
    """Database `name` new and empty, owned by the project's role (dropped first if it exists, with
    whatever was still connected to it; done as the superuser); its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(host="127.0.0.1", port=server.port, user=postgres.SUPERUSER, dbname="postgres",
                         passfile=str(server.passfile), autocommit=True, connect_timeout=10) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        connection.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name),
                                                                        sql.Identifier(postgres.ROLE)))
    return server.url(name)
