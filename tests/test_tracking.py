"""MLflow at scale: many trial processes logging at once lose no metric, in a local SQLite store
and through a real `mlflow server`; the store is created once before they start; locked writes
are retried without duplicating a point; the store checks name what to do.

Writers are separate processes (multiprocessing's forkserver: fresh interpreters like Ray's
workers, holding no connection inherited from the test), each with its own MlflowClient.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.errors import CtsweepError
from pipeline.progress.model import DONE
from pipeline.progress.read import ENDED_TAG
from pipeline.stores.tracking_server import TrackingServer
from pipeline.sweep.progress_tags import ProgressTags
from tests.clusters import free_port

WRITERS = 8
BATCHES = 50
KEYS = ("train_loss", "val_metric", "epoch_seconds")


def _context() -> Any:
    """forkserver with mlflow preloaded: each writer starts in well under a second instead of
    importing mlflow afresh (about 2.5 s of CPU each), yet shares no state with this process."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["pipeline.stores.tracking"])
    return ctx


class _Retries(logging.Handler):
    """Counts the retry warnings pipeline.stores.tracking logs when the store is locked."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "MLflow store locked" in record.getMessage()


def _write_many(uri: str, exp_id: str, parent: str, index: int, batches: int, barrier: Any, out: Any) -> None:
    """One simulated trial: its own client and run, then `batches` epochs of 3 metrics + a tag."""
    retries = _Retries()
    logging.getLogger("pipeline.stores.tracking").addHandler(retries)
    result: dict[str, Any] = {"index": index, "error": None, "run_id": None}
    try:
        client = tracking.MlflowClient(uri)
        run_id = tracking.start_run(client, exp_id, f"writer-{index}", {"stage": "load", "seed": index},
                                    parent_run_id=parent)
        result["run_id"] = run_id
        tracking.log_params(client, run_id, {"writer": index, "batches": batches})
        barrier.wait(timeout=120)  # every writer hammers the store at the same moment
        start = time.perf_counter()
        for step in range(batches):
            tracking.log_metrics(client, run_id, {k: step + i / 10 for i, k in enumerate(KEYS)}, step=step)
            tracking.set_tags(client, run_id, {"last_step": step})
        tracking.finish(client, run_id)
        result["seconds"] = time.perf_counter() - start
    except Exception as exc:  # reported to the test, which fails on it
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    result["retries"] = retries.count
    out.put(result)


def _run_writers(uri: str, exp_id: str, parent: str) -> list[dict[str, Any]]:
    ctx = _context()
    barrier, out = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_write_many, args=(uri, exp_id, parent, i, BATCHES, barrier, out))
             for i in range(WRITERS)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=240) for _ in procs]
    except queue.Empty:
        pytest.fail(f"a writer died without reporting; exit codes {[p.exitcode for p in procs]}")
    for p in procs:
        p.join(timeout=30)
    return results


def _check_every_point(client: MlflowClient, results: list[dict[str, Any]]) -> int:
    """Every run holds each metric once per step, its params, last tag and FINISHED; returns
    the number of metric points in the store."""
    assert [r["error"] for r in results] == [None] * WRITERS
    total = 0
    for r in results:
        run = client.get_run(r["run_id"])
        assert run.info.status == "FINISHED"
        assert run.data.params == {"writer": str(r["index"]), "batches": str(BATCHES)}
        assert run.data.tags["last_step"] == str(BATCHES - 1)
        for i, key in enumerate(KEYS):
            history = client.get_metric_history(r["run_id"], key)
            assert sorted(m.step for m in history) == list(range(BATCHES)), (r["run_id"], key)
            assert all(m.value == m.step + i / 10 for m in history)
            total += len(history)
    return total


def _load(client: MlflowClient, exp_id: str, uri: str) -> tuple[int, float, int]:
    """Run the writers under a parent run; returns (metric points stored, seconds, lock retries)."""
    parent = tracking.start_run(client, exp_id, "load", {"stage": "load"})
    start = time.perf_counter()
    results = _run_writers(uri, exp_id, parent)
    seconds = time.perf_counter() - start
    total = _check_every_point(client, results)
    retries = sum(r["retries"] for r in results)
    print(f"\n{uri.split(':')[0]}: {total} metric points from {WRITERS} writers x {BATCHES} batches in "
          f"{seconds:.1f} s (slowest writer's logging {max(r['seconds'] for r in results):.1f} s), "
          f"{retries} lock retries")
    return total, seconds, retries


# ---------------------------------------------------------------------------------- store checks


@pytest.mark.parametrize(("uri", "local"), [
    ("sqlite:////abs/mlflow.db", True), ("sqlite:///relative.db", True), ("file:///abs/mlruns", True),
    ("mlruns", True), ("/abs/mlruns", True), ("http://10.0.0.5:5000", False), ("https://mlflow.example.com", False),
    ("databricks", False), ("databricks://profile", False), ("postgresql://user@db/mlflow", False),
])
def test_is_local_store(uri: str, local: bool) -> None:
    assert tracking.is_local_store(uri) is local


@pytest.mark.parametrize(("uri", "loopback"), [
    ("http://127.0.0.1:5000", True), ("http://localhost:5000", True), ("http://[::1]:5000", True),
    ("https://127.1.2.3", True), ("http://10.0.0.5:5000", False), ("http://head-node:5000", False),
    ("sqlite:////abs/mlflow.db", False), ("postgresql://ctsweep@127.0.0.1:5433/mlflow?passfile=/p", True),
    ("postgresql+psycopg://u@localhost/mlflow", True), ("postgresql://u@10.0.0.5/mlflow", False),
    ("databricks", False), ("mlruns", False),
])
def test_is_loopback_server(uri: str, loopback: bool) -> None:
    assert tracking.is_loopback_server(uri) is loopback


def test_ensure_store_names_an_unreachable_server_and_how_to_start_one() -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(CtsweepError, match=rf"{uri} \(MLFLOW_TRACKING_URI\) is unreachable.*make mlflow-server"):
        tracking.ensure_store(uri)
    assert time.monotonic() - start < tracking.HEALTH_TIMEOUT_S  # fails fast, not after MLflow's retries


def test_ensure_store_refuses_a_server_without_health(http_server) -> None:
    uri = http_server.url.rstrip("/")  # a real HTTP server, but not MLflow: /health is 404
    with pytest.raises(CtsweepError, match=rf"{uri} .*HTTP 404"):
        tracking.ensure_store(uri)


def test_ensure_store_creates_the_sqlite_store_and_its_folder(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'new' / 'folder' / 'mlflow.db'}"
    tracking.ensure_store(uri)
    tracking.ensure_store(uri)  # the second call finds it ready
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]


def test_experiment_id_opens_the_same_experiment_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _, first = tracking.experiment_id(tmp_path, "xor")
    client, second = tracking.experiment_id(tmp_path, "xor")
    assert first == second
    assert client.get_experiment(first).artifact_location == (tmp_path / "mlartifacts").as_uri()


# ---------------------------------------------------------------------------------- first opens


def _open(uri: str, barrier: Any, out: Any) -> None:
    barrier.wait(timeout=60)
    try:
        tracking.ensure_store(uri)
        out.put("ok")
    except Exception as exc:
        out.put(f"{type(exc).__name__}: {exc}"[:300])


def _open_at_once(uri: str, n: int = 6) -> list[str]:
    ctx = _context()
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(uri, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return outcomes


def test_concurrent_first_opens_through_ensure_store_all_succeed(tmp_path: Path) -> None:
    # What ensure_store guards against (MLflow 3.17.2, not ctsweep's to test): several processes
    # opening a fresh SQLite store at once each run MLflow's schema migration, and the losers fail
    # with "duplicate column", "already exists", "Online migration expected", "database is locked",
    # "no such table" or "No such index" (5 or 6 of 6 processes when measured; twice in three runs
    # the file was left unusable). Whether the race happens at all is up to the scheduler, and
    # which errors it gives is MLflow's, so only the guarded path is asserted here.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert _open_at_once(uri) == ["ok"] * 6
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]


# ---------------------------------------------------------------------------------- retries


def test_the_same_metric_point_logged_twice_is_stored_once(tmp_path: Path) -> None:
    """Why retrying a write is safe: a repeat of identical Metric entities adds no point."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ensure_store(uri)
    client = MlflowClient(uri)
    run_id = tracking.start_run(client, "0", "dup", {})
    batch = [Metric(k, 1.5, 1_700_000_000_000, 3) for k in KEYS]
    client.log_batch(run_id, metrics=batch)
    client.log_batch(run_id, metrics=batch)
    assert [len(client.get_metric_history(run_id, k)) for k in KEYS] == [1, 1, 1]


