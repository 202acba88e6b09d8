"""Continuous depth recurrent neural differential equations, Anumasa, Gunapati & Srijith
(arXiv 2212.13714, 2022; ICLR 2023 submission). The hidden state h(t, d) moves along time t and
along depth d in [0, D]:

    depth 0, along time (GRU-ODE with the input x_i on [t_{i-1}, t_i], h(t_{-1}) = 0):
        dh(t, 0)/dt = G(x_i, h(t, 0))
    CDR-NDE, along depth at each observation, fed by the previous observation at the same depth:
        dh(t_i, d)/dd = G'(h(t_{i-1}, d), h(t_i, d))
    CDR-NDE-heat, a heat equation along the sequence with a GRU source (method of lines):
        dh(t_i, d)/dd = k * D2_t h(t_i, d) + G'(h(t_{i-1}, d), h(t_i, d))
    output: y_i = W h(t_i, D) + b

with G(u, h) = (1 - z) * (g - h), z, r = sigmoid(W u + U h + b), g = tanh(W u + U (r * h) + b):
the GRU-ODE of De Brouwer et al. 2019, which is also GRUCell(u, h) - h. D2_t is the three-point
second difference over the (irregular) observation gaps, zero flux at each row's first and last
observed step. Before the first observation the state is 0 at every depth.

The paper's body text was not reachable here; these equations follow the issue text, the
abstract, and the Neural Wave Equation paper (ICLR 2025), which re-runs both models (Table 4:
CDR-NDE with explicit Euler at a time-step ratio 1/2, CDR-NDE-heat with dopri5, tolerances 1e-3).
Because h(t_i, d) depends on h(t_{i-1}, d) only at the same depth, the depth evolution of all
steps is one ODE in d over the state (B, L, H): the whole sequence moves at once, for both
variants, and only the depth-0 pass walks through time.
"""

from __future__ import annotations

import torch
import torchdiffeq
from torch import nn

from ._cde import FIXED_STEP_METHODS, METHODS, check_choice
from .base import SequenceModel, check_raw_inputs, gather_steps, last_valid_index


