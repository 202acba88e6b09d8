"""MLflow conventions: one experiment per dataset, parent runs per search or final evaluation,
a child run per trial or seed, tags dataset / family / stage / seed on every run.

Everything goes through an explicit MlflowClient with an absolute tracking URI, because Ray trial
processes change their working directory and share no fluent-API state with the driver.

Concurrency (measured in tests/test_tracking.py): many trial processes may write one SQLite store
at once; MLflow's sessions wait up to 20 s for SQLite's write lock (PRAGMA busy_timeout), so the
writes queue rather than fail. What does break is several processes opening a *fresh* SQLite
file at once: each runs the schema migration and most crash, sometimes leaving the file unusable.
`ensure_store` creates the store once, under a file lock, before any trial starts. Writes that
still hit a lock (another process holding it past the busy timeout) are retried, bounded; the
retry cannot duplicate a point, as explained at `_retry_locked`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.credentials import get_default_host_creds
from mlflow.utils.rest_utils import http_request
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import CtsweepError
from pipeline.stores.database_url import check_url, masked
from pipeline.stores.paths import tracking_uri  # noqa: F401  (its home is paths.py: no MLflow to name the store)

PARENT_TAG = "mlflow.parentRunId"
# Set on every run start_run creates: "parent" (a search or a final evaluation) or "child" (a
# trial, a seed), so a filter such as `tags.stage = 'final' and tags.run_level = 'child'` finds
# the seeds alone (the parent carries the same stage, family and dataset tags).
RUN_LEVEL_TAG = "run_level"
PARENT_LEVEL, CHILD_LEVEL = "parent", "child"
# How a child run ended, beside its MLflow status: a trial ASHA or patience stopped early ends
# FINISHED like a completed one (it did not fail), told apart by this tag; real failures end FAILED.
OUTCOME_TAG = "outcome"
COMPLETED, STOPPED_EARLY, FAILED_OUTCOME = "completed", "stopped_early", "failed"
HEALTH_TIMEOUT_S = 5.0
# Waits before each retry of a write that found the SQLite store locked. Each attempt itself
# already waited MLflow's 20 s busy timeout, so five retries span about two minutes.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)
# SQLite's SQLITE_BUSY / SQLITE_LOCKED messages, as sqlite3 and MLflow's wrapper word them.
_LOCK_MESSAGES = ("database is locked", "database table is locked", "database schema is locked")

_log = logging.getLogger(__name__)
T = TypeVar("T")


def _scheme(uri: str) -> str:
    """The URI's scheme, lower case: '' for a plain path, 'databricks' for MLflow's bare names."""
    if uri.strip().lower() in ("databricks", "databricks-uc", "uc"):
        return "databricks"
    return urllib.parse.urlparse(uri).scheme.lower()


def is_local_store(uri: str) -> bool:
    """Whether the store lives on this machine's disk: sqlite:, file: or a plain path.

    Such a store cannot be written by trials on other nodes; http(s), databricks and
    networked databases (postgresql://, mysql://) can.
    """
    scheme = _scheme(uri)
    return scheme in ("", "file") or scheme.startswith("sqlite")


def is_loopback_server(uri: str) -> bool:
    """Whether the URI is a tracking server or a database server (postgresql://, mysql://) on
    this machine's loopback (localhost, 127.x, ::1): trials on other nodes would reach their own
    loopback, not this server."""
    if is_local_store(uri) or _scheme(uri) == "databricks":
        return False
    host = (urllib.parse.urlparse(uri).hostname or "").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"


def sqlite_file(uri: str) -> Path | None:
    """The database file of an sqlite: URI (absolute), or None for other stores and :memory:."""
    if not _scheme(uri).startswith("sqlite"):
        return None
    database = make_url(uri).database
    return None if not database or database == ":memory:" else Path(database).resolve()


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`.flock (a separate file: closing a second descriptor of the
    database itself would drop SQLite's own POSIX locks held by this process)."""
    with open(path.with_name(path.name + ".flock"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield


def _check_server(uri: str) -> None:
    """GET /health once, through MLflow's own HTTP client: the same credentials, TLS settings
    (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_INSECURE_TLS, ...) and proxies the trials will use."""
    hint = ("start it with `make mlflow-server` (docs/how-to/cluster.md), or unset "
            "MLFLOW_TRACKING_URI to use the local SQLite store")
    try:
        response = http_request(get_default_host_creds(uri), "/health", "GET", max_retries=0,
                                timeout=HEALTH_TIMEOUT_S, raise_on_status=False)
    except MlflowException as exc:  # refused, unknown host, timed out, TLS failure
        raise CtsweepError(f"MLflow tracking server {uri} (MLFLOW_TRACKING_URI) is unreachable: {exc.message}; "
                           f"{hint}") from exc
    if response.status_code != 200:
        raise CtsweepError(f"MLflow tracking server {uri} (MLFLOW_TRACKING_URI) answered GET /health with HTTP "
                           f"{response.status_code}, not 200: is it an MLflow server? {hint}")


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Hold these loggers to warnings: creating a fresh store logs two INFO lines ("Creating initial
    MLflow database tables...") that would stand before a stage's one-line error."""
    saved = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _open(uri: str) -> None:
    """Open the store once: on a fresh database this creates its tables."""
    try:
        with _quiet("mlflow.store.db.utils", "alembic.runtime.migration"):
            MlflowClient(uri).search_experiments(max_results=1)
    except (MlflowException, SQLAlchemyError) as exc:  # unwritable folder, unsupported URI, old schema
        message = exc.message if isinstance(exc, MlflowException) else str(exc).splitlines()[0]
        raise CtsweepError(f"MLflow tracking store {masked(uri)} cannot be opened: {message}") from exc


def ensure_store(uri: str) -> None:
    """Make the tracking store ready before any trial starts; call it in the driver.

    SQLite: create the file (and its folder) and its schema once, under a file lock, so that
    neither trials nor concurrent drivers race on the migration. http(s): check the server
    answers GET /health within HEALTH_TIMEOUT_S; raises CtsweepError naming the URI if not.
    databricks: nothing to check here. Other databases: open them once (creates the schema);
    PostgreSQL is first connected to within seconds (a ConfigError naming MLFLOW_TRACKING_URI and
    what failed), since MLflow retries an unreachable database (10 attempts with back-off).
    """
    scheme = _scheme(uri)
    if scheme in ("http", "https"):
        _check_server(uri)
    elif scheme.startswith("databricks"):
        return
    elif (path := sqlite_file(uri)) is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with _exclusive(path):
                _open(uri)
        except OSError as exc:  # the folder cannot be created or written
            raise CtsweepError(f"MLflow tracking store {uri}: cannot write {path.parent}: {exc}") from exc
    else:
        if scheme.split("+")[0] in ("postgresql", "postgres"):  # MLflow itself would retry, 10 times with back-off
            check_url(uri, "MLFLOW_TRACKING_URI")
        _open(uri)


def registered_name(dataset: str) -> str:
    """The registered model of a dataset's champion: `ctsweep-<dataset>` (DESIGN.md, MLflow)."""
    return f"ctsweep-{dataset}"


ALIAS = "champion"  # the alias `ctsweep promote` moves and `ctsweep predict` loads


def experiment_id(root: Path, dataset: str) -> tuple[MlflowClient, str]:
    """Open the store (creating it here, once, before any trial starts) and the dataset's experiment.

    Many processes opening a fresh SQLite store at once race on its schema migration, so the
    driver creates it before Ray starts any trial. Artifacts go to an absolute folder beside it.
    """
    uri = tracking_uri(root)
    ensure_store(uri)
    client = MlflowClient(uri)
    name = f"ctsweep/{dataset}"
    found = client.get_experiment_by_name(name)
    if found is not None:
        return client, found.experiment_id
    location = (root / "mlartifacts").as_uri() if "MLFLOW_TRACKING_URI" not in os.environ else None
    try:
        return client, client.create_experiment(name, artifact_location=location, tags={"dataset": dataset})
    except MlflowException as exc:  # another driver created it between our lookup and create
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        _log.debug("experiment %s created concurrently: %s", name, exc.message)
        return client, found.experiment_id


def _is_lock_error(exc: BaseException) -> bool:
    """SQLite's busy/locked error, raw or as MLflow wraps it (MlflowException from OperationalError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(m in str(current).lower() for m in _LOCK_MESSAGES):
            return True
        current = current.__cause__ or current.__context__
    return False


def _retry_locked(write: Callable[[], T], uri: str, what: str,
                  delays: tuple[float, ...] = RETRY_DELAYS_S) -> T:
    """Run `write`, retrying it while the SQLite store is locked; other errors pass through.

    Safe to repeat: SQLite commits a transaction whole or not at all, and MLflow's log_batch
    writes params, metrics and tags in separate transactions whose repeat is harmless: the same
    param value is accepted again, a tag is overwritten, and a metric point identical in key,
    value, step and timestamp is dropped as a duplicate (the entities are built once, outside
    the retried call, so the timestamp does not change). create_run writes in one transaction.
    Over http MLflow's client already retries the server's 503s (its lock errors) itself.
    """
    for attempt, delay in enumerate((*delays, None)):
        try:
            return write()
        except Exception as exc:
            if not _is_lock_error(exc):
                raise
            if delay is None:
                raise CtsweepError(
                    f"MLflow store {uri} stayed locked through {attempt + 1} attempts to {what}: another process "
                    "holds SQLite's write lock (a stuck sqlite3 shell or `mlflow gc`?) or the file is on a network "
                    "filesystem, where SQLite locking is unreliable; for many writers use `make mlflow-server`"
                ) from exc
            _log.warning("MLflow store locked (%s); retry %d/%d of %s in %.1f s",
                         exc.__class__.__name__, attempt + 1, len(delays), what, delay)
            time.sleep(delay * random.uniform(1.0, 1.5))  # jitter: locked-out writers do not retry in step
    raise AssertionError("unreachable")


def start_run(client: MlflowClient, exp_id: str, name: str, tags: dict[str, Any],
              parent_run_id: str | None = None) -> str:
    """Create a run with string tags (and the parent link, and RUN_LEVEL_TAG) and return its id."""
    all_tags = {RUN_LEVEL_TAG: CHILD_LEVEL if parent_run_id else PARENT_LEVEL, **{k: str(v) for k, v in tags.items()}}
    if parent_run_id:
        all_tags[PARENT_TAG] = parent_run_id
    run = _retry_locked(lambda: client.create_run(exp_id, run_name=name, tags=all_tags),
                        client.tracking_uri, f"create run {name}")
    return run.info.run_id


def log_params(client: MlflowClient, run_id: str, params: dict[str, Any]) -> None:
    """Log params as strings, sorted by key, in one batch."""
    batch = [Param(k, str(v)) for k, v in sorted(params.items())]
    _retry_locked(lambda: client.log_batch(run_id, params=batch), client.tracking_uri, f"log params of {run_id}")


def log_metrics(client: MlflowClient, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    """Log metrics at `step` in one batch, all with the same timestamp (taken once: see _retry_locked)."""
    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    _retry_locked(lambda: client.log_batch(run_id, metrics=batch), client.tracking_uri, f"log metrics of {run_id}")


def set_tags(client: MlflowClient, run_id: str, tags: dict[str, Any]) -> None:
    """Set tags (as strings) in one batch; an existing tag is overwritten."""
    batch = [RunTag(k, str(v)) for k, v in tags.items()]
    _retry_locked(lambda: client.log_batch(run_id, tags=batch), client.tracking_uri, f"set tags of {run_id}")


def log_params_and_tags(client: MlflowClient, run_id: str, params: dict[str, Any], tags: dict[str, Any]) -> None:
    """Log params and set tags (all as strings) in one write: one transaction (a round trip to a
    tracking server) where log_params and set_tags would take two."""
    _retry_locked(lambda: client.log_batch(run_id, params=[Param(k, str(v)) for k, v in sorted(params.items())],
                                           tags=[RunTag(k, str(v)) for k, v in tags.items()]),
                  client.tracking_uri, f"log params and tags of {run_id}")


def finish(client: MlflowClient, run_id: str, error: BaseException | None = None,
           outcome: str | None = None, tags: dict[str, Any] | None = None) -> None:
    """Mark a run FINISHED, or FAILED with the error message as a tag; `outcome` (a child run's
    COMPLETED, STOPPED_EARLY or FAILED_OUTCOME) goes to OUTCOME_TAG; `tags`, more tags set in
    the same write."""
    tags = {**(tags or {}), **({} if outcome is None else {OUTCOME_TAG: outcome})}
    if error is not None:
        tags["error"] = f"{type(error).__name__}: {error}"[:4000]
    if tags:
        set_tags(client, run_id, tags)
    terminate(client, run_id, "FAILED" if error is not None else "FINISHED")


def terminate(client: MlflowClient, run_id: str, status: str) -> None:
    """End a run with `status` (FINISHED, FAILED or KILLED), retried like every write here."""
    _retry_locked(lambda: client.set_terminated(run_id, status), client.tracking_uri, f"end run {run_id}")
