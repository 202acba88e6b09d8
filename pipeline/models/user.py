"""Families from user code: a model class outside `pipeline/`, searched beside the built-in ones.

Two ways to declare one, both resolved to a `SequenceModel` subclass by its import path
`package.module:Class`:

  * params.yaml, the module importable from the project root (the root goes first on sys.path):

        user_families:
          my_gru: my_models.gru:MyGRU                    # space: search_spaces/my_gru.yaml
          my_ode: {model: my_models.ode:MyODE, space: spaces/my_ode.yaml}

  * a Python entry point of an installed package, group `ctsweep.families`
    (pyproject.toml: `[project.entry-points."ctsweep.families"] my_gru = "my_models.gru:MyGRU"`).

Every process that builds a model must find the class. Entry points are found in any process
of the same environment. Families declared in params.yaml are carried in the environment
variable CTSWEEP_USER_FAMILIES (JSON: name -> import path and project root), which the driver
sets when it reads params.yaml and hands to Ray's processes (sweep/cluster.ray_session); a
trained model records its import path and ships the module with it (pipeline/serving/pyfunc.py), so
`models:/...@champion` loads where the project is absent.

A name that is a built-in family, an import path that does not import, and a class that is not
a model are refused with one line naming the family, before Ray starts.

Every import of user code (`import_family`: params.yaml, entry points, a served model's family)
is tried first in a fresh interpreter with a time limit (`probe`, CTSWEEP_IMPORT_TIMEOUT, default
60 s, 0 skips it), since an import begun in this process cannot be stopped safely: a module that
raises, calls sys.exit, crashes or hangs is refused in one line naming the family, and is never
imported here. The import here then turns whatever the module raises (SystemExit and
KeyboardInterrupt too) into the same one line. The probe costs an interpreter start and the
module's own imports (torch: 2.7-3.5 s on a loaded 2-core machine), once per command that reads
params.yaml with user families; Ray workers skip it for the families the driver imported (`lookup`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.errors import ConfigError, excerpt
from pipeline.models.builtin import BUILTIN_FAMILIES
from pipeline.names import check_name

ENTRY_POINT_GROUP = "ctsweep.families"
ENV = "CTSWEEP_USER_FAMILIES"
TIMEOUT_ENV = "CTSWEEP_IMPORT_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
WAITING_NOTICE_S = 4.0  # an import still running after this long is named on stderr, with the limit
# What user code (an import, a model's methods) may raise that is its own doing: Python's exceptions,
# sys.exit and KeyboardInterrupt included. ctsweep's Interrupted (a real SIGINT or SIGTERM,
# pipeline/runtime/interrupts.py) is none of these and passes as a stop.
USER_CODE_ERRORS = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit, BaseExceptionGroup)


@dataclass(frozen=True)
class FamilySource:
    """Where a user family's class comes from.

    target: "package.module:Class". root: the folder put first on sys.path to import it (the
    project root; None for entry points and installed packages). space: its search-space file
    when not search_spaces/<name>.yaml (absolute). origin: how it was declared, for errors.
    """

    name: str
    target: str
    root: str | None = None
    space: str | None = None
    origin: str = ""


_registered: dict[str, tuple[FamilySource, type]] = {}


def _builtin() -> dict[str, type]:
    from pipeline.models.zoo import MODELS  # late: the zoo imports torch and every lineage

    return MODELS


def parse_target(target: Any, where: str) -> tuple[str, str]:
    """"pkg.mod:Class" -> ("pkg.mod", "Class"); ConfigError naming `where` otherwise."""
    parts = target.split(":") if isinstance(target, str) else []
    if len(parts) != 2 or not all(p and all(s.isidentifier() for s in p.split(".")) for p in parts):
        raise ConfigError(f"{where}: {target!r} is not an import path; allowed: 'package.module:ClassName' "
                          "(dotted identifiers, one colon)")
    return parts[0], parts[1]


def from_params(section: Any, root: Path, path: Path) -> dict[str, FamilySource]:
    """The `user_families` section of params.yaml (`path`, in project `root`) as sources."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: key `user_families`: expected a mapping of family name -> import path "
                          f"or {{model, space}}, got {type(section).__name__}")
    sources = {}
    for name, entry in section.items():
        key = f"user_families.{name}"
        check_name(name, f"{path}: key `user_families`: the family name")
        if isinstance(entry, dict):
            unknown = sorted(set(entry) - {"model", "space"})
            if unknown or "model" not in entry:
                raise ConfigError(f"{path}: key `{key}`: {'unknown keys ' + str(unknown) if unknown else 'no `model`'}; "
                                  "allowed: model (required), space")
            target, space = entry["model"], entry.get("space")
        else:
            target, space = entry, None
        parse_target(target, f"{path}: key `{key}`")
        if space is not None and not isinstance(space, str):
            raise ConfigError(f"{path}: key `{key}.space`: expected a path to a .yaml file, got {space!r}")
        space_file = None if space is None else str((root / space).resolve())
        if space_file is not None and not Path(space_file).is_file():
            raise ConfigError(f"{path}: key `{key}.space`: no such file {space_file}")
        sources[name] = FamilySource(name, target, str(root), space_file, f"{path}: user_families.{name}")
    return sources


