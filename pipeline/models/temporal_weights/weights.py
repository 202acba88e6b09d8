"""Temporal weights (Kohan, Rietman & Siegelmann 2022, "Temporal Weights", arXiv:2301.04126).

A layer's weights are rebuilt at every time t the ODE solver asks for, from fixed parameters W
(Sec. 2.3, Eqs. 1-2):

    W'_l = S(W_l, t),    w'_i = sum_{j=1}^{#W_l} K_ij / #W_l * sin(f_l(t) (w_i - w_j) + phi_l(t))

i and j run over every weight of the layer (W_l flattened, #W_l entries), K holds learned
coupling coefficients, f_l(t) scales and phi_l(t) shifts the phase; each layer is synchronised
on its own. Algorithm 1 then runs the ODE network on these weights: h'_l = tanh(h'_{l-1} W'_l).

Coupling scope (`scope`, the range of j in Eq. 2):
    "full"   every weight with every other, normalised by #W_l: the paper's Eq. 2 (default).
    "row"    only the weights of the same output row, normalised by the row length: this
             project's approximation, not in the paper.
    "block"  only `block` consecutive weights of the flattened matrix: likewise an approximation.

Form of K (`coupling`). A learned dense K is #W x #W per layer: 8.3 M entries for the 2,875
weights of the paper's TW decoder ODE alone, whereas the paper's TW Latent ODE has 52,016
parameters in all (Table 1b). Those totals fit one coefficient per weight exactly (see
search_spaces/latent_ode_tw.yaml), so:
    "weight" K_ij = k_i: weight i's coupling strength, a matrix of W's shape (#W coefficients).
             Default: what the printed parameter counts allow.
    "rank1"  K_ij = k_i c_j: adds how strongly weight j drives the others (2 #W coefficients).
    "dense"  a learned (n, n) K per group of n coupled weights: Eq. 2 with no restriction, for
             small groups only (n <= MAX_DENSE_GROUP).

Cost. With b_j = f w_j and a_i = b_i + phi, sin(a_i - b_j) = sin a_i cos b_j - cos a_i sin b_j,
so sum_j K_ij sin(a_i - b_j) needs only C_i = sum_j K_ij cos b_j and S_i = sum_j K_ij sin b_j:
for the factorised forms C and S are one sum per group (O(#W) for all-to-all coupling, no
(#W, #W) tensor is ever built), for "dense" two matrix-vector products with K.

This project's choices, not given by the paper (Sec. 2.3 names f_l(t), phi_l(t) "scaling" and
"shifting parameters" but gives no functional form of t): f and phi come from one small tanh
network of t per layer (1 -> clock_units -> 2), initialised to f = 1, phi = 0; K starts at all
ones, so at initialisation w'_i ~ w_i - mean(w) for small weights.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from pipeline.models.temporal_weights.fused import FactoredEq2

SCOPES = ("full", "row", "block")
COUPLINGS = ("weight", "rank1", "dense")
# "mlp": the base family's field (biases, activation between layers, a linear last layer), as
# the reference code's networks are; "algorithm1": Algorithm 1 as printed, no bias and tanh after
# every layer, the last included.
LAYOUTS = ("mlp", "algorithm1")
# "time": the observation time of each row (rows differ); "index": the observation index,
# shared by the batch, so the weights are built once per solver evaluation for all rows.
CLOCKS = ("time", "index")
MAX_DENSE_GROUP = 4096  # a dense K of 4096 coupled weights already holds 16.7 M coefficients


def _check_choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {sorted(valid)}")


def coupling_groups(rows: int, cols: int, scope: str, block: int) -> tuple[int, int]:
    """(number of groups G, group size n) of a rows x cols weight matrix under a scope.

    Raises ValueError for an unknown scope or block < 1.
    """
    _check_choice("tw_scope", scope, SCOPES)
    count = rows * cols
    if scope == "full":
        return 1, count
    if scope == "row":
        return rows, cols
    if block < 1:
        raise ValueError(f"tw_block must be >= 1, got {block}")
    size = min(block, count)
    return math.ceil(count / size), size


def coupling_coefficients(rows: int, cols: int, scope: str, block: int, coupling: str = "weight") -> int:
    """Number of learned coupling coefficients (entries of K) of one rows x cols matrix."""
    _check_choice("tw_coupling", coupling, COUPLINGS)
    groups, size = coupling_groups(rows, cols, scope, block)
    if coupling == "dense":
        return groups * size * size
    return rows * cols * (2 if coupling == "rank1" else 1)


def tw_options(scope: str, block: int, clock: str, units: int, coupling: str) -> dict:
    """Validate a family's tw_* arguments early; the TemporalLinear keyword arguments they set."""
    _check_choice("tw_clock", clock, CLOCKS)
    _check_choice("tw_coupling", coupling, COUPLINGS)
    coupling_groups(1, 1, scope, block)  # rejects an unknown scope or a bad block
    if units < 1:
        raise ValueError(f"tw_units must be >= 1, got {units}")
    return {"scope": scope, "block": block, "clock_units": units, "coupling": coupling}


