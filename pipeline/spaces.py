"""Search spaces: YAML data compiled to an Optuna define-by-run function for OptunaSearch.

    search_spaces/<family>.yaml
        reference:  the paper's configuration, evaluated first (active params only)
        params:     name -> {distribution: loguniform|uniform|int|categorical, low, high,
                             step, choices, when: {other_param: value or [values]}}
        fixed:      name -> value, passed as is

Every key is a training key (TRAINING_KEYS) or a keyword argument of the family's model class.
Unknown keys, out-of-range reference values and a learning rate that is not log-uniform are
errors naming the file and the key, raised before Ray starts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna

from pipeline.config import read_yaml
from pipeline.errors import ConfigError
from pipeline.models import get_model_class
from pipeline.models.base import model_arguments

TRAINING_KEYS = frozenset({"lr", "batch_size", "weight_decay", "grad_clip"})
SUPPLIED_BY_TRAINER = frozenset({"input_channels", "output_size", "per_step"})
DISTRIBUTIONS = {
    "loguniform": {"low", "high"},
    "uniform": {"low", "high"},
    "int": {"low", "high", "step", "log"},
    "categorical": {"choices"},
}
_TOP_KEYS = {"reference", "params", "fixed"}


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
        return all(chosen.get(k) in allowed for k, allowed in self.when.items())

    def contains(self, value: Any) -> bool:
        if self.distribution == "categorical":
            return value in self.choices
        if self.distribution == "int" and (not isinstance(value, int) or (value - self.low) % self.step):
            return False
        return isinstance(value, (int, float)) and self.low <= value <= self.high

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.distribution == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.distribution == "int":
            step = 1 if self.log else self.step  # Optuna forbids step with log
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=step, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.distribution == "loguniform")

    def allowed(self) -> str:
        if self.distribution == "categorical":
            return f"one of {list(self.choices)}"
        return f"{self.distribution} in [{self.low}, {self.high}]"


@dataclass(frozen=True)
class SearchSpace:
    family: str
    params: dict[str, ParamSpec]
    fixed: dict[str, Any]
    reference: dict[str, Any]
    path: Path

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


def _parse_param(path: Path, name: str, raw: Any, earlier: dict[str, ParamSpec]) -> ParamSpec:
    key = f"params.{name}"
    if not isinstance(raw, dict) or "distribution" not in raw:
        raise _err(path, key, f"expected a mapping with `distribution` ({sorted(DISTRIBUTIONS)})")
    dist = raw["distribution"]
    if dist not in DISTRIBUTIONS:
        raise _err(path, f"{key}.distribution", f"got {dist!r}; allowed: {sorted(DISTRIBUTIONS)}")
    extra = set(raw) - DISTRIBUTIONS[dist] - {"distribution", "when"}
    if extra:
        raise _err(path, key, f"unknown keys {sorted(extra)} for {dist}; allowed: {sorted(DISTRIBUTIONS[dist])} and `when`")
    when = {}
    for other, allowed in (raw.get("when") or {}).items():
        if other not in earlier:
            raise _err(path, f"{key}.when", f"`{other}` must be a param defined above {name!r}")
        allowed = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        bad = [a for a in allowed if not earlier[other].contains(a)]
        if bad:
            raise _err(path, f"{key}.when.{other}", f"{bad} not allowed: {earlier[other].allowed()}")
        when[other] = allowed
    if dist == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise _err(path, f"{key}.choices", "expected a non-empty list")
        return ParamSpec(name, dist, choices=tuple(choices), when=when)
    low, high = raw.get("low"), raw.get("high")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or low >= high:
        raise _err(path, key, f"needs numeric low < high, got low={low!r} high={high!r}")
    if dist == "loguniform" and low <= 0:
        raise _err(path, f"{key}.low", f"loguniform needs low > 0, got {low}")
    if dist == "int" and not (isinstance(low, int) and isinstance(high, int)):
        raise _err(path, key, f"int needs integer bounds, got low={low!r} high={high!r}")
    return ParamSpec(name, dist, float(low) if dist != "int" else low, float(high) if dist != "int" else high,
                     step=int(raw.get("step", 1)), log=bool(raw.get("log", False)), when=when)


def _check_keys(path: Path, family: str, keys: set[str]) -> None:
    try:
        model_cls = get_model_class(family)
    except KeyError as exc:
        raise ConfigError(f"{path}: unknown model family {family!r} (the file name); {exc.args[0]}") from None
    model_keys = set(model_arguments(model_cls)) - SUPPLIED_BY_TRAINER
    unknown = keys - TRAINING_KEYS - model_keys
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys {sorted(unknown)}; allowed: training keys {sorted(TRAINING_KEYS)} "
            f"or {model_cls.__name__} arguments {sorted(model_keys)}"
        )


def _check_reference(path: Path, space: SearchSpace) -> None:
    chosen: dict[str, Any] = {}
    for spec in space.params.values():
        if not spec.active(chosen):
            if spec.name in space.reference:
                raise _err(path, f"reference.{spec.name}", f"set, but inactive given {spec.when}")
            continue
        if spec.name not in space.reference:
            raise _err(path, f"reference.{spec.name}", "missing; the reference must set every active param")
        value = space.reference[spec.name]
        if not spec.contains(value):
            raise _err(path, f"reference.{spec.name}", f"{value!r} lies outside the space: {spec.allowed()}")
        chosen[spec.name] = value
    extra = set(space.reference) - set(space.params)
    if extra:
        raise _err(path, "reference", f"{sorted(extra)} are not searched params (fixed values go under `fixed`)")


def load_space(path: str | Path, family: str | None = None) -> SearchSpace:
    """Read and validate a search-space file; the family defaults to the file's stem."""
    path = Path(path)
    family = family or path.stem
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with keys {sorted(_TOP_KEYS)}")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown top-level keys {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    params: dict[str, ParamSpec] = {}
    for name, spec in (raw.get("params") or {}).items():
        params[name] = _parse_param(path, name, spec, params)
    fixed = dict(raw.get("fixed") or {})
    reference = dict(raw.get("reference") or {})
    clash = set(fixed) & set(params)
    if clash:
        raise ConfigError(f"{path}: keys {sorted(clash)} are both searched and fixed")
    if "lr" not in params or params["lr"].distribution != "loguniform":
        raise _err(path, "params.lr", "the learning rate must be searched with distribution: loguniform")
    if "batch_size" not in params and "batch_size" not in fixed:
        raise _err(path, "fixed.batch_size", "batch_size must be searched or fixed")
    _check_keys(path, family, set(params) | set(fixed))
    space = SearchSpace(family, params, fixed, reference, path)
    _check_reference(path, space)
    return space


def space_path(root: Path, family: str) -> Path:
    return root / "search_spaces" / f"{family}.yaml"
