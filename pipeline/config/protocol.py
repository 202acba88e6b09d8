"""The training protocol as configuration: optimiser, learning-rate schedule, clipping, class
weights, embedding dropout and early stopping.

Every key below is a training key: a search space may fix it, search it or set it in a
reference like any model argument, it is logged to MLflow with the trial's configuration, kept in
the result JSON's `best_config` and carried by a promoted model's metadata. None of it changes the
model a promoted checkpoint rebuilds (dropout is off in evaluation), so predictions do not depend
on it.

    optimizer      adam (default) | adamw | rmsprop | adamax (torch.optim)
    beta1, beta2   Adam-family moment decays (adam, adamw, adamax); torch's 0.9, 0.999 by default
    momentum       RMSprop momentum (rmsprop only); 0 by default
    rms_alpha      RMSprop's squared-gradient smoothing (Keras' `rho`; rmsprop only); torch's 0.99
    eps            the optimiser's denominator epsilon; torch's default per optimiser when unset
    weight_decay   torch's `weight_decay`: an L2 term in the gradient for adam / rmsprop / adamax,
                   decoupled decay (Loshchilov & Hutter) for adamw
    lr_schedule    none (default) | exponential | step
    lr_decay       the schedule's multiplier in (0, 1]: per epoch (or per batch) for exponential,
                   per step for step (CfC Tables S1-S4 `decay_lr`; CDR-NDE Sec. 5: 0.1)
    lr_decay_per   epoch (default) | batch: when exponential decay applies
    lr_min_factor  exponential schedule: the floor of the rate as a fraction of lr (Rubanova et
                   al.'s latent_ode code decays by 0.999 per batch down to lr / 10: 0.1)
    lr_step_epoch  step schedule: decay every this many epochs (torch StepLR's step_size)
    lr_step_fraction  step schedule: the same as a fraction of the run's epochs, so a paper's
                   "x0.1 at epoch 100 of 200" keeps its shape at a reduced budget (0.5)
    grad_clip      the global gradient-norm limit (torch's clip_grad_norm_, Keras' `global_clipnorm`;
                   Keras' `clipnorm`, which the CfC papers' tables give, clips each variable's
                   gradient on its own); 0: none
    class_weight   none (default) | balanced: cross-entropy weights n / (C * n_c) from the training
                   split's observed labels (binary: a positive weight n_neg / n_pos)
    pos_weight     binary tasks: the weight of positive examples against 1 for negatives (CfC
                   Table S2's class_weight); losses are weighted means (pipeline/training/loop.py loss_fn)
    embed_dropout  dropout on token embeddings (token datasets only; CfC Table S3 `embed_dr`)
    patience       early stopping: stop after this many epochs without progress (a better
                   validation metric, or a validation loss lower than the lowest so far by more
                   than 0.1 %: pipeline/training/selection.py PROGRESS_RULE); 0 (default): never;
                   at most the epochs the final stage trains (a search shorter than it says so)

Bad values and combinations are refused with one line naming the key and what is allowed: at
space load for what the file alone decides (a key whose optimiser or schedule cannot use it),
before Ray starts for what depends on the dataset and the budget (a class weight on regression,
a step epoch beyond the epochs), and in TrainSettings for a sampled configuration.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pipeline.config.base import MAX_EPOCHS
from pipeline.errors import ConfigError
from pipeline.names import shown

if TYPE_CHECKING:  # torch on first use: a space or params.yaml is checked without it (CLI start-up)
    import torch

# The optimiser's name in a configuration -> its class in torch.optim.
OPTIMIZERS: dict[str, str] = {"adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "adamax": "Adamax"}
SCHEDULES = ("none", "exponential", "step")
CLASS_WEIGHTS = ("none", "balanced")
_ADAM_LIKE = ("adam", "adamw", "adamax")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _one_of(options: Iterable[str]) -> tuple[str, Callable[[Any], bool]]:
    options = tuple(options)
    return f"one of {list(options)}", lambda v: isinstance(v, str) and v in options


def _in_unit(low_open: bool, high_open: bool) -> tuple[str, Callable[[Any], bool]]:
    text = f"a number in {'(' if low_open else '['}0, 1{')' if high_open else ']'}"
    return text, lambda v: (_is_number(v) and (v > 0 if low_open else v >= 0) and (v < 1 if high_open else v <= 1))


# key -> (what is allowed, check); pipeline/config/arguments.py checks every training key with these.
RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "lr": ("a finite number > 0", lambda v: _is_number(v) and 0 < v),
    "batch_size": ("an integer from 1 to 1000000", lambda v: _is_int(v) and 1 <= v <= 1_000_000),
    "weight_decay": ("a finite number >= 0", lambda v: _is_number(v) and v >= 0),
    "grad_clip": ("a finite number >= 0 (0: no clipping)", lambda v: _is_number(v) and v >= 0),
    "optimizer": _one_of(OPTIMIZERS),
    "beta1": _in_unit(False, True),
    "beta2": _in_unit(False, True),
    "momentum": _in_unit(False, True),
    "rms_alpha": _in_unit(True, True),
    "eps": ("a finite number > 0", lambda v: _is_number(v) and 0 < v),
    "lr_schedule": _one_of(SCHEDULES),
    "lr_decay": _in_unit(True, False),
    "lr_decay_per": _one_of(("epoch", "batch")),
    "lr_min_factor": _in_unit(True, False),
    "lr_step_epoch": ("an integer >= 1", lambda v: _is_int(v) and v >= 1),
    "lr_step_fraction": _in_unit(True, False),
    "class_weight": _one_of(CLASS_WEIGHTS),
    "pos_weight": ("a finite number > 0", lambda v: _is_number(v) and 0 < v),
    "embed_dropout": _in_unit(False, True),
    "patience": (f"an integer from 0 to {MAX_EPOCHS} (0: no early stopping; at most the epochs any stage trains)",
                 lambda v: _is_int(v) and 0 <= v <= MAX_EPOCHS),
}
TRAINING_KEYS = frozenset(RULES)
DEFAULTS = {"optimizer": "adam", "lr_schedule": "none"}

# A key that only means something for some values of another: key -> (that key, its values).
REQUIRES: dict[str, tuple[str, tuple[str, ...]]] = {
    "beta1": ("optimizer", _ADAM_LIKE), "beta2": ("optimizer", _ADAM_LIKE),
    "momentum": ("optimizer", ("rmsprop",)), "rms_alpha": ("optimizer", ("rmsprop",)),
    "lr_decay": ("lr_schedule", ("exponential", "step")), "lr_decay_per": ("lr_schedule", ("exponential",)),
    "lr_min_factor": ("lr_schedule", ("exponential",)),
    "lr_step_epoch": ("lr_schedule", ("step",)), "lr_step_fraction": ("lr_schedule", ("step",)),
}
# What a schedule needs: each inner tuple is "one of these keys".
NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "exponential": (("lr_decay",),), "step": (("lr_decay",), ("lr_step_epoch", "lr_step_fraction")),
}


def training_problem(key: str, value: Any) -> str | None:
    """What is wrong with `value` for training key `key` ("... is not allowed; allowed: ..."), or None."""
    allowed, ok = RULES[key]
    return None if ok(value) else f"{shown(value)} is not allowed; allowed: {allowed}"


def combination_problem(config: dict[str, Any]) -> tuple[str, str] | None:
    """(key, what is wrong) for keys that the chosen optimiser or schedule cannot use or lacks."""
    chosen = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    for key, (other, values) in REQUIRES.items():
        if key in config and chosen[other] not in values:
            return key, f"is set but {other} is {chosen[other]!r}; allowed: only with {other} in {list(values)}"
    for group in NEEDS.get(chosen["lr_schedule"], ()):
        given = [k for k in group if k in config]
        if len(given) != 1:
            what = "missing" if not given else f"both {given} are set"
            return group[0], (f"{what}: lr_schedule {chosen['lr_schedule']!r} needs "
                              f"{'one of ' + str(list(group)) if len(group) > 1 else group[0]}")
    return None


@dataclass(frozen=True)
class TrainSettings:
    """The training keys of one configuration (pipeline/spaces.split_config); see the module doc."""

    lr: float
    batch_size: int
    weight_decay: float = 0.0
    grad_clip: float = 0.0  # 0: no clipping
    optimizer: str = "adam"
    beta1: float | None = None
    beta2: float | None = None
    momentum: float | None = None
    rms_alpha: float | None = None
    eps: float | None = None
    lr_schedule: str = "none"
    lr_decay: float | None = None
    lr_decay_per: str | None = None
    lr_min_factor: float | None = None
    lr_step_epoch: int | None = None
    lr_step_fraction: float | None = None
    class_weight: str = "none"
    pos_weight: float | None = None
    embed_dropout: float = 0.0
    patience: int = 0

    def __post_init__(self) -> None:
        given = self.given()
        for key, value in given.items():
            problem = training_problem(key, value)
            if problem:
                raise ConfigError(f"training key `{key}`: {problem}")
        bad = combination_problem(given)
        if bad:
            raise ConfigError(f"training key `{bad[0]}`: {bad[1]}")

    def given(self) -> dict[str, Any]:
        """The keys set (not None), as a configuration would spell them."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def make_optimizer(parameters: Iterable[torch.nn.Parameter], s: TrainSettings) -> torch.optim.Optimizer:
    """The configured torch optimiser; unset arguments keep torch's defaults."""
    import torch

    kwargs: dict[str, Any] = {"lr": s.lr, "weight_decay": s.weight_decay}
    if s.eps is not None:
        kwargs["eps"] = s.eps
    if s.optimizer in _ADAM_LIKE and (s.beta1 is not None or s.beta2 is not None):
        kwargs["betas"] = (0.9 if s.beta1 is None else s.beta1, 0.999 if s.beta2 is None else s.beta2)
    if s.optimizer == "rmsprop":
        kwargs.update({k: v for k, v in (("momentum", s.momentum), ("alpha", s.rms_alpha)) if v is not None})
    return getattr(torch.optim, OPTIMIZERS[s.optimizer])(parameters, **kwargs)


