"""Closed-form continuous-time network (CfC), Hasani et al. 2022, Nature Machine Intelligence.

Eq. 10 of the paper with a backbone network: per observation, with features
u = backbone([x_t, h]) and dt the time elapsed since the previous observation,

    gate  = sigmoid(f_a(u) * dt + f_b(u))
    h_new = tanh(g(u)) * (1 - gate) + gate * tanh(h_(u))

so the state moves from one candidate to the other as time passes, without an ODE solver.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .base import SequenceModel, check_raw_inputs


class LeCunTanh(nn.Module):
    """LeCun's scaled tanh, 1.7159 * tanh(0.666 x): unit variance for unit-variance inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1.7159 * torch.tanh(0.666 * x)


ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "lecun_tanh": LeCunTanh,
}


class CfCCell(nn.Module):
    """One CfC update: (x_t (B, C), h (B, H), dt (B,)) -> h_new (B, H)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        backbone_units: int,
        backbone_layers: int,
        activation: str,
        dropout: float,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = input_size + hidden_size
        for _ in range(backbone_layers):
            layers += [nn.Linear(width, backbone_units), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            width = backbone_units
        self.backbone = nn.Sequential(*layers)
        # The four heads g, h_, f_a, f_b as one matmul; identical to four Linear layers.
        self.heads = nn.Linear(backbone_units, 4 * hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        features = self.backbone(torch.cat([x, h], dim=-1))  # (B, units)
        g, h_, f_a, f_b = self.heads(features).chunk(4, dim=-1)  # 4 x (B, H)
        gate = torch.sigmoid(f_a * dt.unsqueeze(-1) + f_b)  # time-continuous gating
        return torch.tanh(g) * (1.0 - gate) + gate * torch.tanh(h_)


class CfC(SequenceModel):
    """CfC network stepping through the observations of each sequence.

    forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, output_size), or (B, L, output_size)
    with per_step. The state is held where mask is False, so the final state is the state at
    the last observed step.
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        backbone_units: int = 64,
        backbone_layers: int = 1,
        backbone_activation: str = "silu",
        backbone_dropout: float = 0.0,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        if backbone_activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown backbone_activation {backbone_activation!r}; valid: {sorted(ACTIVATIONS)}"
            )
        if backbone_layers < 1:
            raise ValueError(f"backbone_layers must be >= 1, got {backbone_layers}")
        self.hidden_size = hidden_size
        self.cell = CfCCell(
            input_channels, hidden_size, backbone_units, backbone_layers,
            backbone_activation, backbone_dropout,
        )
        self.readout = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        h = x.new_zeros(x.shape[0], self.hidden_size)  # (B, H)
        states = []
        for step in range(x.shape[1]):
            h_new = self.cell(x[:, step], h, dt[:, step])
            h = torch.where(mask[:, step, None], h_new, h)
            states.append(h)
        if self.per_step:
            return self.readout(torch.stack(states, dim=1))  # (B, L, H) -> (B, L, O)
        return self.readout(h)
