"""Shared machinery of the continuous-time fast weight programmers (node_fwp.py, cde_fwp.py).

A slow net ("writer", self.rule) reads the path X(s) (and X'(s) for the CDE variants) and
programs, per head, a fast weight matrix W (d x d, d = hidden_size / num_heads) through one of
the learning rules of fwp_rules.py: dW/ds = F(X(s), X'(s), W(s)) (Eq. 18 / 23). W(0) is the rule's
write at s = 0, F(X(0), X'(0), 0), unless `static_channels` asks for the paper's Sepsis initial
state (Sec. 4; see StaticInitialState): W(0) from the static features, which then leave the path.
At the end, a query q = softmax(W_q LN(W_in A(T))), from the keys' input A (X, or X' for the
Delta CDE) through the same projection and layer norm as the keys, retrieves y = W q per head
(W^T q for the CDE Hebb/Oja variants), and, as in FastWeightODE / FastWeightCDE of
IDSIA/neuraldiffeq-fwp (experiments/models/metamodel.py), the heads are concatenated and go
through an output projection, dropout, a pre-norm residual Transformer feed-forward block and a
Linear to output_size.

Solving. Each row's field is switched off after its own last grid point T (`last`), so for
per-sequence outputs one torchdiffeq call over [0, T_max] returning only its end state gives
every row its W(T). With adjoint=True that call is odeint_adjoint, whose memory does not grow
with the sequence length. The switch is exact for the fixed-step solvers: every knot is a grid
point (the step is 1/ceil(1/step_fraction)) and torchdiffeq's `perturb` evaluates a step's last
stage just before the knot and the next step's first stage just after it; dopri5 stops at the
knots (jump_t), which perturbs the same way. Per-step outputs keep one state per grid point and
need no switch (a row's states after its T are never read): one solver call per unit interval
(solve_per_interval), or with the adjoint one odeint_adjoint call that outputs at every knot.

The path is only touched through CDEModel's hooks: `_path` (an object with .evaluate(s) and
.derivative(s), and the grid 0 .. T_max), `_to_steps` and `path_channels`; `last` indexes the grid.
So a mixin that feeds log-signature windows (logsig.py) works unchanged; a subclass that builds
W(0) otherwise overrides `_initial_state` (rde_node_fwp.py).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, ClassVar

import torch
import torchdiffeq
from torch import nn

from pipeline.models.blocks.cde import (
    FIXED_STEP_METHODS, INTERPOLATIONS, CDEModel, check_choice, solve_per_interval, solver_kwargs, stop_at_knots,
)
from pipeline.models.base import gather_steps
from pipeline.models.fast_weights.rules import delta_update, hebb_update, matvec

# Width of the static encoder's hidden layer: fixed at 256 in the reference (InitialValueNetwork,
# "256 was fixed in the original code/paper"), so it is not a searched argument here either.
STATIC_HIDDEN = 256


class FeedForward(nn.Module):
    """Pre-norm residual block: x + Dropout(W2 Dropout(ReLU(W1 LayerNorm(x))))."""

    def __init__(self, size: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(size), nn.Linear(size, ff_dim), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(ff_dim, size), nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class StaticInitialState(nn.Module):
    """W(0) from static features (paper Sec. 4, Sepsis: "five static features ... fed to the model
    to generate the initial state of the ODE"): static (B, S) -> W(0) (B, H, d, d).

        h          = ReLU(W_1 z + b_1)                         (B, 256)
        [k, v, b]  = W_2 h + b_2                               per head: (d, d, 1)
        W(0)       = sigmoid(b) tanh(v) softmax(k)^T           a Hebb write (fwp_rules.hebb_update)

    The paper gives no equation; this is InitialValueNetwork of IDSIA/neuraldiffeq-fwp
    (speech_and_physionet/experiments/sepsis.py, its fast weight branch), used as there for every
    rule and for both NODE and CDE writers; its outer product is value x key, the orientation of
    W in every rule of fwp_rules.py.
    """

    def __init__(self, static_channels: int, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.hidden = nn.Sequential(nn.Linear(static_channels, STATIC_HIDDEN), nn.ReLU())
        self.kvb_net = nn.Linear(STATIC_HIDDEN, num_heads * (2 * head_dim + 1))

    def forward(self, static: torch.Tensor) -> torch.Tensor:
        heads, d = self.num_heads, self.head_dim
        kvb = self.kvb_net(self.hidden(static)).view(static.shape[0], heads, 2 * d + 1)  # (B, H, 2d + 1)
        key_logits, values, rate = kvb.split((d, d, 1), dim=-1)
        return hebb_update(key_logits, values.tanh(), rate.sigmoid())


class _LeadingChannels:
    """The path restricted to its first `channels` channels: evaluate / derivative (..., K) -> (..., channels).

    Drops the static features (the last channels of x, pipeline/data/contract.py) from what the
    writer reads, as in the reference, whose control path holds only time and the time-varying
    channels while the statics go to the initial state alone.
    """

    def __init__(self, path: Any, channels: int) -> None:
        self.path, self.channels = path, channels

    def evaluate(self, s: torch.Tensor) -> torch.Tensor:
        return self.path.evaluate(s)[..., : self.channels]

    def derivative(self, s: torch.Tensor) -> torch.Tensor:
        return self.path.derivative(s)[..., : self.channels]


class _GatedField(nn.Module):
    """torchdiffeq right-hand side: flat W (B, H*d*d) -> dW/ds, zero for rows past their `end`
    (B,) if given.

    Built per forward call around that batch's path, so the path is never part of the model;
    its parameters are the writer's, which is what odeint_adjoint differentiates.
    """

    def __init__(self, rule: nn.Module, path: Any, end: torch.Tensor | None) -> None:
        super().__init__()
        self.rule = rule
        self.path = path
        self.end = end  # solver time after which each row's W is held

    def forward(self, s: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        heads, d = self.rule.num_heads, self.rule.head_dim
        weights = flat.view(flat.shape[0], heads, d, d)  # (B, H, d, d)
        dx = self.path.derivative(s) if self.rule.reads_derivative else None
        update = self.rule(self.path.evaluate(s), dx, weights).flatten(1)
        if self.end is None:
            return update
        return update * (s < self.end).to(flat.dtype).unsqueeze(-1)


def _unit_grid(steps_per_unit: int) -> Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]:
    """torchdiffeq grid_constructor: steps of 1/steps_per_unit from t[0] towards t[-1] (either
    direction, for the adjoint's backward solve); integer times stay exact grid points."""

    def construct(func: Any, y0: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        start, end = t[0], t[-1]
        count = max(math.ceil(abs(float(end - start)) * steps_per_unit - 1e-6), 1)
        offsets = torch.arange(count + 1, dtype=t.dtype, device=t.device) / steps_per_unit
        grid = start + torch.sign(end - start) * offsets
        grid[-1] = end
        return grid

    return construct


class FastWeightProgrammer(CDEModel):
    """Base of the FWP families: forward(coeffs, last, mask) -> (B, O), or (B, L, O) with per_step.

    Subclasses build `self.rule`, a writer module with `num_heads`, `head_dim`,
    `reads_derivative`, `value_tanh`, `update` (a rule of fwp_rules.py),
    `key_features(x, dx) -> (..., hidden)` and `__call__(x, dx, weights) -> dW (B, H, d, d)`,
    sized by `control_channels`, and set `transpose_readout`.
    `ff_dim` defaults to 4 * hidden_size, as in the reference.

    static_channels: 0 (default): W(0) is the rule's write at s = 0. S > 0: the last S channels of
    x are static features (meta.static_channels of the dataset, e.g. 5 on sepsis, 7 on
    sepsis_intensity); W(0) = StaticInitialState(their values at the first step) and the writer
    reads the path without them (control_channels = path_channels - S), as in the paper's
    Sepsis runs.
    """

    transpose_readout: ClassVar[bool] = False

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 80,
        num_heads: int = 4,
        ff_dim: int | None = None,
        dropout: float = 0.0,
        interpolation: str = "cubic",
        method: str = "rk4",
        step_fraction: float = 1.0,
        rtol: float = 1e-3,
        atol: float = 1e-4,
        max_steps: int = 100,
        adjoint: bool = False,
        static_channels: int = 0,
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        if isinstance(static_channels, bool) or not 0 <= static_channels <= input_channels:
            raise ValueError(
                f"static_channels must be in [0, input_channels={input_channels}] (the last channels of x), "
                f"got {static_channels!r}"
            )
        if num_heads < 1 or hidden_size < 1 or hidden_size % num_heads != 0:
            raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads} (both >= 1)")
        if ff_dim is not None and ff_dim < 1:
            raise ValueError(f"ff_dim must be >= 1 or None (4 * hidden_size), got {ff_dim}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if not 0.0 < step_fraction <= 1.0:
            raise ValueError(f"step_fraction must be in (0, 1] (of the observation spacing), got {step_fraction}")
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        # torchdiffeq kwargs as in the other CDE models (a log-signature mixin adjusts them);
        # the fixed-step grid that lands on every knot is derived from them at solve time.
        self.solver = solver_kwargs(method, step_fraction, rtol, atol, max_steps)
        self.steps_per_unit = math.ceil(1.0 / step_fraction - 1e-9)
        self.adjoint = adjoint
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.static_channels = static_channels
        self.static_init = (
            StaticInitialState(static_channels, num_heads, hidden_size // num_heads) if static_channels else None
        )
        self.query_net = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.feed_forward = FeedForward(hidden_size, ff_dim or 4 * hidden_size, dropout)
        self.readout = nn.Linear(hidden_size, output_size)

    def _squash_after_retrieval(self) -> None:
        """Delta's post_tanh: the writer leaves its values raw and the rule takes tanh(v - W k)."""
        self.rule.value_tanh = False
        self.rule.update = functools.partial(delta_update, post_tanh=True)

    @property
    def control_channels(self) -> int:
        """Channels the writer and the query read: the path's, less the static ones."""
        return self.path_channels - self.static_channels

    def _initial_state(self, start: torch.Tensor, x0: torch.Tensor, dx0: torch.Tensor | None) -> torch.Tensor:
        """W(0) (B, H, d, d) from start = X(0) of the full path (B, path_channels) and the writer's
        inputs at s = 0, x0 (B, control_channels) and dx0 (or None when the writer reads no X')."""
        if self.static_init is not None:
            return self.static_init(start[..., -self.static_channels :])
        return self.rule(x0, dx0, None)

    def forward(self, coeffs: torch.Tensor, last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        path, grid = self._path(coeffs, last, mask)
        start = path.evaluate(grid[0])  # (B, path_channels): X(0), the static features included
        if self.static_channels:
            path = _LeadingChannels(path, self.control_channels)
        x = path.evaluate(grid)  # (B, n, K) at the grid points
        dx = path.derivative(grid) if self.rule.reads_derivative else None  # at a knot: the segment ending there
        w0 = self._initial_state(start, x[:, 0], None if dx is None else dx[:, 0]).flatten(1)  # (B, H*d*d)
        if self.per_step:  # states at every knot; what W does after a row's T is never read
            weights = self._to_steps(self._solve_all(_GatedField(self.rule, path, None), w0, grid), mask)
            x, dx = self._to_steps(x, mask), None if dx is None else self._to_steps(dx, mask)  # (B, L, ...)
        else:
            weights = self._solve_end(_GatedField(self.rule, path, grid[last]), w0, grid)  # (B, H*d*d)
            x, dx = gather_steps(x, last), None if dx is None else gather_steps(dx, last)  # (B, K)
        return self._read(weights, self.rule.key_features(x, dx))

    def _read(self, flat: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Fast weights (..., H*d*d) and query features (..., hidden) -> outputs (..., O)."""
        heads, d = self.rule.num_heads, self.rule.head_dim
        weights = flat.view(*flat.shape[:-1], heads, d, d)  # (..., H, d, d)
        if self.transpose_readout:
            weights = weights.transpose(-1, -2)
        query = self.query_net(features).view(*features.shape[:-1], heads, d).softmax(dim=-1)  # (..., H, d)
        y = matvec(weights, query).flatten(-2)  # (..., H*d) = (..., hidden)
        return self.readout(self.feed_forward(self.dropout(self.out_proj(y))))

    def _odeint_kwargs(self, grid: torch.Tensor, gated: bool, outputs_at_knots: bool = True) -> dict:
        """Solver kwargs for one call over `grid`, stopping at every knot (grid point).

        Fixed steps: 1/steps_per_unit, so knots are grid points of the solver too; with a gated
        field `perturb` evaluates each step's stages on the step's own side of a knot.
        """
        if self.solver["method"] not in FIXED_STEP_METHODS:
            return stop_at_knots(self.solver, grid, outputs_at_knots=outputs_at_knots)
        options = {k: v for k, v in self.solver["options"].items() if k != "step_size"}
        options["grid_constructor"] = _unit_grid(self.steps_per_unit)
        if gated:
            options["perturb"] = True
        return {**self.solver, "options": options}

    def _solve_end(self, field: _GatedField, w0: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """W at T_max, (B, H*d*d): one call, so the adjoint keeps no state per step."""
        odeint = torchdiffeq.odeint_adjoint if self.adjoint else torchdiffeq.odeint
        return odeint(field, w0, grid[[0, -1]], **self._odeint_kwargs(grid, gated=True, outputs_at_knots=False))[-1]

    def _solve_all(self, field: _GatedField, w0: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """W at every grid point, (B, n, H*d*d)."""
        if self.adjoint:  # the adjoint's backward restarts at each output time itself
            kwargs = self._odeint_kwargs(grid, gated=False)
            return torchdiffeq.odeint_adjoint(field, w0, grid, **kwargs).transpose(0, 1)

        def solve(w: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
            return torchdiffeq.odeint(field, w, span, **self._odeint_kwargs(span, gated=False))[-1]

        return solve_per_interval(solve, w0, grid)
