"""The field of an ODE with temporal weights (Kohan, Rietman & Siegelmann 2022, Eqs. 1-2) over
one interval mapped onto s in [0, 1], with W'(t) built once per interval for every time a
fixed-step solver will ask for.

Why: Eq. 2 costs about twenty small tensor operations per layer and evaluation; at the
reference sizes (latent 32, ODE of 10 units) those operations, not their arithmetic, are the
epoch's cost on a CPU. torchdiffeq's fixed-grid solvers evaluate the field only at multiples
of step / d of the interval, so all of an interval's W'(t) come from one batched call and each
evaluation looks its weights up: the same values as building them at each evaluation (to
rounding; tests/test_temporal_weights.py compares outputs and gradients), in a fraction of the
operations. Adaptive solvers (dopri5) evaluate anywhere and build weights per evaluation, as
Algorithm 1 reads.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .temporal_weights import TemporalMLP

# torchdiffeq's fixed-grid solvers, as (d, whether the interval's end is evaluated): euler
# evaluates at each step's start (d = 1), midpoint at its start and half-way (d = 2), neither at
# the end of the interval; rk4 (its 3/8 rule, rk_common.rk4_alt_step_func) at thirds of each step,
# both ends included (d = 3).
STAGE_DIVISIONS = {"euler": (1, False), "midpoint": (2, False), "rk4": (3, True)}
_OFF_GRID = 1e-3  # in units of the grid: a solver time farther from a grid point builds its own


def grid_point(position: float) -> int | None:
    """The grid point k a solver time lies on, given in grid units (float rounding allowed);
    None when it lies between points or before the first."""
    k = round(position)
    return k if abs(position - k) <= _OFF_GRID and k >= 0 else None


def stage_grid(solver: dict) -> tuple[int, int] | None:
    """(parts, points): this torchdiffeq solver configuration (`method`, `options.step_size`)
    evaluates the field only at s = k / parts for k < points; None when that is not known ahead
    (adaptive methods, or a step that does not divide the interval)."""
    stages = STAGE_DIVISIONS.get(solver["method"])
    step = solver.get("options", {}).get("step_size")
    if stages is None or step is None or abs(1.0 / step - round(1.0 / step)) > 1e-9:
        return None
    parts = stages[0] * round(1.0 / step)
    return parts, parts + 1 if stages[1] else parts


class IntervalField(nn.Module):
    """dy/ds = scale * net(y, clock_start + s * clock_rate) on s in [0, 1]: an interval of
    length `scale` (B,) (signed: negative runs backwards in time) whose temporal-weight network
    reads the clock per row (clock_start, clock_rate (B,): time clock) or shared by the batch
    (0-dim: index clock); y (B, D).

    `grid` (stage_grid): the weights at the clock times of s = k / parts, k < points, are built
    at construction and looked up at each evaluation; None builds them at each evaluation.
    """

    def __init__(self, net: TemporalMLP, scale: torch.Tensor, clock_start: torch.Tensor, clock_rate: torch.Tensor,
                 grid: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.net, self.scale = net, scale.unsqueeze(-1)  # (B, 1)
        self.clock_start, self.clock_rate = clock_start, clock_rate
        self.grid, self.stages = grid, None
        if grid is not None:
            parts, points = grid
            fractions = torch.arange(points, dtype=scale.dtype, device=scale.device) / parts  # (P,)
            times = clock_start.unsqueeze(-1) + fractions * clock_rate.unsqueeze(-1)  # (P,) or (B, P)
            self.stages = net.stage_weights(times)

    def _weights(self, s: torch.Tensor) -> list[torch.Tensor] | None:
        """Each layer's W' at solver time s, or None when s is off the grid (or there is none)."""
        if self.stages is None:
            return None
        parts, points = self.grid
        k = grid_point(float(s) * parts)
        if k is None or k >= points:
            return None
        return [layer[k] for layer in self.stages]

    def forward(self, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        weights = self._weights(s)
        clock = None if weights is not None else self.clock_start + s * self.clock_rate
        return self.scale * self.net(y, clock, weights)


class StageCache:
    """W'(t) of temporal-weight layers at the times a fixed-step solver evaluates over a whole
    path, built one solver step at a time, when the solver first reaches it: for the models that
    solve once over all the observations (GRU-ODE-TW, NCDE-TW), where building every step's
    weights up front would hold the intermediates of all of them at once.

    The solver runs from `origin` in steps of `step` and evaluates at s = origin + k * step / d
    (stage_grid's d per step); `clock` maps such s (P,) to the layers' clock, (P,) shared or
    (B, P) per row; `build` maps a clock to each layer's P weights (TemporalMLP.stage_weights, or
    one `weights(times).unbind(-3)` per TemporalLinear). A time off that grid (the last step of a
    span the step does not divide) gets None: the caller builds its weights itself.
    """

    def __init__(self, build: Callable[[torch.Tensor], list[tuple[torch.Tensor, ...]]],
                 clock: Callable[[torch.Tensor], torch.Tensor], origin: float, step: float, divisions: int) -> None:
        self.build, self.clock = build, clock
        self.origin, self.step, self.divisions = origin, step, divisions
        self.chunks: dict[int, tuple[int, list[tuple[torch.Tensor, ...]]]] = {}  # chunk -> (first k, weights)

    def _chunk(self, k: int) -> int:
        """Point k's chunk: 0 holds k = 0 alone; chunk j + 1 holds step j's points after its start."""
        return 0 if k == 0 else (k - 1) // self.divisions + 1

    def _fill(self, chunk: int, like: torch.Tensor) -> None:
        first = 0 if chunk == 0 else (chunk - 1) * self.divisions + 1
        count = 1 if chunk == 0 else self.divisions
        k = torch.arange(first, first + count, dtype=like.dtype, device=like.device)
        self.chunks[chunk] = (first, self.build(self.clock(self.origin + k * (self.step / self.divisions))))

    def at(self, s: torch.Tensor) -> list[torch.Tensor] | None:
        """Each layer's weights at solver time s, or None off the grid."""
        k = grid_point((float(s) - self.origin) / self.step * self.divisions)
        if k is None:
            return None
        chunk = self._chunk(k)
        if chunk not in self.chunks:
            self._fill(chunk, s)
        first, weights = self.chunks[chunk]
        return [layer[k - first] for layer in weights]


def cache_for(solver: dict, grid: torch.Tensor, build: Callable[[torch.Tensor], list[tuple[torch.Tensor, ...]]],
              clock: Callable[[torch.Tensor], torch.Tensor]) -> StageCache | None:
    """A StageCache for one fixed-step torchdiffeq solve over `grid` (its first time is the
    solver's origin); None for adaptive solvers and methods whose stage times are not known."""
    stages = STAGE_DIVISIONS.get(solver["method"])
    step = solver.get("options", {}).get("step_size")
    if stages is None or step is None:
        return None
    return StageCache(build, clock, float(grid[0]), float(step), stages[0])