@pytest.fixture
def locked_db(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """An SQLite file with table t, and a connection holding its exclusive lock."""
    path = tmp_path / "locked.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x INTEGER)").connection.commit()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    yield path, holder
    holder.close()


def test_a_locked_write_is_retried_until_the_lock_goes(locked_db, caplog: pytest.LogCaptureFixture) -> None:
    path, holder = locked_db
    writer = sqlite3.connect(path, timeout=0, isolation_level=None)  # SQLITE_BUSY at once
    threading.Timer(0.6, holder.rollback).start()
    with caplog.at_level(logging.WARNING, "pipeline.stores.tracking"):
        tracking._retry_locked(lambda: writer.execute("INSERT INTO t VALUES (1)"), "sqlite:///x", "insert",
                               delays=(0.2,) * 10)
    assert writer.execute("SELECT count(*) FROM t").fetchone() == (1,)
    assert any("MLflow store locked" in r.getMessage() for r in caplog.records)


def test_other_errors_are_not_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = sqlite3.connect(tmp_path / "plain.db")
    with caplog.at_level(logging.WARNING, "pipeline.stores.tracking"), pytest.raises(sqlite3.OperationalError, match="no such"):
        tracking._retry_locked(lambda: writer.execute("INSERT INTO missing VALUES (1)"), "sqlite:///x", "insert")
    assert not caplog.records


