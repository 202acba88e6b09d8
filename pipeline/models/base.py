"""The contract every model family follows.

A model never sees the run configuration: it takes plain keyword arguments. The trainer turns
a whole split into model inputs once (`prepare_inputs`, a classmethod, so expensive work such as
interpolation coefficients happens once per split and not once per batch), slices those tensors
along their first dimension into batches, and calls `forward(**inputs)`.

Shapes used throughout:
    N  sequences in a split, B in a batch
    L  padded sequence length; sequences are left-aligned, padding at the end
    C  value channels (without time)
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Mapping

import torch
from torch import nn


def elapsed_times(t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Time since the previous observation; 0 at padding.

    Args:
        t: (N, L) observation times, non-decreasing along L within the valid part.
        mask: (N, L) bool, True at observed steps.
    Returns:
        (N, L) elapsed times; the first step's elapsed time is t[:, 0] (time since t = 0).
    """
    previous = torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], dim=1)
    return torch.where(mask, t - previous, torch.zeros_like(t))


def last_valid_index(mask: torch.Tensor) -> torch.Tensor:
    """(N, L) bool mask -> (N,) long index of the last True step of each row."""
    steps = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask, steps, torch.zeros_like(steps)).amax(dim=1)


class SequenceModel(nn.Module):
    """Base class of every registered family.

    Subclasses set `representation` ("raw": values, elapsed times and mask, stepped through
    one observation at a time; "interp": a continuous path built with torchcde) and implement
    `prepare_inputs` and `forward`. With `per_step=True` the model returns one output per step
    (B, L, output_size); otherwise one per sequence (B, output_size), read at the last
    observed step of each sequence.
    """

    representation: ClassVar[str] = "raw"
    # The keyword inputs of forward(), filled in per subclass; checked on every call so a
    # model handed another family's inputs says which representation it needs.
    input_keys: ClassVar[tuple[str, ...]] = ()
    # The model arguments `prepare_inputs` reads: they name cached or precomputed inputs
    # (pipeline/data/inputs.py), so two trials that differ only elsewhere share them.
    input_arguments: ClassVar[tuple[str, ...]] = ()
    # Causality on per-step tasks (issue 30): whether the output at step i reads no input after
    # step i, whatever the arguments. A family whose published form reads later steps sets False
    # and says why in `reads_later_steps`; one whose arguments decide overrides that instead.
    causal: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.input_keys = tuple(p for p in inspect.signature(cls.forward).parameters if p != "self")

    def __call__(self, *args: Any, **inputs: torch.Tensor) -> torch.Tensor:
        if args or set(inputs) != set(self.input_keys):
            name = type(self).__name__
            got = sorted(inputs) + ([f"{len(args)} positional"] if args else [])
            raise ValueError(
                f"{name} reads the {self.representation!r} representation, the keyword inputs "
                f"{list(self.input_keys)} built by {name}.prepare_inputs; got {got}"
            )
        return super().__call__(**inputs)

    def __init__(self, *, input_channels: int, output_size: int, per_step: bool = False) -> None:
        super().__init__()
        self.input_channels = input_channels
        self.output_size = output_size
        self.per_step = per_step

    @classmethod
    def prepare_inputs(
        cls, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, **model_kwargs: object
    ) -> dict[str, torch.Tensor]:
        """Whole split -> tensors indexed by sequence along dim 0.

        Args:
            x: (N, L, C) values, NaN where missing (and at padding).
            t: (N, L) observation times; padding repeats the last valid time.
            mask: (N, L) bool, True at observed steps.
            model_kwargs: the model's own keyword arguments (for example the interpolation).
        Default ("raw"): missing values become 0 (values are standardised, so 0 is the train
        mean), plus elapsed times `dt` (N, L) and the `mask`.
        """
        return {"x": torch.nan_to_num(x, nan=0.0), "dt": elapsed_times(t, mask), "mask": mask}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    @classmethod
    def reads_later_steps(cls, model_kwargs: Mapping[str, Any]) -> str | None:
        """Why, with these arguments, a per-step output (B, L, O) at step i reads inputs x_j, t_j
        of some j > i; None when it never does. Default: None, unless the class sets causal = False."""
        return None if cls.causal else f"{cls.__name__} declares causal = False"

    @classmethod
    def causal_arguments(cls, model_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The arguments to train with on a per-step task: model_kwargs when they read no later
        step; else the family's causal variant of them (a CDE's causal interpolation, for one), or
        None when it has none and runs as published (marked in the report). Use `causal_variant`,
        which also checks that the variant is causal."""
        return dict(model_kwargs) if cls.reads_later_steps(model_kwargs) is None else None


def causal_variant(cls: type[SequenceModel], model_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """cls.causal_arguments(model_kwargs) when those read no later step, else None."""
    variant = cls.causal_arguments(model_kwargs)
    return variant if variant is not None and cls.reads_later_steps(variant) is None else None


def later_steps_problem(cls: type[SequenceModel], model_kwargs: Mapping[str, Any]) -> str | None:
    """Why these arguments must not train on a per-step task: they read later steps although the
    family has a causal variant (named in the answer); None when they may train (they are causal,
    or the family has no causal variant and runs as published, marked in the report)."""
    reason = cls.reads_later_steps(model_kwargs)
    variant = causal_variant(cls, model_kwargs) if reason is not None else None
    if variant is None:
        return None
    changes = ", ".join(f"{k} {v}" for k, v in variant.items() if k not in model_kwargs or model_kwargs[k] != v)
    return f"{reason}; its causal variant has {changes}"


def argument_value(cls: type[nn.Module], model_kwargs: Mapping[str, Any], name: str) -> Any:
    """The value argument `name` takes when the class is built from model_kwargs: given, or its default."""
    return model_kwargs[name] if name in model_kwargs else model_arguments(cls)[name].default


def model_arguments(cls: type[nn.Module]) -> dict[str, inspect.Parameter]:
    """The keyword arguments a model class accepts, by name.

    Follows **kwargs up the MRO, so a mixin that adds its own arguments and passes the rest on
    (`def __init__(self, *, depth=2, **kwargs)`) still exposes every argument of the class,
    less the names a class in the MRO lists in `withheld_arguments` (arguments of a base class
    that the subclass fixes itself and refuses).
    """
    arguments: dict[str, inspect.Parameter] = {}
    withheld = set().union(*(vars(klass).get("withheld_arguments", ()) for klass in cls.__mro__))
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass in (nn.Module, object):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters
        for name, param in params.items():
            if name != "self" and name not in withheld and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                arguments.setdefault(name, param)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return arguments


def gather_steps(seq: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, L, ...) and (B,) long index -> (B, ...): each row's entry at its own step."""
    return seq[torch.arange(seq.shape[0], device=seq.device), index]


def check_raw_inputs(
    x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor, input_channels: int
) -> None:
    """Raise ValueError naming the shapes unless x is (B, L, input_channels), dt and mask (B, L)."""
    if (
        x.ndim != 3
        or x.shape[-1] != input_channels
        or dt.shape != x.shape[:2]
        or mask.shape != x.shape[:2]
    ):
        raise ValueError(
            f"expected x (B, L, {input_channels}), dt (B, L) and mask (B, L); got "
            f"x {tuple(x.shape)}, dt {tuple(dt.shape)}, mask {tuple(mask.shape)}"
        )
