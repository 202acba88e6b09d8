"""Values from YAML checked against what they will be passed to, before anything runs.

A search space's fixed values and choices, and a precompute spec's arguments, become keyword
arguments of a model class (typed: `hidden_size: int = 64`) or training settings. YAML gives
`true` for `yes`, `1` for `1`, and PyYAML gives `.inf`: without a check here a bool becomes a
hidden size of 1, or a `batch_size: 0` fails every trial a minute after the search started.
Only plain annotations (int, float, bool, str and their `| None`) are checked; others pass.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from pipeline.names import shown
from pipeline.config.protocol import TRAINING_KEYS, training_problem

# Training settings: what each allows lives with them (pipeline/config/protocol.py).
MAX_INT = 2**31 - 1  # a size or count passed to torch; beyond it an int64 index would overflow
_PLAIN = {"int": f"an integer of magnitude at most {MAX_INT}", "float": "a finite number", "bool": "true or false", "str": "a string"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float, never a bool (YAML's `yes`) or a string."""
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _fits(kind: str, value: Any) -> bool:
    return {"int": lambda v: _is_int(v) and abs(v) <= MAX_INT, "float": _is_number, "bool": lambda v: isinstance(v, bool),
            "str": lambda v: isinstance(v, str)}[kind](value)


def _plain(annotation: Any) -> tuple[str, bool] | None:
    """('int', optional?) for `int` or `int | None` (as a class or a string under
    `from __future__ import annotations`); None for anything else."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = [p.strip() for p in text.replace("Optional[", "").rstrip("]").split("|")]
    optional = "None" in parts
    kinds = [p for p in parts if p != "None"]
    return (kinds[0], optional) if len(kinds) == 1 and kinds[0] in _PLAIN else None


def argument_problem(parameter: inspect.Parameter, value: Any) -> str | None:
    """What is wrong with `value` for a model's keyword argument `parameter` ("...; allowed: ..."),
    or None when it fits (or the annotation is not a plain one)."""
    plain = _plain(parameter.annotation)
    if plain is None:
        return None
    kind, optional = plain
    if (value is None and optional) or _fits(kind, value):
        return None
    allowed = _PLAIN[kind] + (" or null" if optional else "")
    return f"{shown(value)} is not allowed; allowed: {allowed} (the model's `{parameter.name}: {parameter.annotation}`)"


def value_problem(key: str, value: Any, arguments: dict[str, inspect.Parameter]) -> str | None:
    """`training_problem` for a training key, `argument_problem` for a model argument, else None."""
    if key in TRAINING_KEYS:
        return training_problem(key, value)
    return argument_problem(arguments[key], value) if key in arguments else None
