"""ODE-LSTM, Lechner & Hasani 2020 (Algorithm 1), a baseline of the CfC paper.

Per observation x_k with elapsed time dt_k: an LSTM cell updates the pair (c, h), then the
output state alone follows a learned ODE for dt_k; the memory c is left untouched, which keeps
the LSTM's error flow through c:

    (c_k, h'_k) = LSTMCell(x_k, (c_{k-1}, h_{k-1}))
    h_k = h'_k + integral over [0, dt_k] of f(h) dt,   f = Linear -> tanh -> Linear (H -> H -> H)

as in the official PyTorch code (mlech26l/ode-lstms, torch_node_cell.py): 3 fixed rk4 steps
per observation there (torchdiffeq's 3/8-rule rk4 here, same step count), or dopri5.

`code: keras` is the authors' TensorFlow cell instead (node_cell.py ODELSTM), which made their
Walker2d figure (walker_kinematic.py) that the CfC paper's Table 7 quotes. There the ODE state z
is a state of its own, a CT-RNN driven by the LSTM's output u (node_cell.py CTRNNCell, tau = 1):

    (c_k, u_k) = LSTM(x_k, (c_{k-1}, z_{k-1}))          forget gate bias + 3, zero biases
    z_k = z_{k-1} + integral over [0, dt_k] of  scale * tanh(W_in u_k + W_rec z + b) - z
    output z_k

with the solver as given (the script: 4 explicit Euler steps per observation), glorot input and
orthogonal recurrent kernels, scale starting at 1.
"""

from __future__ import annotations

import torch
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import solver_kwargs
from pipeline.models.base import SequenceModel, check_raw_inputs
from pipeline.models.neural_de.ct_rnn import check_solver_steps
from pipeline.models.discrete.lstm_dt import CODES, init_forget_bias, keras_init


class _ElapsedField(nn.Module):
    """dh/ds = dt * f(h) on s in [0, 1]: each row's interval rescaled to unit length, so one
    solve serves a batch whose rows have different elapsed times dt (B,)."""

    def __init__(self, net: nn.Module, dt: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.dt = dt.unsqueeze(-1)  # (B, 1)

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.dt * self.net(h)


class _CTRNN(nn.Module):
    """The Keras ODE-LSTM's ODE (node_cell.py CTRNNCell with tau 1): the parameters of
    dz/dt = scale * tanh(W_in u + W_rec z + b) - z."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.input_map = nn.Linear(hidden_size, hidden_size)  # W_in, b
        self.recurrent_map = nn.Linear(hidden_size, hidden_size, bias=False)  # W_rec
        self.scale = nn.Parameter(torch.ones(hidden_size))
        with torch.no_grad():
            nn.init.xavier_uniform_(self.input_map.weight)
            nn.init.zeros_(self.input_map.bias)
            nn.init.orthogonal_(self.recurrent_map.weight)


class _DrivenField(nn.Module):
    """dz/ds = dt * (scale * tanh(drive + W_rec z) - z) on s in [0, 1]: one step's interval,
    drive = W_in u + b (B, H) of the LSTM output u held over it, dt (B,)."""

    def __init__(self, ctrnn: _CTRNN, drive: torch.Tensor, dt: torch.Tensor) -> None:
        super().__init__()
        self.ctrnn, self.drive, self.dt = ctrnn, drive, dt.unsqueeze(-1)

    def forward(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.dt * (self.ctrnn.scale * torch.tanh(self.drive + self.ctrnn.recurrent_map(z)) - z)


class ODELSTM(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    `solver_steps` fixed steps per observation interval for rk4/euler; rtol/atol and at most
    `max_steps` adaptive steps per interval for dopri5. `forget_bias` initialises the forget
    gate's bias (0 as nn.LSTMCell in the PyTorch reference; their TensorFlow cell adds 3).
    `code`: "torch" (default) or "keras", the module docstring's two cells.
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        method: str = "rk4",
        solver_steps: int = 3,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
        forget_bias: float = 0.0,
        code: str = "torch",
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        check_solver_steps(solver_steps)
        if code not in CODES:
            raise ValueError(f"unknown code {code!r}; valid: {list(CODES)}")
        self.code = code
        self.solver = solver_kwargs(method, 1.0 / solver_steps, rtol, atol, max_steps)
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(input_channels, hidden_size)
        self.readout = nn.Linear(hidden_size, output_size)
        if code == "keras":  # Keras' initialisers: glorot / orthogonal kernels, zero biases
            keras_init(self.cell, self.readout)
            self.field: nn.Module = _CTRNN(hidden_size)
        else:
            self.field = nn.Sequential(
                nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, hidden_size)
            )
        if forget_bias:
            init_forget_bias(self.cell, forget_bias)
        self.register_buffer("_unit_interval", torch.tensor([0.0, 1.0]), persistent=False)

    def evolve(self, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """h (B, H) after dt (B,) of dh/dt = f(h)."""
        field = _ElapsedField(self.field, dt)
        return torchdiffeq.odeint(field, h, self._unit_interval.to(h.dtype), **self.solver)[-1]

    def driven(self, z: torch.Tensor, u: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """The Keras cell's ODE state z (B, H) after dt (B,), driven by the LSTM output u (B, H)."""
        assert isinstance(self.field, _CTRNN)
        field = _DrivenField(self.field, self.field.input_map(u), dt)
        return torchdiffeq.odeint(field, z, self._unit_interval.to(z.dtype), **self.solver)[-1]

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        h = x.new_zeros(x.shape[0], self.hidden_size)  # (B, H): the output state (Keras: the ODE state z)
        c = torch.zeros_like(h)
        states = []
        for step in range(x.shape[1]):
            h_lstm, c_new = self.cell(x[:, step], (h, c))
            if self.code == "keras":
                h_new = self.driven(h, h_lstm, dt[:, step])
            else:
                h_new = self.evolve(h_lstm, dt[:, step])
            keep = mask[:, step, None]  # hold both states past the last observation
            h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
            states.append(h)
        if self.per_step:
            return self.readout(torch.stack(states, dim=1))  # (B, L, H) -> (B, L, O)
        return self.readout(h)
