"""A search-space file's keys parsed into ParamSpecs and checked values, each problem one line
naming the file and the key (ConfigError): `params.<name>` (distribution, bounds, step, log,
choices, `when`), `fixed` and `reference` (flat, or per dataset with a `default`), and every value
against the model argument or training setting it becomes (pipeline/config/arguments.py).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from pipeline.config.arguments import TRAINING_KEYS, value_problem
from pipeline.errors import ConfigError
from pipeline.models import get_model_class
from pipeline.models.builtin import EMBED_DIM, embedding_arguments_of
from pipeline.models.signatures import signature
from pipeline.names import check_name, shown
from pipeline.spaces.space import DISTRIBUTIONS, ParamSpec, _is_number, _is_scalar, _same

SUPPLIED_BY_TRAINER = frozenset({"input_channels", "output_size", "per_step"})
DEFAULT_REFERENCE = "default"
MAX_CHOICES = 1000
_SCALARS = "null, true/false, a finite number or a string"


def _err(path: Path, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: key `{key}`: {msg}")


def _few(items: Any, limit: int = 5) -> str:
    items = list(items)
    return "[" + ", ".join(shown(i) for i in items[:limit]) + (", ..." if len(items) > limit else "") + "]"


def _mapping(path: Path, raw: Any, key: str, what: str) -> dict[str, Any]:
    """`raw` if it is a mapping with string keys (None: empty); else a one-line ConfigError."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _err(path, key, f"expected a mapping of {what}, got {type(raw).__name__}; allowed: `name: ...` lines")
    bad = [k for k in raw if not isinstance(k, str)]
    if bad:
        raise _err(path, key, f"key {shown(bad[0])} is not a name; allowed: a parameter name")
    return raw


def _parse_when(path: Path, key: str, raw: Any, earlier: dict[str, ParamSpec]) -> dict[str, tuple[Any, ...]]:
    when = {}
    for other, allowed in _mapping(path, raw, f"{key}.when", "earlier params to the values they must take").items():
        if other not in earlier:
            raise _err(path, f"{key}.when", f"{shown(other)} must be a param defined above this one; "
                                            f"allowed: {sorted(earlier)}")
        allowed = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if not allowed or len(allowed) > MAX_CHOICES or not all(_is_scalar(a) for a in allowed):
            raise _err(path, f"{key}.when.{other}", f"expected a value or a non-empty list of values; allowed: "
                                                    f"{earlier[other].allowed()}")
        bad = [a for a in allowed if not earlier[other].contains(a)]
        if bad:
            raise _err(path, f"{key}.when.{other}", f"{_few(bad)} not allowed; allowed: {earlier[other].allowed()}")
        when[other] = allowed
    return when


def _parse_choices(path: Path, key: str, raw: Any) -> tuple[Any, ...]:
    if not isinstance(raw, list) or not raw or len(raw) > MAX_CHOICES:
        raise _err(path, f"{key}.choices", f"got {shown(raw)}; allowed: a non-empty list of at most {MAX_CHOICES} values")
    bad = [c for c in raw if not _is_scalar(c)]
    if bad:
        raise _err(path, f"{key}.choices", f"{shown(bad[0])} is not a single value; allowed: {_SCALARS}")
    if any(_same(a, b) for i, a in enumerate(raw) for b in raw[:i]):
        raise _err(path, f"{key}.choices", "a value is listed twice; allowed: distinct values")
    return tuple(raw)


def _parse_range(path: Path, key: str, dist: str, raw: dict[str, Any]) -> tuple[Any, Any, int, bool]:
    low, high = raw.get("low"), raw.get("high")
    if not (_is_number(low) and _is_number(high)) or low >= high:
        raise _err(path, key, f"got low={shown(low)} high={shown(high)}; allowed: finite numbers with low < high")
    if dist == "loguniform" and low <= 0:
        raise _err(path, f"{key}.low", f"got {low}; allowed: low > 0 for loguniform")
    if dist != "int":
        return float(low), float(high), 1, False
    if not (isinstance(low, int) and isinstance(high, int)):
        raise _err(path, key, f"got low={shown(low)} high={shown(high)}; allowed: integer bounds for int")
    step, log = raw.get("step", 1), raw.get("log", False)
    if not isinstance(step, int) or isinstance(step, bool) or step < 1 or (high - low) % step:
        raise _err(path, f"{key}.step", f"{shown(step)} is not allowed; allowed: a positive integer that divides "
                                        f"high - low ({high - low})")
    if not isinstance(log, bool):
        raise _err(path, f"{key}.log", f"{shown(log)} is not allowed; allowed: true or false (unquoted)")
    if log and (step != 1 or low < 1):
        raise _err(path, f"{key}.log", f"got log with low={low} step={step}; allowed: log only with low >= 1 and "
                                       "no step (Optuna samples log-scaled integers in steps of 1)")
    return low, high, step, log