def from_entry_points() -> dict[str, FamilySource]:
    """Families installed packages register under the `ctsweep.families` entry point group, once per sys.path
    per process: entry_points() reads every package's metadata (~30 ms here) and every params load asks."""
    return dict(_entry_point_sources(tuple(sys.path)))


@functools.lru_cache(maxsize=8)
def _entry_point_sources(path: tuple[str, ...]) -> tuple[tuple[str, FamilySource], ...]:  # path: the cache key
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f" of {ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""
        found[ep.name] = FamilySource(ep.name, ep.value, None, None, f"entry point {ep.name!r}{dist} "
                                      f"(group {ENTRY_POINT_GROUP})")
    return tuple(found.items())


def _on_path(source: FamilySource) -> str:
    """The module `source` names, its root (if any) put first on sys.path."""
    module_name = parse_target(source.target, source.origin)[0]
    if source.root is not None and source.root not in sys.path:
        sys.path.insert(0, source.root)
    return module_name


def probe_sources(sources: list[FamilySource], meanwhile: Callable[[], object] | None = None) -> None:
    """Import the modules of `sources` not imported yet in a separate interpreter first, all in one,
    each within CTSWEEP_IMPORT_TIMEOUT seconds (`probe`); ConfigError naming the first
    family whose module raises, exits, crashes or overruns. Nothing of it is imported here.
    `meanwhile` runs here while the probe runs (ctsweep's own imports: torch loads in both at once)."""
    first: dict[str, FamilySource] = {}
    for source in sources:
        module_name = _on_path(source)
        if module_name not in sys.modules:
            first.setdefault(module_name, source)
    timeout = import_timeout()
    if not first or timeout == 0:
        return
    failed = probe(list(first), list(sys.path), timeout, meanwhile)
    if failed is not None:
        module_name, reason = failed
        source = first[module_name]
        raise ConfigError(f"family {source.name!r} ({source.origin}): `import {module_name}` {reason}")


def import_family(source: FamilySource, probed: bool = False) -> type:
    """The class `source` names, checked to be a SequenceModel; ConfigError naming the family.

    Unless `probed` (probe_sources ran on it), the module is tried in a separate interpreter first.
    """
    from pipeline.models.base import SequenceModel

    module_name, class_name = parse_target(source.target, source.origin)
    if not probed:
        probe_sources([source])
    _on_path(source)
    try:
        module = importlib.import_module(module_name)
    except USER_CODE_ERRORS as exc:  # the module's own error, sys.exit or KeyboardInterrupt: one line, no traceback
        raise ConfigError(f"family {source.name!r} ({source.origin}): `import {module_name}` {describe(exc)}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"family {source.name!r} ({source.origin}): module {module_name} "
                          f"({getattr(module, '__file__', '?')}) has no attribute {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, SequenceModel)):
        raise ConfigError(f"family {source.name!r} ({source.origin}): {source.target} is not a model class; "
                          "allowed: a subclass of pipeline.models.base.SequenceModel")
    return cls


def register(sources: dict[str, FamilySource]) -> None:
    """Import and register `sources` (entry points included by the caller); refuse built-in names.

    The params.yaml ones are also written to CTSWEEP_USER_FAMILIES for child processes.
    """
    if not sources:  # nothing to import: the zoo (torch) is not loaded for nothing
        return
    for name, source in sources.items():
        if name in BUILTIN_FAMILIES:
            raise ConfigError(f"family {name!r} ({source.origin}) has the name of a built-in family; "
                              "allowed: a name that is not one of ctsweep's own families")
    probe_sources(list(sources.values()), meanwhile=_builtin)  # one interpreter for all; the zoo loads meanwhile
    for name, source in sources.items():
        _registered[name] = (source, import_family(source, probed=True))
    carried = {n: asdict(s) for n, (s, _) in _registered.items() if s.root is not None}
    if carried:
        os.environ[ENV] = json.dumps(carried, sort_keys=True)


def register_project(section: Any, root: Path, path: Path) -> None:
    """Register the entry-point families and params.yaml's `user_families` (params.yaml wins)."""
    register({**from_entry_points(), **from_params(section, root, path)})


def _from_environment() -> dict[str, FamilySource]:
    text = os.environ.get(ENV)
    if not text:
        return {}
    try:
        return {name: FamilySource(**fields) for name, fields in json.loads(text).items()}
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"environment variable {ENV} is not what ctsweep writes there ({exc}); unset it") from None


