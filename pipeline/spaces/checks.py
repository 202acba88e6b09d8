"""Checks across a space's keys: the reference lies inside the space and sets every active param;
training keys that need an optimiser or schedule appear only with it (pipeline/config/protocol.py);
and, per dataset, the keys that dataset or its epoch budget cannot use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config.protocol import DEFAULTS, NEEDS, REQUIRES, combination_problem, dataset_problem
from pipeline.models.builtin import EMBED_DIM
from pipeline.names import shown
from pipeline.spaces.parse import _err, _few
from pipeline.spaces.space import ParamSpec, SearchSpace

_DATASET_KEYS = ("pos_weight", "class_weight", "embed_dropout", "lr_step_epoch")  # checked per dataset


def _check_reference(path: Path, space: SearchSpace, reference: dict[str, Any], key: str) -> None:
    chosen: dict[str, Any] = {}
    for spec in space.params.values():
        if not spec.active(chosen):
            if spec.name in reference:
                raise _err(path, f"{key}.{spec.name}", f"set, but inactive given {spec.when}")
            continue
        if spec.name not in reference:
            raise _err(path, f"{key}.{spec.name}", "missing; the reference must set every active param")
        value = reference[spec.name]
        if not spec.contains(value):
            raise _err(path, f"{key}.{spec.name}", f"{shown(value)} lies outside the space: {spec.allowed()}")
        chosen[spec.name] = value
    extra = set(reference) - set(space.params)
    if extra:
        raise _err(path, key, f"{_few(sorted(extra))} are not searched params (fixed values go under `fixed`)")
    bad = combination_problem({**space.fixed, **reference})
    if bad:
        raise _err(path, f"{key}.{bad[0]}", bad[1])


def _possible(name: str, params: dict[str, ParamSpec], fixed: dict[str, Any]) -> tuple[Any, ...]:
    """The values a key can take in this space: its fixed value, its choices, or its default."""
    if name in fixed:
        return (fixed[name],)
    if name in params:
        return params[name].choices if params[name].distribution == "categorical" else ()
    return (DEFAULTS[name],) if name in DEFAULTS else ()


def _check_protocol(path: Path, params: dict[str, ParamSpec], fixed: dict[str, Any]) -> None:
    """Training keys that need a given optimiser or schedule appear only with it, and a
    schedule's own keys are there whenever it can be chosen (pipeline/config/protocol.py)."""
    for key, (other, values) in REQUIRES.items():
        where = f"params.{key}" if key in params else f"fixed.{key}"
        if key not in params and key not in fixed:
            continue
        if other in params:
            when = params[key].when.get(other) if key in params else None
            if when is None or not set(when) <= set(values):
                raise _err(path, where, f"applies only with {other} in {list(values)}, but {other} is searched; "
                                        f"allowed: a param with `when: {{{other}: {list(values)}}}`")
        elif _possible(other, params, fixed)[0] not in values:
            raise _err(path, where, f"applies only with {other} in {list(values)}; {other} is "
                                    f"{_possible(other, params, fixed)[0]!r} here")
    for schedule in _possible("lr_schedule", params, fixed):
        for group in NEEDS.get(schedule, ()):
            given = [k for k in group if k in fixed or (k in params and schedule in
                                                        params[k].when.get("lr_schedule", (schedule,)))]
            if len(given) != 1:
                what = "missing" if not given else f"both {given} are set"
                raise _err(path, f"params.{group[0]}" if group[0] in params else f"fixed.{group[0]}",
                           f"{what}: lr_schedule {schedule!r} needs {' or '.join(group)}")


def check_for_dataset(space: SearchSpace, dataset: str, task: str, has_embedding: bool, epochs: int) -> None:
    """Refuse, before Ray starts, training keys this dataset or budget cannot use: a class weight
    on regression, a positive weight off binary tasks, embedding dropout without tokens, a step
    schedule's epoch beyond `epochs` (pipeline/config/protocol.py dataset_problem)."""
    reference = space.reference_for(dataset)
    for key in _DATASET_KEYS:
        if key in space.fixed:
            where, values = f"fixed.{key}", [space.fixed[key]]
        elif key in space.params:
            spec = space.params[key]
            where, values = f"params.{key}", list(spec.choices) if spec.choices else [spec.low, spec.high]
        else:
            continue
        problem = dataset_problem(key, values + ([reference[key]] if key in reference else []), task,
                                  has_embedding, epochs)
        if problem:
            raise _err(space.path, where, f"{problem} (dataset {dataset})")
    if not has_embedding:
        for where, given in (("fixed", space.fixed), ("params", space.params), ("reference", reference)):
            if EMBED_DIM in given:
                raise _err(space.path, f"{where}.{EMBED_DIM}", f"sizes a token embedding but this dataset's inputs "
                                                               f"are not tokens; allowed: only on token datasets "
                                                               f"(dataset {dataset})")
    for key in set(reference) & set(_DATASET_KEYS) - set(space.fixed) - set(space.params):
        problem = dataset_problem(key, [reference[key]], task, has_embedding, epochs)
        if problem:
            raise _err(space.path, f"reference.{key}", f"{problem} (dataset {dataset})")


def patience_note(space: SearchSpace, epochs: int, where: str) -> str | None:
    """One line when the space's `patience` can exceed a search's `epochs`: it then never stops a
    trial of this search (a short search of a paper's protocol, whose final stage trains long
    enough, is fine); None otherwise. The final stage refuses a patience above its own epochs."""
    if "patience" in space.fixed:
        values = [space.fixed["patience"]]
    elif "patience" in space.params:
        spec = space.params["patience"]
        values = list(spec.choices) if spec.choices else [spec.high]
    else:
        return None
    longest = max((v for v in values if isinstance(v, int)), default=0)
    if longest <= epochs:
        return None
    return (f"{space.family}: patience {longest} ({where}) is more than search.epochs ({epochs}): it never stops a "
            f"trial of this search; the final stage applies it, and refuses it above final.epochs")
