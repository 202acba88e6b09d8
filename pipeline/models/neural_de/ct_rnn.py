"""Continuous-time RNN (CT-RNN), as the baseline of Lechner & Hasani 2020 and the CfC paper.

The vector field of mlech26l/ode-lstms (node_cell.py, CTRNNCell): with the current observation
x_k held fixed over the interval of dt_k that ends at it,

    dh/dt = scale * tanh(W_in x_k + W_rec h + b) - leak * h

`scale` is learned per unit (initialised at 1); `leak` is a constant (1 in the reference, where
it is called tau; 0 gives their "node" variant). The reference unfolds 3 fixed rk4 steps per
observation; here torchdiffeq's rk4 (the 3/8-rule variant of RK4) takes the same step count.

One solve covers the whole sequence: the index axis s in [0, L] is the time axis, and the unit
interval [k, k+1] stands for row i's interval k, so dh/ds = dt[i, k] * f(h, x[i, k]). That is the
per-interval substitution of ode_rnn.py applied to all intervals at once. The fixed-step
solvers take exactly the steps of L separate solves (as fast: measured equal); dopri5 restarts
at every observation (jump_t) but chooses its first step size once, not once per interval,
which saved ~12% of the evaluations and ~35% of the time per batch. Rows with dt = 0
(padding) do not move.
"""

from __future__ import annotations

import torch
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import FIXED_STEP_METHODS, solver_kwargs, stop_at_knots
from pipeline.models.base import SequenceModel, check_raw_inputs


def check_solver_steps(solver_steps: int) -> None:
    if solver_steps < 1:
        raise ValueError(f"solver_steps must be >= 1, got {solver_steps}")


class _SequenceField(nn.Module):
    """dh/ds on s in [0, L]; on [k, k+1] the input and elapsed time of step k.

    The input projection W_in x + b is computed for all steps before the solve (B, L, H).
    """

    def __init__(self, model: CTRNN, drive: torch.Tensor, dt: torch.Tensor) -> None:
        super().__init__()
        self.vector_field = model.vector_field
        # Split once: indexing the (B, L, H) tensor in every evaluation would make each
        # evaluation's backward scatter into a full (B, L, H) gradient.
        self.drive = drive.unbind(1)  # L x (B, H)
        self.dt = dt.unsqueeze(-1).unbind(1)  # L x (B, 1)

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        # The solvers evaluate the end of a unit interval just below the integer (perturb /
        # jump_t), so floor(s) is the interval being integrated.
        k = min(max(int(s.floor()), 0), len(self.drive) - 1)
        return self.dt[k] * self.vector_field(self.drive[k], h)


class CTRNN(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    `solver_steps` fixed steps per observation interval for rk4/euler; rtol/atol and at most
    `max_steps` adaptive steps per interval for dopri5.
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        leak: float = 1.0,
        method: str = "rk4",
        solver_steps: int = 3,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_solver_steps(solver_steps)
        if leak < 0:
            raise ValueError(f"leak must be >= 0 (a decay rate), got {leak}")
        self.solver = solver_kwargs(method, 1.0 / solver_steps, rtol, atol, max_steps)
        self.solver_steps = solver_steps
        self.hidden_size = hidden_size
        self.leak = leak
        self.input_map = nn.Linear(input_channels, hidden_size)  # W_in, b
        self.recurrent = nn.Linear(hidden_size, hidden_size, bias=False)  # W_rec
        nn.init.orthogonal_(self.recurrent.weight)  # as the reference's recurrent kernel
        self.scale = nn.Parameter(torch.ones(hidden_size))
        self.readout = nn.Linear(hidden_size, output_size)

    def vector_field(self, drive: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """f(h, x) = scale * tanh(W_in x + b + W_rec h) - leak * h, from drive = W_in x + b (B, H)."""
        return self.scale * torch.tanh(drive + self.recurrent(h)) - self.leak * h

    def _solver_for(self, grid: torch.Tensor) -> dict:
        if self.solver["method"] not in FIXED_STEP_METHODS:
            return stop_at_knots(self.solver, grid)  # restart at each observation: the input jumps
        n = self.solver_steps

        def fine_grid(func: object, y0: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            # (k * n + j) / n: the observation indices are hit exactly, not up to rounding
            return torch.arange((len(t) - 1) * n + 1, dtype=t.dtype, device=t.device) / n

        return {"method": self.solver["method"], "options": {"grid_constructor": fine_grid, "perturb": True}}

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        batch, length = mask.shape
        field = _SequenceField(self, self.input_map(x), dt * mask)  # held where mask is False
        grid = torch.arange(length + 1, dtype=x.dtype, device=x.device)
        h0 = x.new_zeros(batch, self.hidden_size)
        states = torchdiffeq.odeint(field, h0, grid, **self._solver_for(grid))  # (L + 1, B, H)
        if self.per_step:
            return self.readout(states[1:].transpose(0, 1))  # (B, L, H) -> (B, L, O)
        return self.readout(states[-1])  # held after each row's last step
