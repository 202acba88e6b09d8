"""Search spaces: YAML data compiled to an Optuna define-by-run function for OptunaSearch.

    search_spaces/<family>.yaml
        reference:  the paper's configuration, evaluated first (active params only); or, where
                    the paper's differs by dataset, {default: {...}, <dataset>: {...}, ...}
                    with each dataset's entry merged over `default`
        params:     name -> {distribution: loguniform|uniform|int|categorical, low, high,
                             step, log, choices, when: {other_param: value or [values]}}
        fixed:      name -> value, passed as is; or per dataset, as for `reference` (a class
                    weight for one dataset, say)

Every key is a training key (TRAINING_KEYS, pipeline/protocol.py) or a keyword argument of the
family's model class. A training key that only some optimisers or schedules use must be fixed
with them or searched under a `when` on them (`momentum: {..., when: {optimizer: rmsprop}}`).
Parsing is strict, and every error is one line naming the file, the key and what is allowed,
raised before Ray starts: unknown keys, a family name (the file's stem) that is not an
identifier, `step` that is not a positive integer dividing high - low (or given with `log`,
which Optuna refuses), `log` that is not true/false, non-finite bounds, empty or non-scalar
choices, a `when`/`params`/`fixed`/`reference` that is not a mapping, out-of-range reference
values, a learning rate that is not log-uniform, and values of the wrong type for the model
argument or training setting they become (pipeline/arguments.py): `batch_size: 0` fails here,
not in every trial a minute later.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna

from pipeline.arguments import TRAINING_KEYS, value_problem
from pipeline.config import read_yaml
from pipeline.errors import ConfigError
from pipeline.models import get_model_class
from pipeline.models.base import model_arguments
from pipeline.models.embedding import EMBED_DIM, embedding_arguments
from pipeline.names import check_name, shown
from pipeline.protocol import DEFAULTS, NEEDS, REQUIRES, combination_problem, dataset_problem

SUPPLIED_BY_TRAINER = frozenset({"input_channels", "output_size", "per_step"})
DISTRIBUTIONS = {
    "loguniform": {"low", "high"},
    "uniform": {"low", "high"},
    "int": {"low", "high", "step", "log"},
    "categorical": {"choices"},
}
_TOP_KEYS = ("reference", "params", "fixed")
DEFAULT_REFERENCE = "default"
_DATASET_KEYS = ("pos_weight", "class_weight", "embed_dropout", "lr_step_epoch")  # checked per dataset
MAX_CHOICES = 1000
_SCALARS = "null, true/false, a finite number or a string"

__all__ = ["ParamSpec", "SearchSpace", "TRAINING_KEYS", "load_space", "space_path", "split_config"]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind: YAML's `true` is not the choice `1`, nor `1` the choice `true`."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, str)) or _is_number(value)


@dataclass(frozen=True)
class ParamSpec:
    name: str
    distribution: str
    low: float | None = None
    high: float | None = None
    step: int = 1
    log: bool = False
    choices: tuple[Any, ...] = ()
    when: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def active(self, chosen: dict[str, Any]) -> bool:
        return all(any(_same(chosen.get(k), a) for a in allowed) for k, allowed in self.when.items())

    def contains(self, value: Any) -> bool:
        if self.distribution == "categorical":
            return any(_same(value, c) for c in self.choices)
        if not _is_number(value):
            return False
        if self.distribution == "int" and (not isinstance(value, int) or (value - self.low) % self.step):
            return False
        return self.low <= value <= self.high

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.distribution == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.distribution == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=self.step, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.distribution == "loguniform")

    def allowed(self) -> str:
        if self.distribution == "categorical":
            return f"one of {list(self.choices)}"
        step = f" in steps of {self.step}" if self.step != 1 else ""
        return f"{self.distribution} in [{self.low}, {self.high}]{step}"


@dataclass(frozen=True)
class SearchSpace:
    family: str
    params: dict[str, ParamSpec]
    fixed: dict[str, Any]  # the default fixed values
    reference: dict[str, Any]  # the default reference
    path: Path
    references: dict[str, dict[str, Any]] = field(default_factory=dict)  # per dataset, default merged in
    fixed_by_dataset: dict[str, dict[str, Any]] = field(default_factory=dict)  # likewise

    def reference_for(self, dataset: str) -> dict[str, Any]:
        """The reference configuration evaluated first when searching `dataset`."""
        return self.references.get(dataset, self.reference)

    def for_dataset(self, dataset: str) -> SearchSpace:
        """The space as searched on `dataset`: its own fixed values and reference, no other dataset's."""
        return dataclasses.replace(self, fixed=self.fixed_by_dataset.get(dataset, self.fixed),
                                   reference=self.reference_for(dataset), references={}, fixed_by_dataset={})

    def define_by_run(self) -> Callable[[optuna.Trial], dict[str, Any]]:
        """The function OptunaSearch calls per trial (picklable: Tune checkpoints the searcher)."""
        return functools.partial(_sample, self)