def test_a_lock_that_stays_ends_in_one_clear_error(locked_db) -> None:
    path, _ = locked_db
    writer = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(CtsweepError, match=r"sqlite:///x stayed locked through 3 attempts to insert.*mlflow-server"):
        tracking._retry_locked(lambda: writer.execute("INSERT INTO t VALUES (1)"), "sqlite:///x", "insert",
                               delays=(0.01, 0.01))


@pytest.mark.slow
def test_log_metrics_outlasts_a_lock_held_past_mlflows_busy_timeout(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """MLflow waits 20 s for SQLite's lock, then fails the write; log_metrics retries it and the
    point is stored exactly once (about 21 s)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ensure_store(uri)
    client = MlflowClient(uri)
    run_id = tracking.start_run(client, "0", "locked", {})
    holder = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(21.0, holder.rollback).start()  # past MLflow's PRAGMA busy_timeout = 20000
    with caplog.at_level(logging.WARNING, "pipeline.stores.tracking"):
        tracking.log_metrics(client, run_id, {"val_metric": 0.5}, step=1)
    holder.close()
    assert sum("MLflow store locked" in r.getMessage() for r in caplog.records) >= 1
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "val_metric")] == [(1, 0.5)]


# ---------------------------------------------------------------------------------- load


@pytest.mark.slow
def test_concurrent_writers_lose_no_metric_in_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client, exp_id = tracking.experiment_id(tmp_path, "load")  # creates the store, once, first
    total, _, _ = _load(client, exp_id, tracking.tracking_uri(tmp_path))
    assert total == WRITERS * BATCHES * len(KEYS)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path, int]]:
    """`mlflow server` as `make mlflow-server` runs it, on a free port of 127.0.0.1 with its own
    SQLite store and proxied artifacts in a temporary folder; yields (url, artifacts folder, log
    file, the server's session id). Shared by the module's server tests: it takes about 8 s to start."""
    folder = tmp_path_factory.mktemp("server")
    server = TrackingServer(folder)
    try:
        yield server.start(), folder / "artifacts", folder / "server.log", server.proc.pid
    finally:
        server.stop()


@pytest.mark.slow
def test_concurrent_writers_lose_no_metric_through_a_server(mlflow_server, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url, artifacts, log, _ = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    client, exp_id = tracking.experiment_id(tmp_path, "load")
    total, _, _ = _load(client, exp_id, url)
    assert total == WRITERS * BATCHES * len(KEYS)
    server_errors = [line for line in log.read_text().splitlines() if '" 5' in line and "HTTP/1.1" in line]
    print(f"server 5xx responses (retried by MLflow's client): {len(server_errors)}")

    # Artifacts go through the server into its --artifacts-destination: clients need no shared disk.
    note = tmp_path / "note.txt"
    note.write_text("proxied")
    run_id = tracking.start_run(client, exp_id, "artifact", {})
    client.log_artifact(run_id, str(note))
    assert client.get_run(run_id).info.artifact_uri.startswith("mlflow-artifacts:")
    assert [p.read_text() for p in artifacts.rglob("note.txt")] == ["proxied"]


def _session(sid: int) -> dict[int, str]:
    """{pid: command line} of every process in session `sid` (/proc)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.getsid(int(proc.name)) == sid:
                    found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ProcessLookupError):
                continue  # ended meanwhile
    return found


def _session_commands(sid: int) -> list[str]:
    """The command lines of every process in session `sid`."""
    return list(_session(sid).values())


@pytest.mark.slow
def test_the_server_runs_without_mlflows_job_runner(mlflow_server) -> None:
    """MLflow's job runner (huey consumers for its GenAI jobs) is off: ctsweep uses none of its jobs,
    and it cost about 12 CPU-seconds at every start (pipeline/stores/tracking_server.py)."""
    commands = _session_commands(mlflow_server[3])
    assert any("mlflow" in c and "server" in c for c in commands), commands
    assert not [c for c in commands if "huey" in c or "_job_runner" in c], commands


@pytest.mark.slow
def test_the_server_refuses_unknown_host_names(mlflow_server) -> None:
    """The default --allowed-hosts (localhost, private IPs) is what makes binding wider safe
    against DNS rebinding; a name must be allowed explicitly (docs/how-to/cluster.md)."""
    url = mlflow_server[0]
    api = f"{url}/api/2.0/mlflow/experiments/search?max_results=1"

    def status(host: str) -> int:
        try:
            with urllib.request.urlopen(urllib.request.Request(api, headers={"Host": host}), timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert status("10.1.2.3:5000") == 200
    assert status("attacker.example.com") == 403


def _workers(sid: int) -> list[int]:
    """The pids of the server's uvicorn workers in session `sid` (multiprocessing's spawned children)."""
    return [pid for pid, command in _session(sid).items() if "spawn_main" in command]


@pytest.mark.slow
def test_a_worker_that_answers_late_is_kept(mlflow_server) -> None:
    """A worker that cannot answer uvicorn's health check for 8 s (a machine loaded with trials) is
    not killed and replaced: with uvicorn's own 5 s, a starting worker on such a machine was killed
    over and over until the server's start gave up (pipeline/stores/tracking_server.py)."""
    url, _, log, sid = mlflow_server
    workers = _workers(sid)
    assert len(workers) == 2, _session_commands(sid)  # TrackingServer's two
    os.kill(workers[0], signal.SIGSTOP)
    try:
        time.sleep(8)
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed meanwhile: what the test is about
            os.kill(workers[0], signal.SIGCONT)
    time.sleep(2)  # the supervisor's next checks (every 0.5 s) see it answer
    assert sorted(_workers(sid)) == sorted(workers), log.read_text()[-2000:]
    assert f"Child process [{workers[0]}] died" not in log.read_text()
    tracking.ensure_store(url)  # and the server answers


@pytest.mark.slow
def test_progress_tags_queued_behind_a_hung_server_are_dropped_when_the_search_ends(
        mlflow_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end of a search waits a bounded time for its progress tags (pipeline/sweep/progress_tags.py):
    the write under way lands once the server answers, the ones queued behind it are dropped,
    instead of each spending MLflow's retries in turn before the search may build its records."""
    url, _, _, sid = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    client, exp_id = tracking.experiment_id(tmp_path, "progress-tags")
    runs = [tracking.start_run(client, exp_id, f"trial-{i}", {}) for i in range(4)]
    tags = ProgressTags(url, epochs=3)
    server = list(_session(sid))
    for pid in server:  # hung, not gone: connections are accepted, nothing answers
        os.kill(pid, signal.SIGSTOP)
    try:
        for run in runs:
            tags.on_trial_complete(0, [], SimpleNamespace(last_result={"mlflow_run_id": run, "epoch": 3}))
        tags.close(wait_s=1)
    finally:
        for pid in server:
            os.kill(pid, signal.SIGCONT)
    tags._pool.shutdown(wait=True)  # the write under way, answered now
    ended = [client.get_run(run).data.tags.get(ENDED_TAG) for run in runs]
    assert ended == [DONE, None, None, None]


def _telemetry_after_import(env: dict[str, str]) -> list[str]:
    """In a fresh interpreter: MLFLOW_DISABLE_TELEMETRY after `import pipeline`, and whether
    MLflow then started its telemetry client (the thread whose failure races os.environ)."""
    import subprocess
    import sys

    code = ("import os, pipeline.sweep.trial; from mlflow.telemetry.client import get_telemetry_client; "
            "print(os.environ.get('MLFLOW_DISABLE_TELEMETRY')); print(get_telemetry_client() is None)")
    base = {k: v for k, v in os.environ.items()
            if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK", "CI", "PYTEST_CURRENT_TEST")}
    done = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.split()


@pytest.mark.slow
def test_ctsweep_processes_import_mlflow_with_its_telemetry_off_unless_the_user_set_it() -> None:
    # what a trial process imports first: MLflow's telemetry thread never starts (pipeline/__init__.py)
    assert _telemetry_after_import({}) == ["true", "True"]
    assert _telemetry_after_import({"MLFLOW_DISABLE_TELEMETRY": "false"})[0] == "false"  # the user's choice kept
