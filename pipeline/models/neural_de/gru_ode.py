"""GRU-ODE, the continuous GRU baseline of Kidger et al. 2020 (NeurIPS; also a baseline of the
fast-weight paper, Irie et al. 2022), as in patrick-kidger/NeuralCDE experiments/models/
vector_fields.py (_GRU_ODE) wrapped by metamodel.py (ContinuousRNNConverter):

    r = sigmoid(W_r x + U_r h + b_r),  z = sigmoid(W_z x + U_z h + b_z)
    g = tanh(W_h x + U_h (r * h) + b_h)
    dh = (1 - z) * (g - h) dt

with x(s) = X(s) - X(0) the interpolated input since the start (the reference carries it in the
state from zero), the ODE driven by the path's time channel t(s) (dt = t'(s) ds), h(0) = 0 and h
clamped to [-1, 1] inside the field, as the reference does. Read-out: a Linear of h(T).
"""

from __future__ import annotations

import torch
import torchcde
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import INTERPOLATIONS, CDEModel, check_choice, solver_kwargs, stop_at_knots
from pipeline.models.base import gather_steps


class GRUODEField(nn.Module):
    """(x (B, K), h (B, H)) -> dh/dt = (1 - z) * (g - h), (B, H).

    The three input maps W_r, W_z, W_h are one matmul, and so are U_r, U_z; U_h needs r first.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_map = nn.Linear(input_size, 3 * hidden_size, bias=False)  # W_r | W_z | W_h
        self.gate_map = nn.Linear(hidden_size, 2 * hidden_size)  # U_r | U_z
        self.candidate_map = nn.Linear(hidden_size, hidden_size)  # U_h

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        x_r, x_z, x_g = self.input_map(x).chunk(3, dim=-1)  # 3 x (B, H)
        h_r, h_z = self.gate_map(h).chunk(2, dim=-1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        g = torch.tanh(x_g + self.candidate_map(r * h))
        return (1.0 - z) * (g - h)


class _PathDrivenField(nn.Module):
    """torchdiffeq right-hand side over the index s: dh/ds = field(X(s) - X(0), h) * t'(s).

    Built per forward call around that batch's path. After a row's last observation its path is
    constant, t'(s) = 0, and h stops.
    """

    def __init__(self, model: "GRUODE", path: torchcde.CubicSpline, start: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.path = path
        self.start = start  # (B, K): X(0)

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        value = self.path.evaluate(s)  # (B, K); channel 0 is time
        time_speed = self.path.derivative(s)[:, :1]  # (B, 1): dt/ds
        rate = self.model.rate(value - self.start, h.clamp(-1.0, 1.0), s, value[:, 0])
        return rate * time_speed


class GRUODE(CDEModel):
    """forward(coeffs (B, L-1, 4(C+1)), last (B,), mask (B, L)) -> (B, O), or (B, L, O) with per_step."""

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 47,
        interpolation: str = "cubic",
        method: str = "rk4",
        step_fraction: float = 1.0,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
        adjoint: bool = False,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        self.hidden_size = hidden_size
        self.solver = solver_kwargs(method, step_fraction, rtol, atol, max_steps)
        self.adjoint = adjoint
        self.field = GRUODEField(self.path_channels, hidden_size)
        self.readout = nn.Linear(hidden_size, output_size)

    def rate(self, x: torch.Tensor, h: torch.Tensor, s: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """dh/dt at index s and path time `time` (B,); the plain GRU-ODE reads neither."""
        return self.field(x, h)

    def forward(self, coeffs: torch.Tensor, last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        path, grid = self._path(coeffs, last, mask)
        h0 = coeffs.new_zeros(coeffs.shape[0], self.hidden_size)  # (B, H), as the reference
        odeint = torchdiffeq.odeint_adjoint if self.adjoint else torchdiffeq.odeint
        func = _PathDrivenField(self, path, path.evaluate(grid[0]))
        h = odeint(func, h0, grid, **stop_at_knots(self.solver, grid)).transpose(0, 1)  # (B, n, H)
        if self.per_step:
            return self.readout(self._to_steps(h, mask))  # (B, L, O)
        return self.readout(gather_steps(h, last))  # (B, O)
