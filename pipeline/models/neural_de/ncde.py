"""Neural controlled differential equation, Kidger et al. 2020 (NeurIPS).

    z(0) = zeta(X(0)),    dz(s) = f(z(s)) dX(s),    y = l(z(T))

with X the interpolated path [t, x] over the index axis (see _cde.py), f an MLP whose output
is reshaped to a (hidden, C + 1) matrix and squashed by tanh (Kidger's "FinalTanh"), and T each
sequence's last observed index.
"""

from __future__ import annotations

import torch
import torchcde
from torch import nn

from pipeline.models.blocks.cde import INTERPOLATIONS, CDEModel, check_choice, solver_kwargs, stop_at_knots
from pipeline.models.base import gather_steps


class FinalTanhField(nn.Module):
    """f(z): (B, H) -> (B, H, K), ReLU MLP with `layers` hidden layers and a final tanh."""

    def __init__(self, hidden_size: int, path_channels: int, units: int, layers: int) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"vf_layers must be >= 1, got {layers}")
        self.hidden_size = hidden_size
        self.path_channels = path_channels
        modules: list[nn.Module] = [nn.Linear(hidden_size, units), nn.ReLU()]
        for _ in range(layers - 1):
            modules += [nn.Linear(units, units), nn.ReLU()]
        modules.append(nn.Linear(units, hidden_size * path_channels))
        self.net = nn.Sequential(*modules)

    def forward(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        out = self.net(z).view(*z.shape[:-1], self.hidden_size, self.path_channels)  # (B, H, K)
        return out.tanh()


class NeuralCDE(CDEModel):
    """forward(coeffs (B, L-1, 4(C+1)), last (B,), mask (B, L)) -> (B, O), or (B, L, O) with per_step."""

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 32,
        vf_units: int = 32,
        vf_layers: int = 3,
        interpolation: str = "cubic",
        method: str = "rk4",
        step_fraction: float = 1.0,
        rtol: float = 1e-4,
        atol: float = 1e-6,
        max_steps: int = 100,
        adjoint: bool = False,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.solver = solver_kwargs(method, step_fraction, rtol, atol, max_steps)
        self.adjoint = adjoint
        path_channels = self.path_channels
        self.initial = nn.Linear(path_channels, hidden_size)
        self.field = FinalTanhField(hidden_size, path_channels, vf_units, vf_layers)
        self.readout = nn.Linear(hidden_size, output_size)

    def forward(self, coeffs: torch.Tensor, last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        path, grid = self._path(coeffs, last, mask)
        z0 = self.initial(path.evaluate(grid[0]))  # (B, H)
        # One solver call: the state is small, so per-call overhead would outweigh the output copies
        # that make the fast-weight model solve one interval at a time.
        z = torchcde.cdeint(
            X=path, func=self.field, z0=z0, t=grid, adjoint=self.adjoint, **stop_at_knots(self.solver, grid)
        )
        # z: (B, n, H) at s = 0 .. n-1; the path is constant after each T, so z is too.
        if self.per_step:
            return self.readout(self._to_steps(z, mask))  # (B, L, O)
        return self.readout(gather_steps(z, last))  # (B, O)
