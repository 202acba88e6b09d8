"""The check of a postgresql:// URL that runs before Ray starts (search.optuna_storage,
MLFLOW_TRACKING_URI, `make mlflow-server MLFLOW_BACKEND=...`): connect, SELECT 1, and one line
naming the setting and what failed, any password shown as ***."""

from __future__ import annotations

import urllib.parse

from pipeline.errors import ConfigError
from pipeline.names import shown

__all__ = ["CONNECT_TIMEOUT_S", "PASSFILE", "check_url", "masked"]

CONNECT_TIMEOUT_S = 5
PASSFILE = "ctsweep.pgpass"  # the libpq password file in the data directory of `make postgres`
_START_HINT = "`make postgres` starts the project's own"


def masked(url: str) -> str:
    """`url` with any password (user:password@ or ?password=) shown as ***; a file path (no
    scheme) as it is."""
    from sqlalchemy.engine import make_url

    if "://" not in url:
        return url
    parsed = make_url(url)
    if "password" in parsed.query:
        parsed = parsed.update_query_dict({"password": "***"})
    base, mark, query = parsed.render_as_string(hide_password=True).partition("?")
    return base + mark + urllib.parse.unquote(query)  # ?passfile=/a/b, not %2Fa%2Fb


def check_url(url: str, setting: str) -> None:
    """Connect to the database of a postgresql URL (at most CONNECT_TIMEOUT_S) and run SELECT 1;
    raise a one-line ConfigError naming `setting` (e.g. "MLFLOW_TRACKING_URI") and what failed:
    nothing listening, an unknown host, wrong credentials, no password, a missing database."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    try:
        parsed = make_url(url)
        safe = masked(url)
    except Exception as exc:  # noqa: BLE001 - whatever the parser says, the value is not a URL
        raise ConfigError(f"{setting}: {shown(url.split('@')[-1])} is not a database URL ({_line(exc)}); "
                          "allowed: postgresql://user@host:port/database") from None
    secret = parsed.password or parsed.query.get("password")
    engine = None
    try:
        engine = create_engine(parsed, poolclass=NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - a missing driver, DNS, a refused login: all the user's to fix
        reason = _reason(getattr(exc, "orig", None) or exc, parsed)
        if isinstance(secret, str) and secret:
            reason = reason.replace(secret, "***")
        raise ConfigError(f"{setting}: cannot open {shown(safe, 100)} ({reason})") from None
    finally:
        if engine is not None:
            engine.dispose()


def _reason(exc: BaseException, parsed: object) -> str:
    """What failed, in words, from libpq's message (which never holds the password)."""
    message = str(exc)
    where = f"{getattr(parsed, 'host', None) or 'localhost'}:{getattr(parsed, 'port', None) or 5432}"
    user, database = getattr(parsed, "username", None), getattr(parsed, "database", None)
    if isinstance(exc, ModuleNotFoundError):
        return f"its driver is not installed: {exc}; postgresql:// uses psycopg, which `make install` installs"
    if "Connection refused" in message or "No such file or directory" in message:
        return f"nothing listens on {where}: PostgreSQL is not running there; {_START_HINT}"
    if "could not translate host name" in message or "Name or service not known" in message:
        return f"unknown host {getattr(parsed, 'host', '')!r}"
    if "timeout expired" in message or "timed out" in message:
        return f"no answer from {where} within {CONNECT_TIMEOUT_S} s"
    if "password authentication failed" in message:
        return f"wrong user or password: the server refused user {user!r}"
    if "no password supplied" in message:
        return (f"no password for user {user!r} in the URL or a password file: add `?passfile=<pgdata>/{PASSFILE}` "
                "to the URL or set PGPASSFILE")
    if "does not exist" in message and "database" in message:
        return f"database {database!r} does not exist on {where}"
    return _line(exc)


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
