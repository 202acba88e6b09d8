"""Latent ODE classifier (Rubanova, Chen & Duvenaud 2019, NeurIPS; YuliaRubanova/latent_ode),
optionally with temporal weights (Kohan, Rietman & Siegelmann 2022, Eqs. 1-2, Algorithm 1) in
both ODE networks, the encoder's and the decoder's.

    encoder   an ODE-RNN run backwards in time, from each row's last observation to its first:
              between observations h follows dh/dt = f_rec(h) (back in time), at each
              observation h = GRUCell(x_k, h)
    z0        mean, std = split(MLP(h)), std = |.|;  z0 = mean + std * eps while training
              (the reparameterised sample the reference classifies), z0 = mean in eval
    decoder   dz/dt = f_gen(z) from z(t_0) = z0 through every observation time: Algorithm 1
              of the TW paper ("Input: latent z, output times")
    classify  per step: MLP(z(t_k)) -> (B, L, O), as the reference's per-time-point classifier
              (Human Activity); per sequence (`sequence_readout`): "z0": MLP(z0) -> (B, O), the
              reference's PhysioNet classifier, no decoder built; "decoded": MLP(z(t_last)),
              the decoder's latent at the row's last observation -> (B, O)

Why "decoded" exists. The reference trains the PhysioNet classifier together with the ELBO
(Gaussian reconstruction of the observations from the decoded trajectory + KL, cross-entropy
weighted 100), so there the decoder shapes z0 through the reconstruction term; its Human
Activity run trains the cross-entropy alone, on the decoded trajectory (the per-step mode here).
The trainer here optimises only the task loss returned through forward(): with "z0" the
decoder would get no gradient at all and is not built, so temporal weights would act in the
encoder only. "decoded" keeps the decoder (with its temporal weights) in the model as the TW
paper's Latent ODE has it, by reading it where the per-step mode does, at the last step.

Simplified from the reference: a torch GRUCell on the values instead of its GRU unit carrying
a mean and a std (its `gru-units` MLP) and reading the mask channels; no output decoder
Linear(latent, C) (it serves only the reconstruction term); one solver setting for both ODEs
(the reference: Euler with ~50 steps over the sequence in the encoder, dopri5 in the decoder).
`classifier_units = 0` is the reference's `--linear-classif` (its Human Activity run).

Time. Both ODEs run on the observation times multiplied by `time_scale` (dt, (B, L), scaled before
anything reads it, the temporal weights' clock included). The reference divides each batch's time
points by their maximum (YuliaRubanova/latent_ode, physionet.py `variable_time_collate_fn`,
`combined_tt / torch.max(combined_tt)`), so its ODEs integrate over [0, 1] whatever the data's
unit; the TW paper's code is built on it. On PhysioNet 2012 (hours, stays of 48 h) that is
`time_scale = 1/48`, fixed here rather than per batch so that a row's solution does not depend on
the rows it is batched with. Unscaled (1.0, the default), an Euler step spans a whole interval of
up to hours and a field of O(1) moves the state by that many units: measured on set-a, both latent
models fell to the constant predictor within five epochs (docs/benchmarks/temporal-weights.md).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import FIXED_STEP_METHODS, METHODS, check_choice
from pipeline.models.base import SequenceModel, check_raw_inputs
from pipeline.models.temporal_weights.weights import TemporalMLP, check_layout, tw_options
from pipeline.models.temporal_weights.stages import IntervalField, IntervalStages, stage_grid

SEQUENCE_READOUTS = ("z0", "decoded")


def ode_mlp(size: int, units: int, layers: int) -> nn.Sequential:
    """The reference's create_net: size -> units, `layers` x (units -> units), -> size; tanh
    between layers. (B, size) -> (B, size)."""
    modules: list[nn.Module] = [nn.Linear(size, units)]
    for _ in range(layers):
        modules += [nn.Tanh(), nn.Linear(units, units)]
    return nn.Sequential(*modules, nn.Tanh(), nn.Linear(units, size))


class _IntervalField(nn.Module):
    """dy/ds = span * g(y, clock(s)) on s in [0, 1], y (B, D): each row's interval of signed
    length `span` (B,) mapped onto [0, 1] (a negative span runs the ODE backwards in time); the
    field reads clock(s) = clock_start + s * clock_rate, per row (B,) or shared (0-dim)."""

    def __init__(self, net: Callable, span: torch.Tensor, clock_start: torch.Tensor, clock_rate: torch.Tensor) -> None:
        super().__init__()
        self.net, self.span = net, span.unsqueeze(-1)  # (B, 1)
        self.clock_start, self.clock_rate = clock_start, clock_rate

    def forward(self, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.span * self.net(y, self.clock_start + s * self.clock_rate)


def _classifier(latent_size: int, units: int, output_size: int) -> nn.Sequential:
    """The reference's classifier, (..., latent) -> (..., O): create_classifier's two ReLU
    layers of `units` (300 there), or one Linear for units = 0 (its --linear-classif)."""
    if units == 0:
        return nn.Sequential(nn.Linear(latent_size, output_size))
    return nn.Sequential(
        nn.Linear(latent_size, units), nn.ReLU(),
        nn.Linear(units, units), nn.ReLU(),
        nn.Linear(units, output_size),
    )


class LatentODE(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    Defaults: the reference's PhysioNet classification run (README of YuliaRubanova/latent_ode).
    `sequence_readout` applies per sequence only; per step the decoder always runs.
    """

    clock = "time"  # which time the fields read; the plain fields read none
    # Per step, every z(t_k) is decoded from z0, which the backward encoder reads from the whole row
    # (the reference's Human Activity per-time-point classifier): not causal, as published.
    causal = False

    @classmethod
    def reads_later_steps(cls, model_kwargs: Mapping[str, Any]) -> str | None:
        return "every step is decoded from z0, which the encoder reads backwards from the row's last observation"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        latent_size: int = 20,
        rec_size: int = 40,
        rec_layers: int = 3,
        gen_layers: int = 3,
        units: int = 50,
        classifier_units: int = 300,
        sample_z0: bool = True,
        sequence_readout: str = "z0",
        method: str = "euler",
        solver_steps: int = 1,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
        time_scale: float = 1.0,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = float(time_scale)
        check_choice("method", method, METHODS)
        check_choice("sequence_readout", sequence_readout, SEQUENCE_READOUTS)
        for name, value in (("latent_size", latent_size), ("rec_size", rec_size), ("units", units),
                            ("solver_steps", solver_steps)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for name, value in (("rec_layers", rec_layers), ("gen_layers", gen_layers),
                            ("classifier_units", classifier_units)):  # 0 units: a linear classifier
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if method in FIXED_STEP_METHODS:
            self.solver = {"method": method, "options": {"step_size": 1.0 / solver_steps}}
        else:
            self.solver = {"method": method, "rtol": rtol, "atol": atol, "options": {"max_num_steps": max_steps}}
        self.rec_size, self.latent_size, self.sample_z0 = rec_size, latent_size, sample_z0
        self.decodes = per_step or sequence_readout == "decoded"
        self.cell = nn.GRUCell(input_channels, rec_size)
        self.rec_field = self._field(rec_size, units, rec_layers)
        self.to_z0 = nn.Sequential(nn.Linear(rec_size, 100), nn.Tanh(), nn.Linear(100, 2 * latent_size))
        self.gen_field = self._field(latent_size, units, gen_layers) if self.decodes else None
        self.classifier = _classifier(latent_size, classifier_units, output_size)
        self.register_buffer("_unit_interval", torch.tensor([0.0, 1.0]), persistent=False)

    def _field(self, size: int, units: int, layers: int) -> nn.Module:
        """The ODE right-hand side network; the temporal-weight subclass swaps it."""
        return ode_mlp(size, units, layers)

    def _rate(self, net: nn.Module, y: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """dy/dt at per-row times (B,); the plain fields do not read the time."""
        return net(y)

    def _solve(self, field: nn.Module, y: torch.Tensor) -> torch.Tensor:
        """y (B, D) at s = 0 -> y at s = 1 of an interval's field."""
        return torchdiffeq.odeint(field, y, self._unit_interval.to(y.dtype), **self.solver)[-1]

    def _interval_fields(self, net: nn.Module, start: torch.Tensor, span: torch.Tensor, index: torch.Tensor,
                         direction: float, chained: bool = False) -> Callable[[int], nn.Module]:
        """Interval j -> the right-hand side of its solve over s in [0, 1], for j < n: each row's
        interval starts at start[:, j] and lasts span[:, j] (B, n; signed), at observation index
        index[j] (n,) on the shared index clock, which runs in `direction` (+-1). `chained`:
        interval j ends where j + 1 starts (the decoder's)."""
        if self.clock == "time":
            clock_start, clock_rate = start, span
        else:
            clock_start, clock_rate = index, torch.full_like(index, direction)
        return lambda j: self._interval_field(net, span[:, j], clock_start[..., j], clock_rate[..., j])

    def _interval_field(self, net: nn.Module, span: torch.Tensor, clock_start: torch.Tensor,
                        clock_rate: torch.Tensor) -> nn.Module:
        """The right-hand side of one interval's solve over s in [0, 1]."""
        return _IntervalField(lambda v, time: self._rate(net, v, time), span, clock_start, clock_rate)

    def encode(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Backward ODE-RNN -> (mean, std) of q(z0 | x), each (B, latent)."""
        times = torch.cumsum(dt, dim=1)  # (B, L): the observation times (elapsed dt sum up)
        gaps = torch.cat([dt[:, 1:], torch.zeros_like(dt[:, :1])], dim=1)  # (B, L): t_{k+1} - t_k, 0 at the end
        # interval k runs from t_{k+1} back to t_k; rows whose next step is padding have a zero gap
        index = torch.arange(1, x.shape[1] + 1, dtype=dt.dtype, device=dt.device)  # (L,): k + 1
        fields = self._interval_fields(self.rec_field, times + gaps, -gaps, index, -1.0)
        h = x.new_zeros(x.shape[0], self.rec_size)  # (B, R)
        for step in reversed(range(x.shape[1])):
            h_ode = self._solve(fields(step), h)
            h = torch.where(mask[:, step, None], self.cell(x[:, step], h_ode), h)
        mean, std = self.to_z0(h).chunk(2, dim=-1)
        return mean, std.abs()

    def decode(self, z0: torch.Tensor, dt: torch.Tensor) -> list[torch.Tensor]:
        """z0 (B, latent) at each row's first observation -> [z(t_0), ..., z(t_{L-1})], each
        (B, latent). Padding has dt = 0, so past its last observation a row's z holds."""
        times = torch.cumsum(dt, dim=1)  # (B, L)
        # interval j runs from t_j for dt_{j+1}, j < L - 1
        index = torch.arange(dt.shape[1] - 1, dtype=dt.dtype, device=dt.device)
        fields = self._interval_fields(self.gen_field, times[:, :-1], dt[:, 1:], index, 1.0, chained=True)
        states = [z0]
        for j in range(dt.shape[1] - 1):
            states.append(self._solve(fields(j), states[-1]))
        return states

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        if self.time_scale != 1.0:  # the reference's time on [0, 1] (module docstring)
            dt = dt * self.time_scale
        mean, std = self.encode(x, dt, mask)
        z0 = mean + std * torch.randn_like(std) if self.training and self.sample_z0 else mean
        if not self.decodes:
            return self.classifier(z0)  # (B, O)
        states = self.decode(z0, dt)
        if not self.per_step:
            return self.classifier(states[-1])  # z at each row's last observation -> (B, O)
        return self.classifier(torch.stack(states, dim=1))  # (B, L, latent) -> (B, L, O)


class LatentODETW(LatentODE):
    """Latent ODE whose encoder and decoder ODE networks have temporal weights (Eqs. 1-2): both
    are f_theta of Algorithm 1, a TemporalMLP latent -> units x (layers + 1) -> latent.

    Per sequence the decoder is kept by default (`sequence_readout="decoded"`), so that the
    temporal-weight decoder of the paper's model is there (see the module docstring). The
    fields see each row's time (tw_clock "time": t_k + s * span, running backwards in the
    encoder) or the observation index of the interval's start (tw_clock "index", shared by the
    batch, cheaper); tw_scope, tw_coupling, tw_units, tw_layout as in tw_models.py.
    """

    def __init__(
        self,
        *,
        tw_scope: str = "full",
        tw_block: int = 16,
        tw_coupling: str = "weight",
        tw_clock: str = "time",
        tw_units: int = 16,
        tw_layout: str = "mlp",
        sequence_readout: str = "decoded",
        **kwargs,
    ) -> None:
        self._tw = tw_options(tw_scope, tw_block, tw_clock, tw_units, tw_coupling)
        check_layout(tw_layout)
        self._tw["layout"] = tw_layout
        self.clock = tw_clock
        super().__init__(sequence_readout=sequence_readout, **kwargs)

    def _field(self, size: int, units: int, layers: int) -> nn.Module:
        return TemporalMLP([size] + [units] * (layers + 1) + [size], **self._tw)

    def _rate(self, net: nn.Module, y: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        return net(y, time)

    # Build the weights of a chunk of intervals at all their solver times at once
    # (tw_stages.IntervalStages); False builds them at every evaluation, as Algorithm 1 reads
    # (the equivalence test compares).
    precompute_stages = True

    def _interval_fields(self, net: nn.Module, start: torch.Tensor, span: torch.Tensor, index: torch.Tensor,
                         direction: float, chained: bool = False) -> Callable[[int], nn.Module]:
        grid = stage_grid(self.solver) if self.precompute_stages else None
        if grid is None:
            return super()._interval_fields(net, start, span, index, direction, chained)
        if self.clock == "time":
            stages = IntervalStages(net, grid, start, span, chained)
        else:
            stages = IntervalStages(net, grid, index, torch.full_like(index, direction), chained)
        return lambda j: stages.field(j, span[:, j])

    def _interval_field(self, net: nn.Module, span: torch.Tensor, clock_start: torch.Tensor,
                        clock_rate: torch.Tensor) -> nn.Module:
        return IntervalField(net, span, clock_start, clock_rate)
