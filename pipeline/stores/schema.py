"""The fields each stage reads from an earlier stage's JSON output, checked when it is read.

A result file can be cut short (a full disk, a killed copy) or edited by hand. Reading it
unchecked ends in a KeyError or TypeError deep inside a stage; checked, it is one line naming
the file, the field and the command that rebuilds it (pipeline.stores.files.corrupt). Each reader checks
only what it uses, so hand-made records in tests and older files keep working.

A spec is plain data:

    str, int, (int, float), ...   isinstance (a bool is never taken for a number)
    {"key": spec, "opt?": spec}   an object with these keys ("?": may be absent); "*": every other key
    ListOf(spec, min_len)         a list whose every item matches
    MapOf(spec)                   an object with any keys, every value matching
    OneOf("max", "min")           one of these values
    Maybe(spec)                   null or spec
    Switch("status", {"failed": spec}, default)
                                  an object checked against the spec its "status" names (else default)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.stores.files import corrupt, read_json
from pipeline.names import shown


@dataclass(frozen=True)
class ListOf:
    """A list of at least `min_len` items, each matching `item`."""

    item: Any
    min_len: int = 0


@dataclass(frozen=True)
class MapOf:
    """An object with any keys, each value matching `value`."""

    value: Any


@dataclass(frozen=True)
class Maybe:
    """null, or a value matching `spec`."""

    spec: Any


@dataclass(frozen=True)
class Switch:
    """An object checked against `cases[value[key]]`, or against `default` when that key is absent
    or names no case: a record whose fields depend on its kind ("ok" or "failed")."""

    key: str
    cases: dict[str, Any]
    default: Any


class OneOf:
    """One of the given values (compared with ==)."""

    def __init__(self, *values: Any) -> None:
        self.values = values


NUMBER = (int, float)
NULL = type(None)
_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "an object",
          list: "a list", type(None): "null"}


def problem(value: Any, spec: Any, where: str = "") -> str | None:
    """The first way `value` fails `spec` ("best_config.lr is a string, expected a number"), or None."""
    if isinstance(spec, Maybe):
        return None if value is None else problem(value, spec.spec, where)
    if isinstance(spec, OneOf):
        allowed = list(spec.values)
        return None if value in allowed else f"{where or 'the value'} is {shown(value)}, expected one of {allowed}"
    if isinstance(spec, Switch):
        return _switch(value, spec, where)
    if isinstance(spec, dict):
        return _object(value, spec, where)
    if isinstance(spec, ListOf):
        return _list(value, spec, where)
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            return _wrong(value, "an object", where)
        return _first(problem(v, spec.value, _at(where, k)) for k, v in value.items())
    types = spec if isinstance(spec, tuple) else (spec,)
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        return _wrong(value, _expected(types), where)
    return None


def _expected(types: tuple[type, ...]) -> str:
    if float in types:  # an integer is a number too
        types = tuple(t for t in types if t is not int)
    return " or ".join(_NAMES.get(t, t.__name__) for t in types)


def _object(value: Any, spec: dict[str, Any], where: str) -> str | None:
    if not isinstance(value, dict):
        return _wrong(value, "an object", where)
    for key, sub in spec.items():
        name, optional = key.rstrip("?"), key.endswith("?")
        if name == "*":
            named = {k.rstrip("?") for k in spec}
            found = _first(problem(v, sub, _at(where, k)) for k, v in value.items() if k not in named)
        elif name not in value:
            found = None if optional else f"missing key {_at(where, name)!r}"
        else:
            found = problem(value[name], sub, _at(where, name))
        if found:
            return found
    return None


def _switch(value: Any, spec: Switch, where: str) -> str | None:
    if not isinstance(value, dict):
        return _wrong(value, "an object", where)
    tag = value.get(spec.key)
    chosen = spec.cases[tag] if isinstance(tag, str) and tag in spec.cases else spec.default
    return problem(value, chosen, where)


def _list(value: Any, spec: ListOf, where: str) -> str | None:
    if not isinstance(value, list):
        return _wrong(value, "a list", where)
    if len(value) < spec.min_len:
        return f"{where or 'the list'} has {len(value)} items, expected at least {spec.min_len}"
    return _first(problem(v, spec.item, f"{where}[{i}]") for i, v in enumerate(value))


def _first(problems: Any) -> str | None:
    return next((p for p in problems if p), None)


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def _wrong(value: Any, expected: str, where: str) -> str:
    kind = _NAMES.get(type(value), type(value).__name__)
    if isinstance(value, (str, int, float)):
        kind += f" ({shown(value)})"
    return f"{where or 'the file'} is {kind}, expected {expected}"


def read_record(path: Path, producer: str, spec: Any) -> dict[str, Any]:
    """Read a JSON result and check the fields the caller uses; CorruptInputError names the file,
    the first bad field and `producer`, the command that writes the file again."""
    data = read_json(path, producer)
    why = problem(data, spec)
    if why is not None:
        raise corrupt(path, why, producer)
    return data


# ------------------------------------------------------------------------ what each reader uses

MODE = OneOf("max", "min")
CONFIG = {"lr": NUMBER}  # every search space searches a learning rate

SCALAR = (str, int, float, bool, NULL)
# The searched keys' ranges as the search space gave them (the "space" of an ok search record).
SPACE = MapOf(Switch("type", {"categorical": {"type": OneOf("categorical"), "choices": ListOf(SCALAR, min_len=1)}},
                     {"type": OneOf("float", "int", "categorical"), "low": NUMBER, "high": NUMBER, "log": bool,
                      "step?": int}))
STATUS = OneOf("ok", "failed")  # a record without "status" predates it: ok

# A search whose every trial failed: what it tried and why it failed, no configuration.
SEARCH_FAILED = {"status": OneOf("failed"), "metric": str, "mode": MODE, "n_trials": int, "n_failed": int,
                 "best_config": NULL, "best_val": NULL, "errors": ListOf(str)}
# `repeats` (search.repeats > 1): each repeat's outcome; the final stage trains every ok repeat's best.
_REPEAT = Switch("status", {"failed": {"repeat": int, "status": OneOf("failed"), "trial_seed": int}},
                 {"repeat": int, "status": OneOf("ok"), "best_config": CONFIG, "trial_seed": int})
SEARCH_OK_FOR_FINAL = {"status?": STATUS, "metric": str, "mode": MODE, "best_config": CONFIG, "trial_seed": int,
                       "n_trials": int, "n_failed": int, "space?": SPACE, "repeats?": ListOf(_REPEAT, min_len=1)}
SEARCH_FOR_FINAL = Switch("status", {"failed": SEARCH_FAILED}, SEARCH_OK_FOR_FINAL)

_IMPORTANCE = {"evaluator?": str, "*": {"n_trials": int, "values": Maybe(MapOf(NUMBER)), "reason?": Maybe(str)}}
SEARCH_FOR_REPORT = {"trials": ListOf({"config": CONFIG, "best_val": Maybe(NUMBER)}),
                     "importance?": Maybe(_IMPORTANCE), "optuna_study?": Maybe(str), "status?": STATUS,
                     "space?": SPACE}

_SCORES = {"val": NUMBER, "test": NUMBER}
# Where the data falls short of the publisher's (pipeline/data/provenance.py): a final record's
# field and an MLflow tag of every run made from such data; absent when the data is as published.
DATA_PROVENANCE = "data_provenance"
_FINAL_COMMON = {"metric": str, "mode": MODE, "config": CONFIG, "n_seeds": int,
                 "val_mean": NUMBER, "val_std": NUMBER, "test_mean": NUMBER, "test_std": NUMBER,
                 "mlflow_parent_run_id?": Maybe(str), DATA_PROVENANCE + "?": str}
FINAL_FOR_REPORT = {**_FINAL_COMMON, "params": int, "seconds_per_epoch": NUMBER, "n_trials": int, "n_failed": int,
                    "seeds": ListOf({**_SCORES, "curve": ListOf(NUMBER)}, min_len=1),
                    "robustness?": ListOf({"lr_factor": NUMBER, "lr": NUMBER, "val_mean": NUMBER, "val_std": NUMBER})}
FINAL_FOR_PROMOTE = {**_FINAL_COMMON, "dataset": str, "family": str, "model_uri": str, "model_seed": int,
                     "seeds": ListOf(_SCORES, min_len=1)}