class GRUDerivative(nn.Module):
    """G(u, h) = (1 - z) * (g - h): the GRU-ODE right-hand side, (B.., 3H) projected u, (B.., H) h.

    The input maps W_r | W_z | W_g are one matmul (`project`, applied once to all steps when u is
    the data), and so are U_r | U_z; U_g needs r first.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_map = nn.Linear(input_size, 3 * hidden_size)  # W_r | W_z | W_g, with biases
        self.gate_map = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # U_r | U_z
        self.candidate_map = nn.Linear(hidden_size, hidden_size, bias=False)  # U_g

    def project(self, u: torch.Tensor) -> torch.Tensor:
        """(..., input_size) -> (..., 3H)."""
        return self.input_map(u)

    def forward(self, u_proj: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        u_r, u_z, u_g = u_proj.chunk(3, dim=-1)  # 3 x (..., H)
        h_r, h_z = self.gate_map(h).chunk(2, dim=-1)
        r = torch.sigmoid(u_r + h_r)
        z = torch.sigmoid(u_z + h_z)
        g = torch.tanh(u_g + self.candidate_map(r * h))
        return (1.0 - z) * (g - h)


class _TimeField(nn.Module):
    """Depth-0 pass as one ODE over the index s in [0, L]: on (i, i + 1], dh/ds = dt_i G(x_i, h).

    Substituting t = t_{i-1} + (s - i) dt_i gives every row its own time gaps on a shared grid;
    padding has dt = 0, so the state holds there. The solver is asked to restart at the knots
    (perturbed evaluations), so floor(s) names the interval even at its ends.
    """

    def __init__(self, derivative: GRUDerivative, x_proj: torch.Tensor, dt: torch.Tensor) -> None:
        super().__init__()
        self.derivative = derivative
        self.x_proj = x_proj  # (B, L, 3H)
        self.dt = dt.unsqueeze(-1)  # (B, L, 1)

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        step = min(int(s), self.dt.shape[1] - 1)  # s >= 0: int() is floor
        return self.dt[:, step] * self.derivative(self.x_proj[:, step], h)


def gap_weights(dt: torch.Tensor, mask: torch.Tensor, min_gap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Coefficients of the zero-flux second difference along the sequence.

    Gaps t_i - t_{i-1} are divided by the row's mean observed gap (so a regularly sampled row gets
    the plain [1, -2, 1] stencil and the diffusivity is unit-free) and floored at `min_gap`.
    Args: dt (B, L) elapsed times (0 at padding), mask (B, L).
    Returns: inv_gap (B, L-1, 1) = 1 / gap_i of the edge (i-1, i), 0 where step i is padding;
        inv_width (B, L, 1) = 2 / (gap_i + gap_{i+1}) over the gaps that exist, 0 for a lone step.
    """
    edge = mask[:, 1:]  # (B, L-1): the edge (i-1, i) exists when step i is observed
    gaps = dt[:, 1:] * edge
    mean = gaps.sum(dim=1, keepdim=True) / edge.sum(dim=1, keepdim=True).clamp(min=1)
    gaps = torch.where(edge, (gaps / mean.clamp(min=1e-12)).clamp(min=min_gap), torch.zeros_like(gaps))
    inv_gap = edge / gaps.clamp(min=min_gap)  # the clamp only keeps padding's 1 / 0 out
    zero = gaps.new_zeros(gaps.shape[0], 1)
    width = torch.cat([zero, gaps], dim=1) + torch.cat([gaps, zero], dim=1)  # (B, L): left + right
    inv_width = torch.where(width > 0, 2.0 / width.clamp(min=min_gap), torch.zeros_like(width))
    return inv_gap.unsqueeze(-1), inv_width.unsqueeze(-1)


def second_difference(h: torch.Tensor, inv_gap: torch.Tensor, inv_width: torch.Tensor) -> torch.Tensor:
    """D2_t h (B, L, H): 2 / (a + b) * ((h_{i+1} - h_i) / b - (h_i - h_{i-1}) / a), the flux
    through a missing edge (before the first step, after the last observed one) being zero."""
    flux = (h[:, 1:] - h[:, :-1]) * inv_gap  # (B, L-1, H): flux through edge (i-1, i)
    zero = h.new_zeros(h.shape[0], 1, h.shape[2])
    return inv_width * (torch.cat([flux, zero], dim=1) - torch.cat([zero, flux], dim=1))


