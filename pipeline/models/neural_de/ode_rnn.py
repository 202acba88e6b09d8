"""ODE-RNN, Rubanova et al. 2019, as the baseline of Lechner & Hasani 2020 and the CfC paper.

Between observations the state follows dh/dt = f(h) for the elapsed time dt; at each
observation a GRU cell takes the value: h = GRUCell(x_t, h(t)).
"""

from __future__ import annotations

import torch
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import FIXED_STEP_METHODS, METHODS, check_choice
from pipeline.models.base import SequenceModel, check_raw_inputs


class _ElapsedTimeField(nn.Module):
    """dh/ds = dt * f(h) on s in [0, 1].

    torchdiffeq integrates one time interval for the whole batch, but every row has its own
    elapsed time dt. Substituting t = s * dt turns each row's dh/dt = f(h) on [0, dt] into
    dh/ds = dt * f(h) on the shared interval [0, 1] with the same end state; rows with dt = 0
    (padding) do not move.
    """

    def __init__(self, net: nn.Module, dt: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.dt = dt.unsqueeze(-1)  # (B, 1)

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.dt * self.net(h)


class ODERNN(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    `solver_steps` fixed steps per observation interval for rk4/euler; rtol/atol for dopri5.
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        vf_units: int = 64,
        method: str = "rk4",
        solver_steps: int = 3,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_choice("method", method, METHODS)
        if solver_steps < 1:
            raise ValueError(f"solver_steps must be >= 1, got {solver_steps}")
        self.hidden_size = hidden_size
        if method in FIXED_STEP_METHODS:
            self.solver = {"method": method, "options": {"step_size": 1.0 / solver_steps}}
        else:
            # capped adaptive steps per interval: past it the solve fails instead of crawling
            self.solver = {"method": method, "rtol": rtol, "atol": atol, "options": {"max_num_steps": max_steps}}
        self.field = nn.Sequential(
            nn.Linear(hidden_size, vf_units), nn.Tanh(), nn.Linear(vf_units, hidden_size)
        )
        self.cell = nn.GRUCell(input_channels, hidden_size)
        self.readout = nn.Linear(hidden_size, output_size)
        self.register_buffer("_unit_interval", torch.tensor([0.0, 1.0]), persistent=False)

    def _evolve(self, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """h (B, H) after dt (B,) of the ODE."""
        field = _ElapsedTimeField(self.field, dt)
        return torchdiffeq.odeint(field, h, self._unit_interval.to(h.dtype), **self.solver)[-1]

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        h = x.new_zeros(x.shape[0], self.hidden_size)  # (B, H)
        states = []
        for step in range(x.shape[1]):
            h_new = self.cell(x[:, step], self._evolve(h, dt[:, step]))
            h = torch.where(mask[:, step, None], h_new, h)
            states.append(h)
        if self.per_step:
            return self.readout(torch.stack(states, dim=1))  # (B, L, H) -> (B, L, O)
        return self.readout(h)