def _parse_param(path: Path, name: str, raw: Any, earlier: dict[str, ParamSpec],
                 arguments: dict[str, inspect.Parameter]) -> ParamSpec:
    key = f"params.{name}"
    if not isinstance(raw, dict) or "distribution" not in raw:
        raise _err(path, key, f"expected a mapping with `distribution`; allowed: {sorted(DISTRIBUTIONS)}")
    dist = raw["distribution"]
    if not isinstance(dist, str) or dist not in DISTRIBUTIONS:
        raise _err(path, f"{key}.distribution", f"got {shown(dist)}; allowed: {sorted(DISTRIBUTIONS)}")
    extra = set(raw) - DISTRIBUTIONS[dist] - {"distribution", "when"}
    if extra:
        raise _err(path, key, f"unknown keys {_few(extra)} for {dist}; allowed: {sorted(DISTRIBUTIONS[dist])} and `when`")
    when = _parse_when(path, key, raw.get("when"), earlier)
    if dist == "categorical":
        choices = _parse_choices(path, key, raw.get("choices"))
        for choice in choices:
            _check_value(path, f"{key}.choices", name, choice, arguments)
        return ParamSpec(name, dist, choices=choices, when=when)
    low, high, step, log = _parse_range(path, key, dist, raw)
    for bound in (low, high):  # a float distribution samples floats: refused for an int argument
        _check_value(path, key, name, bound, arguments)
    return ParamSpec(name, dist, low, high, step=step, log=log, when=when)


def _check_value(path: Path, key: str, name: str, value: Any, arguments: dict[str, inspect.Parameter]) -> None:
    problem = value_problem(name, value, arguments)
    if problem is None and name == EMBED_DIM and value is not None and value < 1:
        problem = f"{shown(value)} is not allowed; allowed: an integer >= 1 or null (the dataset's embedding_size)"
    if problem:
        raise _err(path, key, problem)


def _model_arguments(path: Path, family: str, keys: set[str]) -> dict[str, inspect.Parameter]:
    """The family's model arguments a space may set; unknown keys are refused here.

    A built-in family's come from the table pipeline/models/signatures.json (no torch: a misspelt
    key is refused in well under a second); a user family's from its class, imported."""
    known = signature(family)
    if known is not None:
        class_name, every, representation = known.class_name, known.arguments, known.representation
    else:
        from pipeline.models.base import model_arguments  # late: imports torch

        try:
            model_cls = get_model_class(family)
        except KeyError as exc:
            raise ConfigError(f"{path}: unknown model family {family!r} (the file name); {exc.args[0]}") from None
        class_name, every, representation = model_cls.__name__, model_arguments(model_cls), model_cls.representation
    arguments = {k: p for k, p in every.items() if k not in SUPPLIED_BY_TRAINER}
    arguments.update(embedding_arguments_of(representation))  # embed_dim, for families that can read tokens
    unknown = keys - TRAINING_KEYS - set(arguments)
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys {_few(sorted(unknown))}; allowed: "
            f"training keys {sorted(TRAINING_KEYS)} or {class_name} arguments {sorted(arguments)}"
        )
    return arguments


def _per_dataset(path: Path, raw: Any, key: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(default mapping, {dataset: its mapping merged over the default}) from `reference:` or `fixed:`.

    A flat mapping of values holds for every dataset; a mapping of mappings names datasets, with
    `default` for the others (values are never mappings, so the two forms cannot be confused).
    """
    flat = dict(_mapping(path, raw, key, "names to values, or datasets to such mappings"))
    if not any(isinstance(v, dict) for v in flat.values()):
        return flat, {}
    for name, entry in flat.items():
        if not isinstance(entry, dict):
            raise _err(path, f"{key}.{name}", f"got {shown(entry)} beside per-dataset entries; allowed: the value "
                                              f"under `{key}.{DEFAULT_REFERENCE}` (or under a dataset's entry)")
        if name != DEFAULT_REFERENCE:
            check_name(name, f"{path}: key `{key}.{name}`: the dataset name")
    if DEFAULT_REFERENCE not in flat:
        raise _err(path, key, f"per-dataset entries need a `{DEFAULT_REFERENCE}` entry for the other "
                              f"datasets; got {_few(sorted(flat))}")
    default = dict(_mapping(path, flat[DEFAULT_REFERENCE], f"{key}.{DEFAULT_REFERENCE}", "names to values"))
    merged = {name: {**default, **_mapping(path, entry, f"{key}.{name}", "names to values")}
              for name, entry in flat.items() if name != DEFAULT_REFERENCE}
    return default, merged
