"""The params.yaml keys the project's dvc.yaml stages list under `params:`, checked by ctsweep first.

A section ctsweep gives defaults for (`classical`, `search`, `final`, `promote`) may be absent from
params.yaml, and ctsweep accepts the file; but DVC refuses a stage whose `params:` names a key the
file lacks, and only when it reaches that stage: a params.yaml from before the `classical` section
ran fetch, prepare, search and final (hours) and then stopped with DVC's own "Parameters
'classical' are missing from 'params.yaml'". DVC computes a stage's params just before running it,
and `fetch` (always_changed) runs first in every repro, so a ctsweep command run by DVC (DVC sets
DVC_STAGE for every stage command) checks every stage's keys and answers first, in one line;
`ctsweep check` checks them whenever the project has a dvc.yaml. Outside DVC the defaults serve.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError

RUN_BY_DVC = "DVC_STAGE"  # set by DVC for every stage command (dvc/stage/run.py)
_TEMPLATE = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*\}")


def run_by_dvc() -> bool:
    return bool(os.environ.get(RUN_BY_DVC))


def check_dvc_params(root: Path, raw: Any, params_path: Path) -> None:
    """ConfigError naming the first key a stage of `root`/dvc.yaml lists under `params:` that the
    params.yaml content `raw` lacks. No dvc.yaml, or one that cannot be read: nothing to check
    (DVC tells its own problems)."""
    if not isinstance(raw, dict):
        return
    for stage, key in _listed(root / "dvc.yaml", raw):
        if not _has(raw, key):
            what = "section" if "." not in key else "key"
            add = f"`{key}: {{}}` takes its defaults; " if "." not in key else ""
            raise ConfigError(f"{params_path}: no `{key}` {what}, which dvc.yaml's stage `{stage}` lists under "
                              f"`params:` (`dvc repro` would stop at that stage with DVC's \"Parameters '{key}' are "
                              f"missing\", after the stages before it had run); add it to params.yaml ({add}the keys: "
                              f"docs/reference/params.md)")


def _listed(dvc_yaml: Path, raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(stage, params.yaml key) for every key of every stage's `params:`, ${item} expanded."""
    if not dvc_yaml.is_file():
        return []
    from pipeline.config.yaml_load import load_yaml

    try:
        stages = (load_yaml(dvc_yaml) or {}).get("stages") or {}
    except (ConfigError, AttributeError):
        return []
    found = []
    for name, stage in stages.items() if isinstance(stages, dict) else ():
        if not isinstance(stage, dict):
            continue
        body, items = stage, [None]
        if "foreach" in stage:
            body, items = stage.get("do") or {}, _items(stage["foreach"], raw)
        keys = _keys(body.get("params") if isinstance(body, dict) else None)
        for item in items:
            for key in keys:
                expanded = key if item is None else key.replace("${item}", str(item))
                if "${" not in expanded:
                    found.append((name if item is None else f"{name}@{item}", expanded))
    return found


def _items(foreach: Any, raw: dict[str, Any]) -> list[Any]:
    """The values a foreach stage runs over: a literal list, or `${key}` read from params.yaml."""
    if isinstance(foreach, str) and (m := _TEMPLATE.fullmatch(foreach.strip())):
        foreach = _get(raw, m.group(1))
    if isinstance(foreach, list):
        return [v for v in foreach if isinstance(v, (str, int, float))]
    return []  # a mapping (${key} and ${item} its value) or a value not found: its stages go unchecked


def _keys(params: Any) -> list[str]:
    """The params.yaml keys of a stage's `params:` list (a key, or {params.yaml: [keys]})."""
    keys: list[str] = []
    for entry in params if isinstance(params, list) else ():
        if isinstance(entry, str):
            keys.append(entry)
        elif isinstance(entry, dict):
            for file, listed in entry.items():
                if file == "params.yaml" and isinstance(listed, list):
                    keys += [k for k in listed if isinstance(k, str)]
    return keys


_MISSING = object()


def _get(raw: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(raw, dict) or part not in raw:
            return _MISSING
        raw = raw[part]
    return raw


def _has(raw: dict[str, Any], key: str) -> bool:
    return _get(raw, key) is not _MISSING