def step_size(s: TrainSettings, epochs: int | None) -> int:
    """The step schedule's period in epochs (lr_step_epoch, or lr_step_fraction of `epochs`)."""
    if s.lr_step_epoch is not None:
        return s.lr_step_epoch
    if epochs is None:
        raise ConfigError("training key `lr_step_fraction` needs the run's epochs; allowed: lr_step_epoch instead")
    return max(1, round(s.lr_step_fraction * epochs))


def make_scheduler(optimizer: torch.optim.Optimizer, s: TrainSettings,
                   epochs: int | None) -> torch.optim.lr_scheduler.LRScheduler | None:
    """torch's ExponentialLR or StepLR for the configured schedule; None for `none`.

    The trainer steps it after each epoch, or after each batch when `lr_decay_per: batch`
    (`per_batch`). With `lr_min_factor` the exponential rate is lr * max(lr_decay^n, lr_min_factor)
    after n steps (torch's LambdaLR; ExponentialLR has no floor).
    """
    import torch

    if s.lr_schedule == "exponential" and s.lr_min_factor is not None:
        gamma, floor = s.lr_decay, s.lr_min_factor
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: max(gamma ** n, floor))
    if s.lr_schedule == "exponential":
        return torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=s.lr_decay)
    if s.lr_schedule == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size(s, epochs), gamma=s.lr_decay)
    return None