class _DepthField(nn.Module):
    """dh(t_i, d)/dd for all steps at once, state (B, L, H); padded steps do not move."""

    def __init__(
        self,
        source: GRUDerivative,
        mask: torch.Tensor,
        diffusivity: float = 0.0,
        weights: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.moving = mask.unsqueeze(-1)  # (B, L, 1)
        self.diffusivity = diffusivity
        self.weights = weights

    def forward(self, d: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        previous = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)  # (B, L, H): h(t_{i-1}, d)
        rate = self.source(self.source.project(previous), h)
        if self.weights is not None:
            rate = rate + self.diffusivity * second_difference(h, *self.weights)
        return torch.where(self.moving, rate, torch.zeros_like(rate))


class CDRNDE(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    Both solves use `method`: fixed-step methods take `solver_steps` steps per observation
    interval (time) and over the depth interval [0, depth]; dopri5 uses rtol/atol and at most
    `max_steps` steps per observation interval and over the depth.
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        depth: float = 1.0,
        method: str = "euler",
        solver_steps: int = 2,
        rtol: float = 1e-3,
        atol: float = 1e-3,
        max_steps: int = 100,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_choice("method", method, METHODS)
        for name, value in (("hidden_size", hidden_size), ("solver_steps", solver_steps), ("max_steps", max_steps)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not depth > 0:
            raise ValueError(f"depth must be > 0, got {depth}")
        self.hidden_size = hidden_size
        self.depth = float(depth)
        self.method = method
        self.solver_steps = solver_steps
        self.rtol, self.atol, self.max_steps = rtol, atol, max_steps
        self.time_derivative = GRUDerivative(input_channels, hidden_size)
        self.depth_derivative = GRUDerivative(hidden_size, hidden_size)
        self.readout = nn.Linear(hidden_size, output_size)

    def _solve(self, field: nn.Module, y0: torch.Tensor, length: float, intervals: int) -> torch.Tensor:
        """Solutions at 0, length / intervals, .., length, (intervals + 1, ...). Each interval (an
        observation gap, or the whole depth) gets `solver_steps` fixed steps, or restarts dopri5
        with at most `max_steps` steps."""
        if self.method in FIXED_STEP_METHODS:
            # Grid points k / steps are exact at the knots, where perturb picks the interval.
            grid = torch.arange(intervals * self.solver_steps + 1, dtype=y0.dtype, device=y0.device)
            grid = grid * (length / intervals) / self.solver_steps
            out = torchdiffeq.odeint(field, y0, grid, method=self.method, options={"perturb": True})
            return out[:: self.solver_steps]
        grid = torch.linspace(0.0, length, intervals + 1, dtype=y0.dtype, device=y0.device)
        # torchdiffeq counts max_num_steps per output interval, here per unit interval.
        options = {"max_num_steps": self.max_steps, "jump_t": grid[1:-1]}
        return torchdiffeq.odeint(
            field, y0, grid, method=self.method, rtol=self.rtol, atol=self.atol, options=options
        )

    def _depth_field(self, dt: torch.Tensor, mask: torch.Tensor) -> nn.Module:
        return _DepthField(self.depth_derivative, mask)

    def states(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """h(t_i, D) for every step, (B, L, H); padding repeats the last observed step."""
        check_raw_inputs(x, dt, mask, self.input_channels)
        batch, length, _ = x.shape
        time_field = _TimeField(self.time_derivative, self.time_derivative.project(x), dt)
        h0 = x.new_zeros(batch, self.hidden_size)
        at_depth0 = self._solve(time_field, h0, float(length), length)[1:].transpose(0, 1)  # (B, L, H)
        final = self._solve(self._depth_field(dt, mask), at_depth0, self.depth, 1)[-1]  # (B, L, H)
        last = gather_steps(final, last_valid_index(mask))  # (B, H)
        return torch.where(mask.unsqueeze(-1), final, last.unsqueeze(1))

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        states = self.states(x, dt, mask)  # (B, L, H)
        if self.per_step:
            return self.readout(states)  # (B, L, O)
        return self.readout(gather_steps(states, last_valid_index(mask)))


class CDRNDEHeat(CDRNDE):
    """CDR-NDE-heat: the depth evolution gains k * D2_t h, coupling each step with both
    neighbours along the sequence (see second_difference). Diffusion is stiff: explicit Euler
    with step depth / solver_steps is stable only while diffusivity * step <= min gap^2 / 2."""

    def __init__(
        self, *, diffusivity: float = 1.0, min_gap: float = 0.25, method: str = "dopri5", **kwargs: object
    ) -> None:
        super().__init__(method=method, **kwargs)
        if not diffusivity > 0:
            raise ValueError(f"diffusivity must be > 0, got {diffusivity}")
        if not min_gap > 0:
            raise ValueError(f"min_gap must be > 0, got {min_gap}")
        self.diffusivity = float(diffusivity)
        self.min_gap = float(min_gap)

    def _depth_field(self, dt: torch.Tensor, mask: torch.Tensor) -> nn.Module:
        weights = gap_weights(dt, mask, self.min_gap)
        return _DepthField(self.depth_derivative, mask, self.diffusivity, weights)
