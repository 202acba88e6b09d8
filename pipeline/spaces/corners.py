"""A space's model arguments checked by the model itself, before any trial (issue 31).

The typed checks at load (pipeline/config/arguments.py) know that `hidden_size` is an int; only the
model knows that it must be positive, that a number of heads divides a width, or which solver
names it takes. So the family's class is built, and run forward on a tiny batch on the CPU, at
the space's reference configuration and at its corners: each searched model argument at each end
of its range (or each of its choices) with the rest at the reference, and every one at its low
end, then at its high end, together. A configuration the model refuses is one line naming the
file, the key and the value, with the model's own error, instead of every trial failing a minute
into the search. Training keys are not built here: TrainSettings checks them (protocol.py).

What it costs: about 20 models per family, a few tenths of a second each family on one core
(`corner_configs` lists them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pipeline.config.arguments import TRAINING_KEYS
from pipeline.errors import ConfigError
from pipeline.models import get_model_class
from pipeline.models.builtin import EMBED_DIM
from pipeline.names import shown
from pipeline.spaces.space import ParamSpec, SearchSpace, _same

if TYPE_CHECKING:  # torch where models are built: `import pipeline.spaces` reads and checks files without it
    import torch

BATCH, LENGTH = 2, 5  # the tiny batch every corner runs forward on
# (key, at a corner of its range?) -> (the file that sets it, the key as that file spells it)
Where = Callable[[str, bool], tuple[Path, str]]
_REFERENCE = object()  # a pick meaning: the param's reference value


def _ends(spec: ParamSpec) -> tuple[Any, ...]:
    if spec.distribution == "categorical":
        return spec.choices
    kind = int if spec.distribution == "int" else float
    return kind(spec.low), kind(spec.high)


def _resolve(space: SearchSpace, pick: Callable[[ParamSpec], Any]) -> dict[str, Any]:
    """A full configuration: each param active given the earlier ones takes `pick(spec)`
    (_REFERENCE: its reference value, else its first end), then the fixed values."""
    chosen: dict[str, Any] = {}
    for spec in space.params.values():
        if spec.active(chosen):
            value = pick(spec)
            if value is _REFERENCE:
                value = space.reference[spec.name] if spec.name in space.reference else _ends(spec)[0]
            chosen[spec.name] = value
    return {**space.fixed, **chosen}


def corner_configs(space: SearchSpace) -> list[tuple[str | None, Any, dict[str, Any]]]:
    """(searched key or None, its value, the full configuration): the reference first, then each
    model argument's ends one at a time, then all at their low and all at their high ends."""
    searched = [s for s in space.params.values() if s.name not in TRAINING_KEYS]
    out: list[tuple[str | None, Any, dict[str, Any]]] = [(None, None, _resolve(space, lambda s: _REFERENCE))]
    for spec in searched:
        for end in _ends(spec):
            # its conditions met with their first allowed value where the reference does not meet them
            needs = {k: allowed[0] for k, allowed in spec.when.items()
                     if not any(_same(space.reference.get(k), a) for a in allowed)}
            config = _resolve(space, lambda s, spec=spec, end=end, needs=needs:
                              end if s.name == spec.name else needs.get(s.name, _REFERENCE))
            if spec.name in config:
                out.append((spec.name, end, config))
    for side in (0, -1):
        out.append(("", side, _resolve(space, lambda s, side=side: _REFERENCE if s.name in TRAINING_KEYS
                                       else _ends(s)[side])))
    seen, unique = set(), []
    for key, value, config in out:
        digest = json.dumps(config, sort_keys=True, default=str)
        if digest not in seen:
            seen.add(digest)
            unique.append((key, value, config))
    return unique


def _tiny_batch(channels: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, LENGTH, channels, generator=generator)
    t = torch.cumsum(torch.rand(BATCH, LENGTH, generator=generator) + 0.1, dim=1)
    return x, t, torch.ones(BATCH, LENGTH, dtype=torch.bool)


def _refusal(cls: type, config: dict[str, Any], channels: int, output_size: int, per_step: bool) -> str | None:
    """The model's own error building and running `config` forward on the tiny batch, or None."""
    import torch

    model_kwargs = {k: v for k, v in config.items() if k not in TRAINING_KEYS}
    width = model_kwargs.pop(EMBED_DIM, None) or channels  # a token dataset: the embedding feeds the model
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            model = cls(input_channels=width, output_size=output_size, per_step=per_step, **model_kwargs).eval()
            x, t, mask = _tiny_batch(width)
            out = model(**cls.prepare_inputs(x, t, mask, **model_kwargs))
        if not torch.isfinite(out).all():
            return "its output on a tiny batch is not finite"
        return None
    except Exception as exc:  # the model's own refusal, whatever its type
        text = " ".join(str(exc).split())
        return f"{type(exc).__name__}: {text if len(text) <= 200 else text[:197] + '...'}"


def _culprit(cls: type, config: dict[str, Any], space: SearchSpace, run: Callable[[dict[str, Any]], str | None]
             ) -> str | None:
    """The model argument of a refused configuration whose value alone is refused: the one that,
    set to the class default or another end of its range, makes the configuration build."""
    from pipeline.models.base import model_arguments  # late: imports torch

    defaults = {k: p.default for k, p in model_arguments(cls).items() if p.default is not p.empty}
    for key, value in config.items():
        if key in TRAINING_KEYS:
            continue
        others = [defaults[key]] if key in defaults else []
        others += list(_ends(space.params[key])) if key in space.params else []
        for other in others:
            if not _same(other, value) and run({**config, key: other}) is None:
                return key
    return None


def check_corners(space: SearchSpace, channels: int, output_size: int, per_step: bool, where: Where,
                  context: str) -> int:
    """Build and run the family's model at the reference and the corners of `space` (for one
    dataset: `channels` inputs, `output_size` outputs, `per_step`); a refusal is a ConfigError
    naming the file, the key and the value. Returns how many configurations were checked."""
    import torch

    cls = get_model_class(space.family)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add overhead (and trials may be running)
    try:
        corners = corner_configs(space)
        for key, value, config in corners:
            reason = _refusal(cls, config, channels, output_size, per_step)
            if reason is None:
                continue
            at_end = key is not None  # a corner: its values are ends of their ranges
            if not key:  # the reference, or every end together: find the value at fault
                key = _culprit(cls, config, space, lambda c: _refusal(cls, c, channels, output_size, per_step))
                value = None if key is None else config[key]
            if key is None:
                what = "the reference configuration" if not at_end else "its searched arguments all at one end"
                raise ConfigError(f"{where('', at_end)[0]}: {what} is refused by {cls.__name__} ({reason}); "
                                  f"allowed: values it can be built with ({context})")
            path, spelled = where(key, at_end)
            raise ConfigError(f"{path}: key `{spelled}`: {shown(value)} is refused by {cls.__name__} ({reason}); "
                              f"allowed: values it can be built with ({context})")
        return len(corners)
    finally:
        torch.set_num_threads(threads)
