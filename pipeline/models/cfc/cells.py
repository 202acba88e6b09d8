"""Cells of the closed-form continuous-time family (Hasani et al. 2022, Nature Machine Intelligence).

Every cell reads features u = backbone([x_t, h]) of the current input and state and the elapsed
time dt, and returns the next state without an ODE solver:

    CfC (Eq. 10)   h' = tanh(g(u)) * (1 - s) + s * tanh(k(u)),   s = sigmoid(f_a(u) dt + f_b(u))
    no gate        h' = tanh(g(u)) + s * tanh(k(u))
    Cf-S (Eq. 9)   h' = B * exp(-(|w_tau| + |f(u)|) dt) * f(u) + A,   with B = -A

Eq. 9 reads x(t) = B exp(-[w_tau + f] t) f(-x, -I) + A with B = x(0) - A; the official code
(raminmh/CfC torch_cfc.py, ncps mode "pure") takes x(0) = 0, so B = -A, keeps f(x, I) and makes
the rate non-negative with absolute values. We follow it by default (`CfSCell`, Cf-S `form:
code`), because the paper's Cf-S numbers come from that code. `CfSEq9Cell` (`form: eq9`) is Eq. 9
as printed: f one sigmoid layer of [x, I] (positive, bounded and monotonic, as Lemma 1 assumes;
theta = {W_Ix, W_xx, b_x}), read twice with the same theta: f(x, I) in the rate and f(-x, -I) =
sigmoid(-(W_Ix I + W_xx x) + b_x) as the factor (the bias keeps its sign, so the factor is not
1 - f(x, I) and no weight can absorb the flip), B a learned vector of its own, and no backbone.
The CfC gate likewise follows the code: s = sigmoid(f_a(u) dt + f_b(u)) has an offset head f_b,
where Eq. 10's sigmoid(-f t) is 1/2 at t = 0; the Tables S1-S4 numbers come from the code. The
mixed-memory cell (CfC-mmRNN) puts
an LSTM in front: its cell state c carries long-term memory, its output feeds the CfC as state.

Two implementations by the same authors differ in details the paper does not print, and Tables
S1-S4 were made with either: raminmh/CfC torch_cfc.py (PhysioNet, Table S2) and tf_cfc.py (XOR,
IMDB and Walker2d: train_xor.py, train_imdb.py, train_walker.py import it). `code: torch` (the
default) follows the first, `code: keras` the second:
  - backbone dropout after every layer (Keras appends Dropout to each Dense; the PyTorch code only
    after layers 2 onwards, so a one-layer backbone has none there);
  - the candidate heads g and k squashed by LeCun's tanh, 1.7159 tanh(0.666 x), not tanh;
  - every bias starts at zero (Keras' Dense and LSTM), not at torch's default draw;
  - the mixed-memory cell wired as tf_cfc.py MixedCfcCell: the LSTM's output is the CfC's input
    and the CfC keeps its own state, where torch_cfc.py feeds the step's x to the CfC and the
    LSTM's output as its state.

Speed: the backbone's first layer acts on the concatenation [x_t, h]; it is stored as an input
part and a recurrent part, so the input part of all L steps is one matmul before the step loop
(`project_inputs`), and each step only adds h @ W_h. The heads g, k, f_a, f_b are one matmul.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


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


def _xavier_(weight: torch.Tensor, gain: float) -> None:
    with torch.no_grad():
        nn.init.xavier_uniform_(weight, gain=gain)


CODES = ("torch", "keras")  # which of the authors' implementations a cell follows (module docstring)


class Backbone(nn.Module):
    """u = MLP([x, h]): (B, C) input part and (B, H) state -> (B, units).

    `layers` Linear + activation blocks; dropout follows blocks 2..layers, as in the official
    PyTorch code (a one-layer backbone has none), or every block with `dropout_every_layer`, as
    in their Keras code.
    """

    def __init__(
        self, input_size: int, hidden_size: int, units: int, layers: int, activation: str, dropout: float,
        dropout_every_layer: bool = False,
    ) -> None:
        super().__init__()
        self.input_map = nn.Linear(input_size, units)
        self.recurrent_map = nn.Linear(hidden_size, units, bias=False)
        self.activation = ACTIVATIONS[activation]()
        self.first_dropout = nn.Dropout(dropout) if dropout_every_layer and dropout > 0 else nn.Identity()
        deeper: list[nn.Module] = []
        for _ in range(layers - 1):
            deeper += [nn.Linear(units, units), ACTIVATIONS[activation]()]
            if dropout > 0:
                deeper.append(nn.Dropout(dropout))
        self.deeper = nn.Sequential(*deeper)

    def first_weight(self) -> torch.Tensor:
        """The first layer as one (units, C + H) matrix acting on [x, h]."""
        return torch.cat([self.input_map.weight, self.recurrent_map.weight], dim=1)

    def reset_parameters(self, gain: float, zero_bias: bool = False) -> None:
        """Xavier-uniform with `gain` on every weight, the first layer as the one [x, h] matrix;
        `zero_bias`: every bias 0 (Keras' Dense), else torch's default draw."""
        first = torch.empty_like(self.first_weight())
        _xavier_(first, gain)
        with torch.no_grad():
            self.input_map.weight.copy_(first[:, : self.input_map.in_features])
            self.recurrent_map.weight.copy_(first[:, self.input_map.in_features :])
        deeper = [m for m in self.deeper if isinstance(m, nn.Linear)]
        for module in deeper:
            _xavier_(module.weight, gain)
        if zero_bias:
            for module in [self.input_map, *deeper]:
                nn.init.zeros_(module.bias)

    def project_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """(..., C) -> (..., units): the input part of the first layer, bias included."""
        return self.input_map(x)

    def forward(self, x_part: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x_part (B, units) from project_inputs, h (B, H) -> u (B, units)."""
        u = self.first_dropout(self.activation(torch.addmm(x_part, h, self.recurrent_map.weight.t())))
        return self.deeper(u) if len(self.deeper) else u


class CfCCell(nn.Module):
    """Eq. 10 (gated) or its no-gate ablation: (x_part (B, U), h (B, H), dt (B, 1)) -> h' (B, H).

    `code`: "torch" squashes the candidates g, k with tanh, "keras" with LeCun's tanh and starts
    every bias at 0 (module docstring)."""

    def __init__(self, backbone: Backbone, hidden_size: int, no_gate: bool, init_gain: float,
                 code: str = "torch") -> None:
        super().__init__()
        self.backbone = backbone
        self.hidden_size = hidden_size
        self.no_gate = no_gate
        self.squash: Callable[[torch.Tensor], torch.Tensor] = LeCunTanh() if code == "keras" else torch.tanh
        units = backbone.input_map.out_features
        # Heads g, k, f_a, f_b stacked in this order: one matmul instead of four.
        self.heads = nn.Linear(units, 4 * hidden_size)
        backbone.reset_parameters(init_gain, zero_bias=code == "keras")
        for head in self.heads.weight.view(4, hidden_size, units):  # each head as its own layer
            _xavier_(head, init_gain)
        if code == "keras":
            nn.init.zeros_(self.heads.bias)

    def project_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone.project_inputs(x)

    def forward(self, x_part: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        heads = self.heads(self.backbone(x_part, h))  # (B, 4H)
        candidates = self.squash(heads[:, : 2 * self.hidden_size])  # tanh(g), tanh(k): (B, 2H)
        g, k = candidates.chunk(2, dim=-1)
        f_a, f_b = heads[:, 2 * self.hidden_size :].chunk(2, dim=-1)
        gate = torch.sigmoid(torch.addcmul(f_b, f_a, dt))  # time-continuous gate (B, H)
        if self.no_gate:
            return torch.addcmul(g, gate, k)
        return torch.addcmul(g, gate, k - g)  # g (1 - gate) + gate k, one op fewer


class CfSEq9Cell(nn.Module):
    """Eq. 9 as printed: (x_part (B, H), h (B, H), dt (B, 1)) -> h' (B, H) with

        h' = B * exp(-(|w_tau| + f(h, x)) dt) * f(-h, -x) + A,   f(h, x) = sigmoid(W_Ix x + W_xx h + b_x)

    (the paper's state x is h here, its input I the step's x); |w_tau| keeps the rate positive."""

    def __init__(self, input_size: int, hidden_size: int, init_gain: float) -> None:
        super().__init__()
        self.input_map = nn.Linear(input_size, hidden_size, bias=False)  # W_Ix
        self.recurrent_map = nn.Linear(hidden_size, hidden_size, bias=False)  # W_xx
        self.bias = nn.Parameter(torch.zeros(1, hidden_size))  # b_x, outside the sign flip of f(-x, -I)
        self.w_tau = nn.Parameter(torch.zeros(1, hidden_size))
        self.A = nn.Parameter(torch.ones(1, hidden_size))
        self.B = nn.Parameter(-torch.ones(1, hidden_size))  # x(0) - A for x(0) = 0 at the start
        _xavier_(self.input_map.weight, init_gain)
        _xavier_(self.recurrent_map.weight, init_gain)

    def project_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.input_map(x)

    def forward(self, x_part: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        z = torch.addmm(x_part, h, self.recurrent_map.weight.t())  # W_Ix x + W_xx h, (B, H)
        rate = torch.sigmoid(z + self.bias)  # f(x, I), in (0, 1)
        factor = torch.sigmoid(self.bias - z)  # f(-x, -I), the same theta
        return torch.addcmul(self.A, self.B * factor, torch.exp(-dt * (self.w_tau.abs() + rate)))


class CfSCell(nn.Module):
    """Eq. 9, the direct closed-form solution: (x_part (B, U), h (B, H), dt (B, 1)) -> h' (B, H)."""

    def __init__(self, backbone: Backbone, hidden_size: int, init_gain: float, code: str = "torch") -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.input_map.out_features, hidden_size)  # f
        # The official code starts w_tau at 0 and A at 1 (its xavier loop then also redraws these
        # (1, H) tensors, which reads as unintended; we keep the stated starting values).
        self.w_tau = nn.Parameter(torch.zeros(1, hidden_size))
        self.A = nn.Parameter(torch.ones(1, hidden_size))
        backbone.reset_parameters(init_gain, zero_bias=code == "keras")
        _xavier_(self.head.weight, init_gain)
        if code == "keras":
            nn.init.zeros_(self.head.bias)

    def project_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone.project_inputs(x)

    def forward(self, x_part: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        f = self.head(self.backbone(x_part, h))  # (B, H)
        decay = torch.exp(-dt * (self.w_tau.abs() + f.abs()))
        return self.A - self.A * decay * f


class MemoryLSTMCell(nn.Module):
    """The LSTM of the mixed-memory CfC: (x_part (B, 4H), (h, c)) -> (h', c').

    As in the official PyTorch code: gates z = W_x x + b + W_h h in the order input, input gate,
    forget gate, output gate; forget gate sigmoid(z_f + forget_bias); xavier input weights,
    orthogonal recurrent weights, biases uniform in [-0.1, 0.1] (0 with `zero_bias`, as the Keras
    code's MixedCfcCell).
    """

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float, zero_bias: bool = False) -> None:
        super().__init__()
        self.forget_bias = forget_bias
        self.input_map = nn.Linear(input_size, 4 * hidden_size)
        self.recurrent_map = nn.Linear(hidden_size, 4 * hidden_size, bias=False)
        with torch.no_grad():
            nn.init.xavier_uniform_(self.input_map.weight)
            if zero_bias:
                nn.init.zeros_(self.input_map.bias)
            else:
                nn.init.uniform_(self.input_map.bias, -0.1, 0.1)
            nn.init.orthogonal_(self.recurrent_map.weight)

    def project_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """(..., C) -> (..., 4H): the input part of all gates, for every step at once."""
        return self.input_map(x)

    def forward(
        self, x_part: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.addmm(x_part, h, self.recurrent_map.weight.t())  # (B, 4H)
        i, i_gate, f_gate, o_gate = z.chunk(4, dim=-1)
        c = c * torch.sigmoid(f_gate + self.forget_bias) + torch.tanh(i) * torch.sigmoid(i_gate)
        return torch.tanh(c) * torch.sigmoid(o_gate), c
