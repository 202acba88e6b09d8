"""The pieces every params.yaml schema shares: strict models, names and seeds.

pipeline/config/params.py (the stages' sections) and pipeline/config/datasets.py (the `prepare` kinds)
build on these, so both parse the same way: no coercion, finite floats, identifiers as names.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from pipeline import names

MAX_EPOCHS = 100_000  # the most epochs any stage may train: search.epochs, final.epochs, a space's patience
# the highest step floor (search.min_steps, final.min_steps, final.cells' min_steps): a typo cannot ask
# for 10^12 optimiser steps (issue 29)
MAX_STEPS = 10_000_000


class _Strict(BaseModel):
    # extra="forbid": a misspelt key must fail, not be silently ignored. strict: no bool-as-int,
    # no string-as-bool or string-as-number coercion. allow_inf_nan=False: every float is finite.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def _name(value: Any) -> Any:
    # Before any other use of a dataset or family name (it becomes a path, an experiment, a model).
    if not names.is_name(value):
        raise ValueError(f"{names.shown(value)} is not a valid name; allowed: {names.ALLOWED}")
    return value


Name = Annotated[str, BeforeValidator(_name)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1, description="a seed: 0 to 2^32 - 1 (numpy's range)")]


def _few(items: list[Any], limit: int = 5) -> str:
    """A list echoed in an error: at most `limit` items, each shortened."""
    head = ", ".join(names.shown(i) for i in items[:limit])
    return f"[{head}{', ...' if len(items) > limit else ''}]"
