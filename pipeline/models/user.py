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
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError
from pipeline.names import check_name

ENTRY_POINT_GROUP = "ctsweep.families"
ENV = "CTSWEEP_USER_FAMILIES"


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
    """Families that installed packages register under the `ctsweep.families` entry point group."""
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f" of {ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""
        found[ep.name] = FamilySource(ep.name, ep.value, None, None, f"entry point {ep.name!r}{dist} "
                                      f"(group {ENTRY_POINT_GROUP})")
    return found


def import_family(source: FamilySource) -> type:
    """The class `source` names, checked to be a SequenceModel; ConfigError naming the family."""
    from pipeline.models.base import SequenceModel

    module_name, class_name = parse_target(source.target, source.origin)
    if source.root is not None and source.root not in sys.path:
        sys.path.insert(0, source.root)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any error of the user's module: its own line, not a traceback
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ConfigError(f"family {source.name!r} ({source.origin}): `import {module_name}` failed: {reason}") from None
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
    builtin = _builtin()
    for name, source in sources.items():
        if name in builtin:
            raise ConfigError(f"family {name!r} ({source.origin}) has the name of a built-in family; "
                              "allowed: a name that is not one of ctsweep's own families")
        _registered[name] = (source, import_family(source))
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
    """The class of user family `name`: registered, else from the environment or an entry point."""
    if name in _registered:
        return _registered[name][1]
    source = _from_environment().get(name) or from_entry_points().get(name)
    if source is None:
        return None
    _registered[name] = (source, import_family(source))
    return _registered[name][1]


def names() -> list[str]:
    """The user families registered in this process."""
    return sorted(_registered)


def source_of(name: str) -> FamilySource | None:
    """How user family `name` was declared; None for built-in and unknown names."""
    if name in _builtin():
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