def _sample(space: SearchSpace, trial: optuna.Trial) -> dict[str, Any]:
    """Suggest every active param in file order; return the fixed values as Tune constants."""
    chosen: dict[str, Any] = {}
    for spec in space.params.values():
        if spec.active(chosen):
            chosen[spec.name] = spec.suggest(trial)
    return dict(space.fixed)


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A full config -> (training settings, model keyword arguments)."""
    train = {k: v for k, v in config.items() if k in TRAINING_KEYS}
    model = {k: v for k, v in config.items() if k not in TRAINING_KEYS}
    return train, model


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
    """The family's model arguments a space may set; unknown keys are refused here."""
    try:
        model_cls = get_model_class(family)
    except KeyError as exc:
        raise ConfigError(f"{path}: unknown model family {family!r} (the file name); {exc.args[0]}") from None
    arguments = {k: p for k, p in model_arguments(model_cls).items() if k not in SUPPLIED_BY_TRAINER}
    arguments.update(embedding_arguments(model_cls))  # embed_dim, for families that can read tokens
    unknown = keys - TRAINING_KEYS - set(arguments)
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys {_few(sorted(unknown))}; allowed: "
            f"training keys {sorted(TRAINING_KEYS)} or {model_cls.__name__} arguments {sorted(arguments)}"
        )
    return arguments


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


def _possible(name: str, params: dict[str, ParamSpec], fixed: dict[str, Any]) -> tuple[Any, ...]:
    """The values a key can take in this space: its fixed value, its choices, or its default."""
    if name in fixed:
        return (fixed[name],)
    if name in params:
        return params[name].choices if params[name].distribution == "categorical" else ()
    return (DEFAULTS[name],) if name in DEFAULTS else ()


def _check_protocol(path: Path, params: dict[str, ParamSpec], fixed: dict[str, Any]) -> None:
    """Training keys that need a given optimiser or schedule appear only with it, and a
    schedule's own keys are there whenever it can be chosen (pipeline/protocol.py)."""
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
    schedule's epoch beyond `epochs` (pipeline/protocol.dataset_problem)."""
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


def load_space(path: str | Path, family: str | None = None) -> SearchSpace:
    """Read and validate a search-space file; the family defaults to the file's stem."""
    path = Path(path)
    family = check_name(family if family is not None else path.stem, f"{path}: the family name")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with keys {list(_TOP_KEYS)}, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in _TOP_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown top-level keys {_few(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    raw_params = _mapping(path, raw.get("params"), "params", "param names to distributions")
    fixed, fixed_by = _per_dataset(path, raw.get("fixed"), "fixed")
    reference, reference_by = _per_dataset(path, raw.get("reference"), "reference")
    variants = {None: fixed, **fixed_by}  # None: the default
    for name, values in variants.items():
        clash = set(values) & set(raw_params)
        if clash:
            where = "fixed" if name is None else f"fixed.{name}"
            raise ConfigError(f"{path}: keys {_few(sorted(clash))} are both searched and fixed ({where}); "
                              "allowed: one or the other")
    arguments = _model_arguments(path, family, set(raw_params).union(*variants.values()))
    params: dict[str, ParamSpec] = {}
    for name, spec in raw_params.items():
        params[name] = _parse_param(path, name, spec, params, arguments)
    for variant, values in variants.items():
        prefix = "fixed" if variant is None else f"fixed.{variant}"
        for name, value in values.items():
            _check_value(path, f"{prefix}.{name}", name, value, arguments)
        _check_protocol(path, params, values)
        if "batch_size" not in params and "batch_size" not in values:
            raise _err(path, f"{prefix}.batch_size", "batch_size must be searched or fixed")
    if "lr" not in params or params["lr"].distribution != "loguniform":
        raise _err(path, "params.lr", "the learning rate must be searched with distribution: loguniform")
    space = SearchSpace(family, params, fixed, reference, path,
                        {d: reference_by.get(d, reference) for d in set(reference_by) | set(fixed_by)},
                        {d: fixed_by.get(d, fixed) for d in set(reference_by) | set(fixed_by)})
    for dataset in [None, *space.references]:
        resolved = space if dataset is None else space.for_dataset(dataset)
        key = "reference" if dataset is None else f"reference.{dataset}"
        _check_reference(path, resolved, resolved.reference, "reference.default" if reference_by and dataset is None
                         else key)
    return space


def space_path(root: Path, family: str) -> Path:
    """search_spaces/<family>.yaml, or the `space` a user family's params.yaml entry gives."""
    from pipeline.families.user import source_of

    source = source_of(family)
    if source is not None and source.space is not None:
        return Path(source.space)
    return root / "search_spaces" / f"{family}.yaml"
