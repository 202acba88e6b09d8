"""Values a run fixes for a family over its space (`search.fixed` in params.yaml).

A reproduction profile trains a paper's baselines with the paper's own protocol (the CDR-NDE
paper's Table 2: RMSprop, lr 5e-3, batch 256 for every model), which their search spaces, written
for their own papers, do not hold. `fix_values` returns the space as this run searches it: each
value joins the fixed values (every trial trains with it, the reference first), and its key
leaves the searched params and the reference. A param whose `when` names a fixed key is decided by the fixed value: it is
always searched when the value meets its condition (the condition is dropped), never otherwise
(the param and its reference value go), as a sampled key would have decided it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pipeline.spaces.parse import _check_value, _model_arguments
from pipeline.spaces.space import SearchSpace, _same

WHERE = "params.yaml search.fixed"


def fix_values(space: SearchSpace, values: dict[str, Any]) -> tuple[SearchSpace, str | None]:
    """(the space with `values` fixed, one line for the user naming them), or (space, None)."""
    if not values:
        return space, None
    where = Path(f"{WHERE}.{space.family}")
    arguments = _model_arguments(where, space.family, set(values))  # an unknown key: one line, before Ray
    for key, value in values.items():
        _check_value(where, key, key, value, arguments)
    params, reference = {}, {k: v for k, v in space.reference.items() if k not in values}
    for name, spec in space.params.items():
        if name in values:
            continue
        decided = {k: a for k, a in spec.when.items() if k in values}
        if not all(any(_same(values[k], x) for x in allowed) for k, allowed in decided.items()):
            reference.pop(name, None)  # its condition fails on a fixed value: never active
            continue
        when = {k: a for k, a in spec.when.items() if k not in values}
        params[name] = spec if when == spec.when else dataclasses.replace(spec, when=when)
    shown = ", ".join(f"{k} {v}" for k, v in values.items())
    # every trial, the reference first, gets the fixed values (SearchSpace: `_sample` returns them)
    return (dataclasses.replace(space, params=params, fixed={**space.fixed, **values}, reference=reference),
            f"{space.family}: {shown} fixed by params.yaml search.fixed (not searched)")
