"""Temporal weights (Kohan, Rietman & Siegelmann 2022, "Temporal Weights", arXiv:2301.04126).

A layer's weights are rebuilt at every time t from fixed parameters W by a synchronisation
(Kuramoto-type) coupling of the weights with each other:

    W' = S(W, t),    w'_i = sum_j K_ij / n * sin(f(t) (w_i - w_j) + phi(t))

K holds learned coupling coefficients, f(t) a frequency and phi(t) a phase, both functions of
time only; n is the number of weights coupled with w_i.

Coupling scope. Coupling every weight with every other needs #W^2 coefficients (64 x 64
weights: 16.7 M), so the scope is a constructor choice: "row" couples the weights of each
output row (rows x cols^2 coefficients), "block" consecutive blocks of `block` weights of the
flattened matrix (about #W x block), "full" all of them (#W^2, only up to MAX_FULL_WEIGHTS).

Cost. sin(a_i - b_j) = sin a_i cos b_j - cos a_i sin b_j with a_i = f w_i + phi, b_j = f w_j, so
the pairwise sum is two matrix-vector products with K per group: no (n, n) tensor of angles is
ever formed, and memory per evaluation is a few copies of W (per row of the batch when every
row has its own time).

Our choices where the formula leaves room (written down because the paper's full text could not
be checked here): f and phi come from one small tanh network of t, initialised to f = 1,
phi = 0; K starts at all ones, so at initialisation w'_i ~ w_i - mean(w) for small weights;
biases stay static.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

SCOPES = ("row", "block", "full")
# "time": the observation time of each row (rows differ); "index": the observation index,
# shared by the batch, so the weights are built once per solver evaluation for all rows.
CLOCKS = ("time", "index")
MAX_FULL_WEIGHTS = 4096  # full coupling of 4096 weights already means 16.7 M coefficients


def coupling_groups(rows: int, cols: int, scope: str, block: int) -> tuple[int, int]:
    """(number of groups, group size) of a rows x cols weight matrix under a scope.

    Raises ValueError for an unknown scope, block < 1 or a "full" matrix above MAX_FULL_WEIGHTS.
    """
    count = rows * cols
    if scope not in SCOPES:
        raise ValueError(f"unknown tw_scope {scope!r}; valid: {sorted(SCOPES)}")
    if scope == "row":
        return rows, cols
    if scope == "full":
        if count > MAX_FULL_WEIGHTS:
            raise ValueError(
                f"tw_scope='full' couples all {count} weights of a {rows}x{cols} layer ({count ** 2} "
                f"coefficients); allowed up to {MAX_FULL_WEIGHTS} weights: use 'row' or 'block'"
            )
        return 1, count
    if block < 1:
        raise ValueError(f"tw_block must be >= 1, got {block}")
    size = min(block, count)
    return math.ceil(count / size), size


def coupling_coefficients(rows: int, cols: int, scope: str, block: int) -> int:
    """Number of learned coupling coefficients K of one rows x cols matrix."""
    groups, size = coupling_groups(rows, cols, scope, block)
    return groups * size * size


class TemporalWeights(nn.Module):
    """W' = S(W, t): t () or (B,) -> weights (rows, cols) or (B, rows, cols)."""

    def __init__(self, rows: int, cols: int, scope: str = "row", block: int = 16, clock_units: int = 16) -> None:
        super().__init__()
        self.rows, self.cols = rows, cols
        groups, size = coupling_groups(rows, cols, scope, block)
        count, padded = rows * cols, groups * size
        weight = torch.empty(rows, cols)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))  # nn.Linear's initialisation
        self.weight = nn.Parameter(weight)
        self.coupling = nn.Parameter(torch.ones(groups, size, size))  # K, one (n, n) per group
        # The last block may be partly padding: its entries take no part in any sum.
        valid = (torch.arange(padded) < count).to(weight.dtype).view(groups, size)  # (G, n)
        self.register_buffer("_valid", valid, persistent=False)
        self.register_buffer("_inverse_members", 1.0 / valid.sum(dim=1, keepdim=True), persistent=False)  # (G, 1): 1/n
        self._padded = padded != count
        self.clock = nn.Sequential(nn.Linear(1, clock_units), nn.Tanh(), nn.Linear(clock_units, 2))
        nn.init.zeros_(self.clock[2].weight)
        with torch.no_grad():
            self.clock[2].bias.copy_(torch.tensor([1.0, 0.0]))  # f = 1, phi = 0 at the start

    def frequency_phase(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """t (...) -> f(t), phi(t), each (...)."""
        out = self.clock(t.unsqueeze(-1).to(self.weight.dtype))  # (..., 2)
        return out[..., 0], out[..., 1]

    def _grouped(self) -> torch.Tensor:
        """The weights as (G, n) groups, zero-padded at the end of the last block."""
        groups, size = self.coupling.shape[:2]
        flat = self.weight.flatten()
        if groups * size == flat.numel():
            return flat.view(groups, size)
        return torch.cat([flat, flat.new_zeros(groups * size - flat.numel())]).view(groups, size)

    def _couple(self, values: torch.Tensor) -> torch.Tensor:
        """sum_j K_ij values_j per group: (..., G, n) -> (..., G, n).

        One bmm over the G groups with every leading row as a column, (G, n, n) @ (G, n, rows):
        its backward for K is then (G, n, rows) @ (G, rows, n). Broadcasting K over the rows
        instead made torch run one tiny bmm per row and group, ~1.4x slower per ODE-RNN-TW
        batch on CPU (block 4, hidden 32), einsum about the same as that.
        """
        shape = values.shape
        columns = values.reshape(-1, *shape[-2:]).permute(1, 2, 0)  # (G, n, rows)
        return torch.bmm(self.coupling, columns).permute(2, 0, 1).reshape(shape)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        grouped = self._grouped()  # (G, n)
        f, phi = self.frequency_phase(t)
        f, phi = f[..., None, None], phi[..., None, None]  # (..., 1, 1)
        angle_j = f * grouped  # (..., G, n): f w_j
        angle_i = angle_j + phi  # (..., G, n): f w_i + phi
        cos_j, sin_j = angle_j.cos(), angle_j.sin()
        if self._padded:  # padding entries take no part in any sum
            cos_j, sin_j = cos_j * self._valid, sin_j * self._valid
        # sin(a_i - b_j) = sin a_i cos b_j - cos a_i sin b_j: two products with K, no (n, n) angles
        k_cos, k_sin = self._couple(torch.stack((cos_j, sin_j))).unbind(0)  # one bmm for both
        new = (angle_i.sin() * k_cos - angle_i.cos() * k_sin) * self._inverse_members
        new = new.flatten(-2)[..., : self.rows * self.cols]
        return new.view(*new.shape[:-1], self.rows, self.cols)


class TemporalLinear(nn.Module):
    """y = W'(t) x + b: x (B, in) and t () or (B,) -> (B, out)."""

    def __init__(
        self, in_features: int, out_features: int, *, scope: str, block: int, clock_units: int, bias: bool = True
    ) -> None:
        super().__init__()
        self.weights = TemporalWeights(out_features, in_features, scope, block, clock_units)
        self.bias = nn.Parameter(torch.empty(out_features).uniform_(-1, 1) / math.sqrt(in_features)) if bias else None

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        weight = self.weights(t)
        if weight.ndim == 2:  # one time for the whole batch
            out = x @ weight.T
        else:  # (B, out, in): every row at its own time
            # broadcast multiply and sum: on CPU several times faster forward + backward than
            # bmm over B tiny matrix-vector products (see fwp_rules.matvec)
            out = (weight * x.unsqueeze(-2)).sum(dim=-1)
        return out if self.bias is None else out + self.bias


class TemporalMLP(nn.Module):
    """An MLP of TemporalLinear layers: (x (B, sizes[0]), t () or (B,)) -> (B, sizes[-1]).

    The temporal counterpart of the plain vector-field MLPs: `activation` between layers (tanh
    for ODE-RNN and Latent ODE, ReLU for the NCDE field), none after the last.
    """

    def __init__(
        self,
        sizes: list[int],
        *,
        scope: str,
        block: int,
        clock_units: int,
        activation: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
    ) -> None:
        super().__init__()
        self.activation = activation
        self.layers = nn.ModuleList(
            TemporalLinear(a, b, scope=scope, block=block, clock_units=clock_units) for a, b in zip(sizes, sizes[1:])
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x, t) if index == 0 else layer(self.activation(x), t)
        return x


def check_clock(clock: str) -> None:
    if clock not in CLOCKS:
        raise ValueError(f"unknown tw_clock {clock!r}; valid: {sorted(CLOCKS)}")