def lookup(name: str) -> type | None:
    """The class of user family `name`: registered, else from the environment or an entry point.

    A family from the environment is not tried in a separate interpreter first: the process that
    wrote CTSWEEP_USER_FAMILIES imported it (`register`), so a Ray worker does not pay for it again.
    """
    if name in _registered:
        return _registered[name][1]
    carried = _from_environment().get(name)
    source = carried or from_entry_points().get(name)
    if source is None:
        return None
    _registered[name] = (source, import_family(source, probed=carried is not None))
    return _registered[name][1]


def names() -> list[str]:
    """The user families registered in this process."""
    return sorted(_registered)


def source_of(name: str) -> FamilySource | None:
    """How user family `name` was declared; None for built-in and unknown names."""
    if name in BUILTIN_FAMILIES:
        return None
    return _registered[name][0] if name in _registered or lookup(name) is not None else None


def code_path(name: str) -> Path | None:
    """The file or top-level package folder that holds user family `name`'s module (what MLflow
    ships with the model, and what the staleness digest reads); None for built-in families."""
    source = source_of(name)
    if source is None:
        return None
    top = sys.modules[parse_target(source.target, source.origin)[0].split(".")[0]]
    file = Path(getattr(top, "__file__", None) or next(iter(getattr(top, "__path__", [])), ""))
    return file.parent if file.name == "__init__.py" or file.is_dir() else file


