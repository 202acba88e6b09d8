"""`ctsweep compare A B`: do two project roots hold the same results? A reproduction check.

It compares, in this order, every JSON file under results/ (sorted by relative path) and
reports/metrics.json, value by value, and names each difference as one line:

    results/japanese_vowels/search/ncde.json: best_config.hidden_channels: 64 (A) vs 128 (B)

Rules, kept simple:
- floats compare bit for bit (float.hex), unless `tolerance` > 0 (absolute, for GPU runs, whose
  kernels need not be deterministic); other numbers, strings, booleans and null by equality;
- lists element-wise (an element one side lacks is a difference), dicts by sorted keys;
- keys of IGNORED are skipped wherever they are: they differ between two honest runs;
- a string that is an absolute path inside its root compares as `<root>/` plus the rest, so
  `/home/a/proj/results/x.json` in A equals `/srv/b/results/x.json` in B;
- a file or key present on one side only is a difference whose other value is MISSING;
- results from different machines (their `machines`, pipeline.runtime.machine) give one
  difference before all the others, naming what differs (CPU, instruction set, versions, device):
  the numbers after it may differ because of the machine, not the code.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from pipeline.errors import MissingInputError
from pipeline.stores.files import read_json
from pipeline.reporting.status import MACHINES
from pipeline.runtime.machine import fingerprint
from pipeline.stores.paths import reports_dir

IGNORED: frozenset[str] = frozenset({
    # MLflow, Ray and Optuna identifiers and locations: fresh ids and folders on every run
    "mlflow_run_id", "mlflow_parent_run_id", "trial_id", "ray_experiment_path", "optuna_storage",
    "optuna_study", "model_uri",
    # wall-clock times: they depend on the machine and its load, not on what was computed
    "seconds_per_epoch", "epoch_seconds", "seconds", "wall_s", "train_seconds",
    # how this run got there (resumed, reused finished seeds, skipped as up to date), not what it got
    "resumed", "reused_seeds", "up_to_date",
    # the stamp of what a record was computed from (pipeline/stores/staleness.py): a final record's
    # includes its search's MLflow run id, new on every run; the inputs themselves are compared
    # through the configurations, seeds and scores the records hold
    "inputs_digest",
})

ROOT_MARK = "<root>"


class _Missing:
    """The value on the side that lacks a file, key or list element."""

    def __repr__(self) -> str:
        return "missing"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Difference:
    """One difference: the file (relative to the root), the dotted key path in it ("" for the
    whole file) and the value in A and in B (MISSING where that side has none)."""

    path: str
    key: str
    a: Any
    b: Any

    def __str__(self) -> str:
        where = f"{self.path}: {self.key}" if self.key else self.path
        return f"{where}: {_show(self.a)} (A) vs {_show(self.b)} (B)"


def _show(value: Any, width: int = 80) -> str:
    """A value as one short line: JSON (floats with every digit), MISSING as `missing`."""
    if value is MISSING:
        return "missing"
    text = repr(value) if isinstance(value, float) else _json(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def compared_files(a: Path, b: Path) -> list[str]:
    """The files to compare, relative to the roots: every results/**/*.json of either root,
    sorted, then reports/metrics.json if either has it. MissingInputError when either root has
    none of them (the wrong folder, or nothing run yet: every file would differ as `missing`), or
    when B is not a folder."""
    a, b = Path(a).resolve(), Path(b).resolve()
    if not b.is_dir():
        raise MissingInputError(f"{b} is not a folder; `ctsweep compare A B` takes two project roots")
    mine, theirs = _files(a), _files(b)
    for root, files in ((a, mine), (b, theirs)):
        if not files:
            raise MissingInputError(
                f"{root} has nothing to compare: no results/**/*.json and no reports/metrics.json; they are "
                f"produced by `ctsweep search`, `ctsweep final` and `ctsweep report` (or `dvc repro`)")
    return sorted(set(mine) | set(theirs), key=_order)


def _files(root: Path) -> list[str]:
    found = [p.relative_to(root).as_posix() for p in (root / "results").rglob("*.json") if p.is_file()]
    if (reports_dir(root) / "metrics.json").is_file():
        found.append("reports/metrics.json")
    return found


def _order(rel: str) -> tuple[bool, str]:
    """results/ first, sorted by relative path; reports/metrics.json last."""
    return (not rel.startswith("results/"), rel)


def compare_runs(a: Path, b: Path, tolerance: float = 0.0) -> list[Difference]:
    """Every difference between the results of project roots `a` and `b`, in file order and, in a
    file, in key order. `tolerance`: the absolute difference up to which two floats count as
    equal; 0.0 (the default) compares them bit for bit, the check for a deterministic rerun on
    CPUs; GPU runs may need e.g. 1e-6. Corrupt JSON raises CorruptInputError naming the file."""
    a, b = Path(a).resolve(), Path(b).resolve()
    files = compared_files(a, b)
    found: list[Difference] = machine_differences(a, b, files)
    for rel in files:
        left, right = _load(a, rel), _load(b, rel)
        if left is MISSING or right is MISSING:
            found.append(Difference(rel, "", left, right))
            continue
        found += [Difference(rel, key, x, y)
                  for key, x, y in _walk(left, right, "", _Roots(a, b), tolerance)]
    return found


def machines(root: Path, files: list[str]) -> dict[str, dict[str, Any]]:
    """Every machine the compared files of `root` record (fingerprint -> description): the search
    and final records' `machines`, metrics.json's `_machines` (pipeline.runtime.machine)."""
    found: dict[str, dict[str, Any]] = {}
    for rel in files:
        content = _load(root, rel)
        held = content.get(MACHINES if rel == "reports/metrics.json" else "machines") \
            if isinstance(content, dict) else None
        if isinstance(held, dict):
            found.update({k: v for k, v in held.items() if isinstance(v, dict)})
        single = content.get("machine") if isinstance(content, dict) else None
        if isinstance(single, dict):  # a record of one process (the classical reference)
            found[fingerprint(single)] = single
    return dict(sorted(found.items()))


def _machine_summary(found: dict[str, dict[str, Any]]) -> str:
    if not found:
        return "none recorded"
    return "; ".join(f"{d.get('cpu')}, {d.get('isa')}, torch {d.get('torch')}, {d.get('device')}"
                     for d in found.values())


def machine_differences(a: Path, b: Path, files: list[str]) -> list[Difference]:
    """One difference, first of all, when the two roots' results come from different machines
    (another CPU, instruction set, library version or device): numbers that differ after it may
    be the machine's doing, not the code's. It names the description keys that differ."""
    ma, mb = machines(a, files), machines(b, files)
    if set(ma) == set(mb):
        return []
    every = [*ma.values(), *mb.values()]
    keys = sorted(k for k in {k for d in every for k in d}
                  if len({json.dumps(d.get(k), sort_keys=True) for d in every}) > 1)
    what = f"another machine (differing: {', '.join(keys)})" if ma and mb else "another machine"
    return [Difference("machine", what, _machine_summary(ma), _machine_summary(mb))]


def _load(root: Path, rel: str) -> Any:
    path = root / rel
    if not path.is_file():
        return MISSING
    producer = "ctsweep report" if rel.startswith("reports/") else f"ctsweep {Path(rel).parent.name}"
    return read_json(path, producer)


@dataclass(frozen=True)
class _Roots:
    """The two roots as path prefixes, for strings that are absolute paths inside them."""

    a: Path
    b: Path

    def relative(self, value: str, side: str) -> str:
        root = str(self.a if side == "a" else self.b)
        if os.path.isabs(value) and (value == root or value.startswith(root.rstrip(os.sep) + os.sep)):
            return ROOT_MARK + value[len(root):]
        return value


def _walk(x: Any, y: Any, key: str, roots: _Roots, tolerance: float) -> Iterator[tuple[str, Any, Any]]:
    """(key path, value in A, value in B) for each difference below `key`, in order."""
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if k in IGNORED:
                continue
            sub = f"{key}.{k}" if key else str(k)
            yield from _walk(x.get(k, MISSING), y.get(k, MISSING), sub, roots, tolerance)
    elif isinstance(x, list) and isinstance(y, list):
        for i in range(max(len(x), len(y))):
            yield from _walk(x[i] if i < len(x) else MISSING, y[i] if i < len(y) else MISSING,
                             f"{key}[{i}]", roots, tolerance)
    elif not _same(x, y, roots, tolerance):
        yield key, x, y


def _same(x: Any, y: Any, roots: _Roots, tolerance: float) -> bool:
    """Whether two leaves (or a leaf and a container, or MISSING) are equal under the rules."""
    if x is MISSING or y is MISSING:
        return x is y
    if isinstance(x, str) and isinstance(y, str):
        return roots.relative(x, "a") == roots.relative(y, "b")
    if type(x) in (int, float) and type(y) in (int, float):
        if tolerance > 0:
            return (math.isnan(x) and math.isnan(y)) or x == y or abs(x - y) <= tolerance
        if isinstance(x, float) and isinstance(y, float):
            return x.hex() == y.hex()  # bit for bit: -0.0 differs from 0.0, NaN equals NaN
        return type(x) is type(y) and x == y
    return type(x) is type(y) and x == y
