"""A space as searched on a per-step task: no configuration in it reads later steps (issue 30).

On a task with a prediction per step (dataset Meta.per_step: walker2d, whose target of step i is
the input of step i + 1; sepsis_hourly; person_activity), a family's output at step i must read
no input after step i. Where a family offers a causal variant of a configuration
(SequenceModel.causal_arguments, pipeline/models/base.py: a CDE's `interpolation: hermite_causal`
in place of cubic or hermite, CDR-NDE's Euler depth solver in place of dopri5), every value of
the space that reads later steps becomes its causal one: the fixed values, the reference, and
each categorical choice (choices that collapse onto one become one). A family with no causal
variant (CDR-NDE-heat's Laplacian, the Latent ODE's backward encoder, the log-signature fill)
keeps its space and runs as published; the final record and the report mark it.

Only per-step datasets come here, so every other dataset is searched exactly as before.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pipeline.config.arguments import TRAINING_KEYS
from pipeline.errors import ConfigError
from pipeline.models import get_model_class
from pipeline.spaces.space import SearchSpace, _same, split_config

if TYPE_CHECKING:
    from pipeline.models.base import SequenceModel


def causal_space(space: SearchSpace, dataset: str) -> tuple[SearchSpace, str | None]:
    """The space (resolved for `dataset`, SearchSpace.for_dataset) as searched on a per-step
    dataset, and one line for the user: what was replaced, or that the family runs as published
    and marked; (space, None) when no configuration of it reads later steps."""
    from pipeline.models.base import causal_variant  # late: imports torch

    cls = get_model_class(space.family)
    model = split_config({**space.fixed, **space.reference})[1]  # the reference's model arguments
    choices = {n: s for n, s in space.params.items() if s.distribution == "categorical" and n not in TRAINING_KEYS}
    configs = [model, *({**model, n: c} for n, s in choices.items() for c in s.choices)]
    reasons = [r for r in map(cls.reads_later_steps, configs) if r is not None]
    if not reasons:
        return space, None
    variant = causal_variant(cls, model)
    if variant is None:
        return space, (f"{space.family}: reads later steps on per-step dataset {dataset} ({reasons[0]}): runs "
                       f"as published, marked in the report")
    params, fixed, reference = dict(space.params), dict(space.fixed), dict(space.reference)
    replaced: dict[str, tuple[list[Any], list[Any]]] = {}  # key -> (values replaced, what they became)

    def note(name: str, old: Any, new: Any) -> None:
        olds, news = replaced.setdefault(name, ([], []))
        olds.extend(x for x in [old] if not any(_same(x, o) for o in olds))
        news.extend(x for x in [new] if not any(_same(x, o) for o in news))

    for name, spec in choices.items():  # each choice -> its value in the causal variant with it
        pairs = [(c, _causal_value(cls, {**variant, name: c}, name)) for c in spec.choices]
        kept = tuple(dict.fromkeys(v for _, v in pairs if v is not None))
        if not kept:
            raise ConfigError(f"{space.path}: params.{name}: every choice reads later steps on per-step dataset "
                              f"{dataset} and none has a causal variant")
        for old, new in pairs:
            if new is None or not _same(old, new):
                note(name, old, new if new is not None else "dropped")
        params[name] = dataclasses.replace(spec, choices=kept)
    for name, value in variant.items():  # the reference's own replacements
        if name in model and _same(model[name], value):
            continue
        if name in params:
            reference[name] = value
        else:
            note(name, model.get(name, "its default"), value)
            fixed[name] = value
    what = "; ".join(f"{k} {', '.join(map(str, olds))}" for k, (olds, _) in replaced.items())
    became = ", ".join(f"{k} {', '.join(map(str, news))}" for k, (_, news) in replaced.items())
    return (dataclasses.replace(space, params=params, fixed=fixed, reference=reference),
            f"{space.family}: {what} read later steps on per-step dataset {dataset}: trained as {became}")


def _causal_value(cls: type[SequenceModel], config: dict[str, Any], name: str) -> Any:
    """What `name` becomes in the causal variant of `config`; None when that has none."""
    from pipeline.models.base import causal_variant  # late: imports torch

    variant = causal_variant(cls, config)
    return None if variant is None else variant.get(name)
