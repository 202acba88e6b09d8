"""A search space in memory: its params (ParamSpec: a distribution, its bounds or choices, a
`when` condition) and the space (SearchSpace: params, fixed values and the reference, per
dataset where the file gives them), compiled to the define-by-run function OptunaSearch calls.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pipeline.config.arguments import TRAINING_KEYS

if TYPE_CHECKING:  # only trials use optuna: a space file is read and checked without it (CLI start-up)
    import optuna

DISTRIBUTIONS = {
    "loguniform": {"low", "high"},
    "uniform": {"low", "high"},
    "int": {"low", "high", "step", "log"},
    "categorical": {"choices"},
}


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

    def clip_batch(self, n_train: int, dataset: str) -> tuple[SearchSpace, str | None]:
        """The space with every `batch_size` above the training split's `n_train` series lowered to
        it (issue 29: a batch never exceeds the split; choices that collapse onto it become one),
        and one line saying what changed, or None when nothing did."""
        def clip(v: Any) -> Any:
            return min(v, n_train) if _is_number(v) else v

        key, changed = "batch_size", []
        params, fixed, reference = dict(self.params), dict(self.fixed), dict(self.reference)
        spec = params.get(key)
        if spec is not None and spec.distribution == "categorical" and any(clip(c) != c for c in spec.choices):
            above = [c for c in spec.choices if clip(c) != c]
            changed.append(f"{', '.join(map(str, above))} (of choices {list(spec.choices)})")
            params[key] = dataclasses.replace(spec, choices=tuple(dict.fromkeys(clip(c) for c in spec.choices)))
        elif spec is not None and spec.distribution == "int" and spec.high > n_train:
            changed.append(f"up to {spec.high:g} of range [{spec.low:g}, {spec.high:g}]")
            low = min(spec.low, n_train)
            params[key] = dataclasses.replace(spec, low=low, high=low + (n_train - low) // spec.step * spec.step)
        for where, values in (("fixed", fixed), ("reference", reference)):
            if key in values and clip(values[key]) != values[key]:
                changed.append(f"{where} {values[key]}")
                values[key] = clip(values[key])
        if not changed:
            return self, None
        note = (f"{self.family}: batch_size {'; '.join(changed)} above the {n_train} training series of {dataset}: "
                f"trained as {n_train} (one step per pass over the split)")
        return dataclasses.replace(self, params=params, fixed=fixed, reference=reference), note

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
