"""Liquid time-constant network (LTC), Hasani et al. 2021 (AAAI), Eq. 1:

    dx/dt = -[1/tau + f(x, I, t; theta)] x + f(x, I, t; theta) A

in the conductance form of the official code (raminmh/liquid_time_constant_networks, ncps
LTCCell): per neuron j, with synapses from neurons i and sensory synapses from inputs k,

    cm_j dv_j/dt = gleak_j (vleak_j - v_j) + sum_i w_ij s(v_i; mu_ij, sigma_ij) (erev_ij - v_j)
                                           + sum_k sw_kj s(I_k; smu_kj, ssigma_kj) (serev_kj - v_j)

s(y; mu, sigma) = sigmoid(sigma (y - mu)); so 1/tau = gleak/cm, f = the synaptic conductances / cm
and A their reversal potentials erev. The conductances w, sw, cm, gleak pass through softplus
so they stay positive without a clipping step (ncps `implicit_param_constraints`).

Default solver "fused": the paper's fused semi-implicit Euler step, `ode_unfolds` times per
observation interval with step delta = dt / ode_unfolds: synaptic activations at the current v,
the linear terms at the new one, which solves to

    v' = (cm/delta v + gleak vleak + sum w s erev + sum sw s serev) / (cm/delta + gleak + sum w s + sum sw s)

"euler", "rk4" and "dopri5" integrate the same ODE with torchdiffeq instead (the paper's
explicit and Runge-Kutta variants), with the input held at the observation over the interval.
The ODE is stiff, so the fixed-step ones are only conditionally stable: the step dt / ode_unfolds
must keep step * lambda_j below 2 (Euler) or about 2.79 (RK4), where
lambda_j = (gleak_j + sum_i w_ij s_ij + sum_k sw_kj s_kj) / cm_j grows with the number of
neurons (on BasicMotions at initialisation: 10.6 at 16 neurons, 46 at 128). Past it the
potentials overflow to NaN within a sequence, whatever the learning rate or epsilon (issue 29;
search_spaces/ltc.yaml searches the fused solver only). The fused step cannot diverge: v' is a
mean of v, vleak and the reversal potentials with the positive weights cm/delta, gleak and the
conductances, and epsilon (ncps' 1e-8) only guards a denominator that cm/delta already keeps > 0.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import METHODS, check_choice, solver_kwargs
from pipeline.models.base import SequenceModel, check_raw_inputs, gather_steps, last_valid_index

SOLVERS = ("fused",) + METHODS
# Initial ranges of the raw parameters (ncps LTCCell; uniform in [low, high]).
_INIT_RANGES = {
    "gleak": (0.001, 1.0), "vleak": (-0.2, 0.2), "cm": (0.4, 0.6),
    "w": (0.001, 1.0), "sigma": (3.0, 8.0), "mu": (0.3, 0.8),
    "sensory_w": (0.001, 1.0), "sensory_sigma": (3.0, 8.0), "sensory_mu": (0.3, 0.8),
}
# Added to dt in the fused step so cm/delta stays finite when two observations share a time
# stamp (tf_cfc.py LTCCell in raminmh/CfC adds the same 1e-3).
_MIN_ELAPSED = 1e-3


class Synapses(NamedTuple):
    """Positive conductances and reshaped synapse parameters, shared by every step of a pass."""

    w: torch.Tensor  # (H_from, H_to): softplus(w)
    w_erev: torch.Tensor  # (H_from, H_to): softplus(w) * erev
    sigma: torch.Tensor  # (H_from, H_to)
    shift: torch.Tensor  # (H_from, H_to): sigma * mu
    cm: torch.Tensor  # (H,)
    gleak: torch.Tensor  # (H,)
    leak_current: torch.Tensor  # (H,): gleak * vleak


class LTCCell(nn.Module):
    """Fully connected LTC neurons: inputs (C) -> `hidden_size` neurons, all synapses present."""

    def __init__(self, input_size: int, hidden_size: int, epsilon: float) -> None:
        super().__init__()
        self.epsilon = epsilon
        shapes = {"gleak": (hidden_size,), "vleak": (hidden_size,), "cm": (hidden_size,)}
        shapes.update({name: (hidden_size, hidden_size) for name in ("w", "sigma", "mu")})
        shapes.update({f"sensory_{name}": (input_size, hidden_size) for name in ("w", "sigma", "mu")})
        for name, shape in shapes.items():
            low, high = _INIT_RANGES[name]
            self.register_parameter(name, nn.Parameter(torch.empty(shape).uniform_(low, high)))
        # Reversal potentials +1 (excitatory) or -1 (inhibitory), two in three excitatory as in ncps.
        self.erev = nn.Parameter(_polarities((hidden_size, hidden_size)))
        self.sensory_erev = nn.Parameter(_polarities((input_size, hidden_size)))
        self.input_w = nn.Parameter(torch.ones(input_size))  # affine input mapping
        self.input_b = nn.Parameter(torch.zeros(input_size))

    def sensory_currents(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., C) -> (sum_k sw s serev, sum_k sw s), each (..., H); for all steps at once."""
        x = x * self.input_w + self.input_b
        active = F.softplus(self.sensory_w) * torch.sigmoid(
            self.sensory_sigma * (x.unsqueeze(-1) - self.sensory_mu)
        )  # (..., C, H)
        return (active * self.sensory_erev).sum(-2), active.sum(-2)

    def synapses(self) -> Synapses:
        """The loop-invariant parameter transforms, computed once per forward pass."""
        w = F.softplus(self.w)
        gleak = F.softplus(self.gleak)
        return Synapses(w=w, w_erev=w * self.erev, sigma=self.sigma, shift=self.sigma * self.mu,
                        cm=F.softplus(self.cm), gleak=gleak, leak_current=gleak * self.vleak)

    def synaptic_currents(self, v: torch.Tensor, syn: Synapses) -> tuple[torch.Tensor, torch.Tensor]:
        """v (B, H) -> (sum_i w s erev, sum_i w s), each (B, H)."""
        # sigma (v - mu) as one addcmul; elementwise products and sums beat a bmm at these sizes
        active = torch.sigmoid(torch.addcmul(-syn.shift, v.unsqueeze(-1), syn.sigma))  # (B, H_from, H_to)
        return (active * syn.w_erev).sum(1), (active * syn.w).sum(1)

    def fused_solve(
        self, v: torch.Tensor, syn: Synapses, sensory: tuple[torch.Tensor, torch.Tensor],
        dt: torch.Tensor, unfolds: int,
    ) -> torch.Tensor:
        """v (B, H) after `unfolds` semi-implicit Euler steps of length dt (B, 1) / unfolds."""
        cm_t = syn.cm / ((dt + _MIN_ELAPSED) / unfolds)  # (B, H)
        # The terms that do not depend on v, once per observation instead of once per unfold.
        numerator_rest = syn.leak_current + sensory[0]
        denominator_rest = cm_t + syn.gleak + sensory[1] + self.epsilon
        for _ in range(unfolds):
            numerator, denominator = self.synaptic_currents(v, syn)
            v = torch.addcmul(numerator_rest + numerator, cm_t, v) / (denominator_rest + denominator)
        return v

    def derivative(self, v: torch.Tensor, syn: Synapses, sensory: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """dv/dt (B, H) of the ODE at v (B, H) with the sensory currents held."""
        numerator, denominator = self.synaptic_currents(v, syn)
        current = (
            syn.leak_current + numerator + sensory[0] - v * (syn.gleak + denominator + sensory[1])
        )
        return current / syn.cm


class _IntervalField(nn.Module):
    """dv/ds = dt * f(v) on s in [0, 1]: each row's own interval mapped onto one shared one."""

    def __init__(
        self, cell: LTCCell, syn: Synapses, sensory: tuple[torch.Tensor, torch.Tensor], dt: torch.Tensor
    ) -> None:
        super().__init__()
        self.cell, self.syn, self.sensory, self.dt = cell, syn, sensory, dt

    def forward(self, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.dt * self.cell.derivative(v, self.syn, self.sensory)


class LTC(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    A linear readout of the neuron potentials replaces ncps' affine output mapping (an affine
    map followed by a linear one is one linear map).
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 32,
        ode_unfolds: int = 6,
        solver: str = "fused",
        epsilon: float = 1e-8,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_choice("solver", solver, SOLVERS)
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        if ode_unfolds < 1:
            raise ValueError(f"ode_unfolds must be >= 1, got {ode_unfolds}")
        if epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        self.hidden_size = hidden_size
        self.ode_unfolds = ode_unfolds
        self.solver = solver
        if solver != "fused":  # the fixed-step methods take ode_unfolds steps per interval
            self.solver_kwargs = solver_kwargs(solver, 1.0 / ode_unfolds, rtol, atol, max_steps)
        self.cell = LTCCell(input_channels, hidden_size, epsilon)
        self.readout = nn.Linear(hidden_size, output_size)
        self.register_buffer("_unit_interval", torch.tensor([0.0, 1.0]), persistent=False)

    def _advance(
        self, v: torch.Tensor, syn: Synapses, sensory: tuple[torch.Tensor, torch.Tensor], dt: torch.Tensor
    ) -> torch.Tensor:
        """v (B, H) after an interval dt (B, 1) with the input's sensory currents held."""
        if self.solver == "fused":
            return self.cell.fused_solve(v, syn, sensory, dt, self.ode_unfolds)
        field = _IntervalField(self.cell, syn, sensory, dt)
        return torchdiffeq.odeint(field, v, self._unit_interval.to(v.dtype), **self.solver_kwargs)[-1]

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        syn = self.cell.synapses()
        numerators, denominators = self.cell.sensory_currents(x)  # 2 x (B, L, H)
        # unbind, not [step] in the loop: indexing would fill a whole (B, L, H) gradient per step
        sensory = list(zip(numerators.unbind(1), denominators.unbind(1)))  # L x 2 x (B, H)
        dt = dt.unsqueeze(-1).unbind(1)  # L x (B, 1)
        v = x.new_zeros(x.shape[0], self.hidden_size)  # (B, H)
        states = []
        # Observed steps are a prefix of each row and a step only sees the past, so padding
        # cannot reach an observed step's state: no per-step masking is needed.
        for sensory_t, dt_t in zip(sensory, dt):
            v = self._advance(v, syn, sensory_t, dt_t)
            states.append(v)
        states = torch.stack(states, dim=1)  # (B, L, H)
        if self.per_step:
            return self.readout(states)  # (B, L, O)
        return self.readout(gather_steps(states, last_valid_index(mask)))  # (B, O)


def _polarities(shape: tuple[int, int]) -> torch.Tensor:
    """Random reversal potentials in {-1, +1}, P(+1) = 2/3."""
    return torch.where(torch.rand(shape) < 1.0 / 3.0, -1.0, 1.0)