def check_layout(layout: str) -> None:
    _check_choice("tw_layout", layout, LAYOUTS)


class _SinCos(torch.autograd.Function):
    """(sin a, cos a) with a backward that reuses them: autograd's own would compute cos a for
    sin's gradient and sin a (and a negation) for cos's, two more trigonometric passes over
    every weight and time, the most expensive elementwise operations of Eq. 2 on a CPU."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, angle: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sin, cos = angle.sin(), angle.cos()
        ctx.save_for_backward(sin, cos)
        return sin, cos

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_sin: torch.Tensor | None,
                 grad_cos: torch.Tensor | None) -> torch.Tensor:
        sin, cos = ctx.saved_tensors
        grad = torch.zeros_like(sin) if grad_sin is None else grad_sin * cos
        return grad if grad_cos is None else grad - grad_cos * sin


def sin_cos(angle: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin angle, cos angle), each angle's shape; first derivatives only (nothing here takes second ones)."""
    return _SinCos.apply(angle)


class TemporalWeights(nn.Module):
    """W' = S(W, t), Eqs. 1-2: t () or (B,) -> W' (rows, cols) or (B, rows, cols).

    Parameters: `weight` W (rows, cols); K as `coupling` (dense: (G, n, n)) or `receiver` k
    (rows, cols) and, for "rank1", `sender` c (rows, cols); `clock`, the network of t giving
    f(t) and phi(t).
    """

    def __init__(
        self,
        rows: int,
        cols: int,
        scope: str = "full",
        block: int = 16,
        clock_units: int = 16,
        coupling: str = "weight",
    ) -> None:
        super().__init__()
        _check_choice("tw_coupling", coupling, COUPLINGS)
        groups, size = coupling_groups(rows, cols, scope, block)
        if coupling == "dense" and size > MAX_DENSE_GROUP:
            raise ValueError(
                f"tw_coupling='dense' learns an {size}x{size} K per group of a {rows}x{cols} layer "
                f"(tw_scope={scope!r}); allowed up to {MAX_DENSE_GROUP} weights per group: use 'weight' or 'rank1'"
            )
        self.rows, self.cols, self.coupling_form = rows, cols, coupling
        count, padded = rows * cols, groups * size
        weight = torch.empty(rows, cols)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))  # nn.Linear's initialisation
        self.weight = nn.Parameter(weight)
        self.coupling = nn.Parameter(torch.ones(groups, size, size)) if coupling == "dense" else None
        self.receiver = None if coupling == "dense" else nn.Parameter(torch.ones(rows, cols))  # k_i
        self.sender = nn.Parameter(torch.ones(rows, cols)) if coupling == "rank1" else None  # c_j
        # The last block may be partly padding: its entries take no part in any sum.
        valid = (torch.arange(padded) < count).to(weight.dtype).view(groups, size)  # (G, n)
        self.register_buffer("_valid", valid, persistent=False)
        self.register_buffer("_inverse_members", 1.0 / valid.sum(dim=1, keepdim=True), persistent=False)  # (G, 1)
        self.register_buffer("_padding", size - valid.sum(dim=1), persistent=False)  # (G,)
        self._padded = padded != count
        self.clock = nn.Sequential(nn.Linear(1, clock_units), nn.Tanh(), nn.Linear(clock_units, 2))
        nn.init.zeros_(self.clock[2].weight)
        with torch.no_grad():
            self.clock[2].bias.copy_(torch.tensor([1.0, 0.0]))  # f = 1, phi = 0 at the start

    @property
    def groups(self) -> tuple[int, int]:
        """(G, n): the groups of coupled weights."""
        return tuple(self._valid.shape)

    def frequency_phase(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """t (...) -> f(t), phi(t), each (...)."""
        out = self.clock(t.unsqueeze(-1).to(self.weight.dtype))  # (..., 2)
        return out[..., 0], out[..., 1]

    def _grouped(self, values: torch.Tensor) -> torch.Tensor:
        """A (rows, cols) tensor as (G, n) groups, zero-padded at the end of the last block."""
        groups, size = self.groups
        flat = values.flatten()
        if groups * size == flat.numel():
            return flat.view(groups, size)
        return torch.cat([flat, flat.new_zeros(groups * size - flat.numel())]).view(groups, size)

    def _ungrouped(self, values: torch.Tensor) -> torch.Tensor:
        """(..., G, n) -> (..., rows, cols), padding dropped."""
        flat = values.flatten(-2)[..., : self.rows * self.cols]
        return flat.view(*flat.shape[:-1], self.rows, self.cols)

    def coupling_matrix(self) -> torch.Tensor:
        """K as (G, n, n) matrices, K[g, a, b] coupling member a of group g with member b.

        For inspection and tests on small layers: the forward pass never builds it for the
        factorised forms.
        """
        if self.coupling is not None:
            return self.coupling
        receiver = self._grouped(self.receiver)  # (G, n)
        sender = self._valid if self.sender is None else self._grouped(self.sender)
        return receiver.unsqueeze(-1) * sender.unsqueeze(-2)

    def _dense_sums(self, cos_j: torch.Tensor, sin_j: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """C_i = sum_j K_ij cos b_j and S_i likewise with sin, per group: (..., G, n) each.

        One bmm over the G groups with every leading row as a column, (G, n, n) @ (G, n, rows):
        its backward for K is then (G, n, rows) @ (G, rows, n). Broadcasting K over the rows
        instead made torch run one tiny bmm per row and group, ~1.4x slower on CPU.
        """
        values = torch.stack((cos_j, sin_j))  # (2, ..., G, n)
        shape = values.shape
        columns = values.reshape(-1, *shape[-2:]).permute(1, 2, 0)  # (G, n, rows)
        summed = torch.bmm(self.coupling, columns).permute(2, 0, 1).reshape(shape)
        return summed[0], summed[1]

    def _factored_sums(self, cos_j: torch.Tensor, sin_j: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """C = sum_j c_j cos b_j and S likewise, (..., G, 1) each: the same for every i of a
        group, k_i is applied afterwards (K_ij = k_i c_j, c = 1 for "weight")."""
        if self.sender is not None:
            sender = self._grouped(self.sender)  # (G, n), zero at padding
            cos_j, sin_j = cos_j * sender, sin_j * sender
        return cos_j.sum(-1, keepdim=True), sin_j.sum(-1, keepdim=True)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t (...) -> W'(t) (..., rows, cols), Eq. 2 per group."""
        if self.coupling is not None:
            return self.composed(t)
        f, phi = self.frequency_phase(t)
        sender = None if self.sender is None else self._grouped(self.sender)
        new = FactoredEq2.apply(f.reshape(-1), phi.reshape(-1), self._grouped(self.weight),
                                self._grouped(self.receiver), sender, self._padding, self._inverse_members[:, 0])
        return self._ungrouped(new.view(*f.shape, *new.shape[-2:]))

    def composed(self, t: torch.Tensor) -> torch.Tensor:
        """forward(t) through autograd's own operations: every coupling form; for the
        factorised ones the reference the fused Function (tw_fused) is tested against."""
        grouped = self._grouped(self.weight)  # (G, n)
        f, phi = self.frequency_phase(t)
        f, phi = f[..., None, None], phi[..., None, None]  # (..., 1, 1)
        angle = f * grouped  # (..., G, n): b_j = f w_j
        sin_b, cos_b = sin_cos(angle)
        cos_j, sin_j = cos_b, sin_b
        if self._padded:  # padding takes no part in any sum
            cos_j, sin_j = cos_b * self._valid, sin_b * self._valid
        sums = self._dense_sums if self.coupling is not None else self._factored_sums
        c_sum, s_sum = sums(cos_j, sin_j)
        # sum_j K_ij sin(a_i - b_j) = sin a_i C_i - cos a_i S_i with a_i = b_i + phi; expanding
        # sin a_i and cos a_i reuses cos b, sin b: two trigonometric calls per weight, not four.
        cos_phi, sin_phi = phi.cos(), phi.sin()
        # the 1 / n of Eq. 2 (n = #W: full) scales the coefficients, which are one per group for
        # the factorised forms, not the (..., G, n) products: one full-size operation fewer
        scale = self._inverse_members
        along_sin = (c_sum * cos_phi + s_sum * sin_phi) * scale
        along_cos = (c_sum * sin_phi - s_sum * cos_phi) * scale
        new = self._ungrouped(torch.addcmul(sin_b * along_sin, cos_b, along_cos))  # (..., rows, cols)
        return new if self.receiver is None else new * self.receiver


class TemporalLinear(nn.Module):
    """y = x W'(t)^T + b: x (B, in) and t () or (B,) -> (B, out); W' from Eq. 2."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        scope: str,
        block: int,
        clock_units: int,
        coupling: str = "weight",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.weights = TemporalWeights(out_features, in_features, scope, block, clock_units, coupling)
        self.bias = nn.Parameter(torch.empty(out_features).uniform_(-1, 1) / math.sqrt(in_features)) if bias else None

    def forward(self, x: torch.Tensor, t: torch.Tensor | None, weight: torch.Tensor | None = None) -> torch.Tensor:
        """`weight`: W'(t) built beforehand (TemporalMLP.stage_weights), then `t` is not read."""
        if weight is None:
            weight = self.weights(t)
        if weight.ndim == 2:  # one time for the whole batch
            out = x @ weight.T
        else:  # (B, out, in): every row at its own time
            # broadcast multiply and sum: on CPU several times faster forward + backward than
            # bmm over B tiny matrix-vector products (see fwp_rules.matvec)
            out = (weight * x.unsqueeze(-2)).sum(dim=-1)
        return out if self.bias is None else out + self.bias


class TemporalMLP(nn.Module):
    """An MLP of TemporalLinear layers, f_theta of Algorithm 1: (x (B, sizes[0]), t () or (B,))
    -> (B, sizes[-1]).

    layout "mlp": the base family's vector field, `activation` between layers (tanh for ODE-RNN
    and Latent ODE, ReLU for the NCDE field), biases, none after the last layer. "algorithm1":
    h'_l = activation(h'_{l-1} W'_l) for every layer, the last included, and no bias, as printed
    in Algorithm 1 (with its tanh).
    """

    def __init__(
        self,
        sizes: list[int],
        *,
        scope: str,
        block: int,
        clock_units: int,
        coupling: str = "weight",
        activation: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
        layout: str = "mlp",
    ) -> None:
        super().__init__()
        check_layout(layout)
        self.activation, self.activate_last = activation, layout == "algorithm1"
        options = {"scope": scope, "block": block, "clock_units": clock_units, "coupling": coupling}
        self.layers = nn.ModuleList(
            TemporalLinear(a, b, bias=layout == "mlp", **options) for a, b in zip(sizes, sizes[1:])
        )

    def stage_weights(self, times: torch.Tensor) -> list[torch.Tensor]:
        """W'(t) of every layer at many times at once: times (P, ...) -> per layer (P, ..., rows,
        cols), `...` empty (index clock) or the batch (time clock, rows last: each time's
        weights contiguous).

        Why: Eq. 2 costs about twenty small tensor operations per layer and call, which on CPU
        cost more than the arithmetic; a fixed-step solver evaluates the field at times known
        before it starts, so one call per chunk of solver steps replaces one call per
        evaluation (tw_stages).
        """
        return [layer.weights(times) for layer in self.layers]

    def forward(self, x: torch.Tensor, t: torch.Tensor | None,
                weights: list[torch.Tensor] | None = None) -> torch.Tensor:
        """`weights`: one W'(t) per layer built beforehand (stage_weights), then `t` is not read."""
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            x = layer(x, t, None if weights is None else weights[index])
            if index < last or self.activate_last:
                x = self.activation(x)
        return x