def per_batch(s: TrainSettings) -> bool:
    return s.lr_schedule == "exponential" and s.lr_decay_per == "batch"


def class_weights(task: str, s: TrainSettings, y: torch.Tensor, mask: torch.Tensor, per_step: bool,
                  output_size: int) -> torch.Tensor | None:
    """The loss weights: (C,) class weights for `classification`, a (1,) positive weight for `binary`.

    y: (N,) or (N, L) labels of the training split; mask: (N, L) observed steps (per-step tasks).
    `balanced` is n / (C * n_c) over observed labels (a class never seen gets weight 0: it has no
    terms to weigh); for binary, n_neg / n_pos.
    """
    import torch

    labels = y[mask] if per_step else y
    if task == "binary":
        if s.pos_weight is not None:
            return torch.tensor([s.pos_weight], dtype=torch.float32)
        if s.class_weight == "balanced":
            pos = float((labels == 1).sum())
            return torch.tensor([(len(labels) - pos) / max(pos, 1.0)], dtype=torch.float32)
        return None
    if task == "classification" and s.class_weight == "balanced":
        counts = torch.bincount(labels.long().reshape(-1), minlength=output_size).float()
        return torch.where(counts > 0, len(labels) / (output_size * counts.clamp(min=1.0)), torch.zeros_like(counts))
    return None


def dataset_problem(key: str, values: Iterable[Any], task: str, has_embedding: bool,
                    epochs: int) -> str | None:
    """What is wrong with training key `key` taking `values` on a dataset (its task, whether its
    families read an embedding) with a budget of `epochs`; None when nothing is."""
    values = list(values)
    if key == "pos_weight" and task != "binary":
        return f"is set but the task is {task}; allowed: only on binary tasks (class_weight for classification)"
    if key == "class_weight" and task == "regression" and any(v != "none" for v in values):
        return "weights classes but the task is regression; allowed: none (or remove the key)"
    if key == "embed_dropout" and not has_embedding and any(v != 0 for v in values):
        return "drops embeddings but this dataset's inputs are not tokens; allowed: 0 (or remove the key)"
    if key == "lr_step_epoch" and any(v > epochs for v in values):
        return f"{max(values)} is beyond the run's {epochs} epochs; allowed: 1 to {epochs} (or lr_step_fraction)"
    if key == "patience" and any(v > epochs for v in values):  # it could never stop the run (issue 31)
        return (f"{max(values)} is more than the run's {epochs} epochs, so it could never stop it; allowed: 0 to "
                f"{epochs} (0: no early stopping)")
    return None