def code_digest(name: str) -> str | None:
    """sha256 over the import path and the Python sources of user family `name` (its code_path),
    so a result of the family is stale once its code changes; None for built-in families (their code is pipeline/,
    covered by pipeline/stores/staleness.py)."""
    import hashlib

    path = code_path(name)
    if path is None:
        return None
    digest = hashlib.sha256(source_of(name).target.encode())  # type: ignore[union-attr]  # code_path found it
    for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
        digest.update(str(file.relative_to(path.parent)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def forget() -> None:
    """Unregister every user family of this process (tests)."""
    _registered.clear()
    os.environ.pop(ENV, None)


# ---------------------------------------------------------------------------------- the probe

# Runs in the fresh interpreter: argv = a file descriptor for its reports, sys.path and the modules
# (JSON). Reports ["start", m], ["done", m] or ["failed", m, reason], one JSON line each.
_CHILD = r"""
import importlib, json, os, sys
report = os.fdopen(int(sys.argv[1]), "w", buffering=1)
sys.path[:] = json.loads(sys.argv[2])
for name in json.loads(sys.argv[3]):
    report.write(json.dumps(["start", name]) + "\n")
    try:
        importlib.import_module(name)
    except BaseException as exc:
        why = (f"called sys.exit({exc.code!r}) while being imported; a family module must not end the process"
               if isinstance(exc, SystemExit) else "failed: " + " ".join(f"{type(exc).__name__}: {exc}".split()))
        why = why.rstrip(":") if len(why) <= 400 else f"{why[:400]}... ({len(why)} characters)"
        report.write(json.dumps(["failed", name, why]) + "\n")
        os._exit(1)
    report.write(json.dumps(["done", name]) + "\n")
os._exit(0)
"""


def import_timeout() -> float:
    """Seconds a module may take in the probe (CTSWEEP_IMPORT_TIMEOUT, default 60; 0: no probe)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        seconds = float(text) if text else DEFAULT_TIMEOUT
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"environment variable {TIMEOUT_ENV} is {excerpt(text)}; allowed: the seconds a family "
                          f"module may take to import, a number >= 0 (default {DEFAULT_TIMEOUT:g}; 0 skips the "
                          f"test import in a separate process)")
    return seconds


def describe(exc: BaseException) -> str:
    """What an import that raised `exc` did, to follow "`import m` " in a one-line error."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({excerpt(exc.code)}) while being imported; a family module must not end the process"
    text = " ".join(f"{type(exc).__name__}: {exc}".split()).rstrip(":")
    return "failed: " + (text if len(text) <= 400 else f"{text[:400]}... ({len(text)} characters)")


def probe(modules: list[str], path: list[str], timeout: float,
          meanwhile: Callable[[], object] | None = None) -> tuple[str, str] | None:
    """Import `modules` in order in a fresh interpreter whose sys.path is `path`, within `timeout`
    seconds each (all together: timeout x their number); None when all import, else (the module,
    what happened: the end of a one-line error). `meanwhile` runs here while the child imports.

    The interpreter has this process's environment, stdin closed, its output discarded (the last
    line of its stderr is quoted if it dies) and a session of its own, killed afterwards with
    whatever the module started. Only Python's own exceptions are caught in this process (not
    ctsweep's Interrupted: a real SIGINT or SIGTERM stops the command as usual)."""
    with tempfile.TemporaryFile() as report, tempfile.TemporaryFile() as stderr:
        child_started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(report.fileno()), json.dumps(path),
                                  json.dumps(modules)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=stderr, pass_fds=(report.fileno(),), start_new_session=True)
        limit = timeout * len(modules)
        # A module still importing after a few seconds (one that sleeps or waits for a lock at import)
        # would keep the command silent until the limit: say what it waits for, and for how long.
        waiting = threading.Timer(WAITING_NOTICE_S, _say_waiting, (modules, limit))
        waiting.daemon = True
        if limit > WAITING_NOTICE_S:
            waiting.start()
        try:
            if meanwhile is not None:
                meanwhile()
            code = _exit_status(child.pid, child_started + limit)
        finally:
            waiting.cancel()
            _kill(child)
        report.seek(0)
        events = [json.loads(line) for line in report.read().splitlines() if line.strip()]
        stderr.seek(0)
        said = [line.strip() for line in stderr.read()[-4096:].decode(errors="replace").splitlines() if line.strip()]
    current = next((e[1] for e in reversed(events) if e[0] == "start"), modules[0])
    failed = [e for e in events if e[0] == "failed"]
    if failed:
        return failed[0][1], failed[0][2]
    if sum(e[0] == "done" for e in events) == len(modules):
        return None
    if code is None:
        return current, (f"did not finish within {limit:g} s (tried first in a separate process, which was stopped; "
                         f"{TIMEOUT_ENV}=<seconds> sets the limit, 0 skips this test)")
    how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
    last = f"; its last output: {excerpt(said[-1], 120)}" if said else ""
    return current, f"ended the process: the interpreter importing it {how}{last}"


def _say_waiting(modules: list[str], limit: float) -> None:
    names = ", ".join(f"`import {m}`" for m in modules)
    print(f"ctsweep: waiting for {names} (a family's module, imported first in a separate process) to finish: "
          f"up to {limit:g} s in all ({TIMEOUT_ENV}=<seconds> sets the limit per module)", file=sys.stderr, flush=True)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _exit_status(pid: int, until: float) -> int | None:
    """The child's exit status (-N: killed by signal N), None if it has not exited by `until`. Not
    reaped (WNOWAIT), so its process group cannot have been handed to another process in _kill."""
    while True:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        if time.monotonic() >= until:
            return None
        time.sleep(0.02)


def _kill(child: subprocess.Popen) -> None:
    """Kill the child's process group (the child and whatever the module started), then reap it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()
