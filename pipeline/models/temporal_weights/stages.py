"""The field of an ODE with temporal weights (Kohan, Rietman & Siegelmann 2022, Eqs. 1-2) with
W'(t) built ahead for every time a fixed-step solver will ask for, many solver times per call.

Why: Eq. 2 costs about twenty small tensor operations per layer and call; at the reference
sizes (latent 32, ODE of 10 units, batches of 32) those operations, not their arithmetic, are
the epoch's cost on a CPU. torchdiffeq's fixed-grid solvers evaluate the field only at
multiples of step / d (stage_grid), and the observation times are known before the solve, so
the weights of a whole chunk of intervals or solver steps come from one call and each
evaluation looks its weights up: the same values as building them at each evaluation (to
rounding; tests/test_temporal_weights.py compares outputs and gradients), in a fraction of the
operations. A chunk holds at most CHUNK_ELEMENTS weight entries per layer, which bounds the
transient memory of one call; what autograd keeps for the backward pass is the same as building
per evaluation. Adaptive solvers (dopri5) evaluate anywhere and build weights per evaluation,
as Algorithm 1 reads.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from pipeline.models.temporal_weights.weights import TemporalMLP, TemporalWeights

# torchdiffeq's fixed-grid solvers, as (d, whether the interval's end is evaluated): euler
# evaluates at each step's start (d = 1), midpoint at its start and half-way (d = 2), neither at
# the end of the interval; rk4 (its 3/8 rule, rk_common.rk4_alt_step_func) at thirds of each step,
# both ends included (d = 3).
STAGE_DIVISIONS = {"euler": (1, False), "midpoint": (2, False), "rk4": (3, True)}
_OFF_GRID = 1e-3  # in units of the grid: a solver time farther from a grid point builds its own
# Weight entries (all rows, all times) one call may build per layer: 4 Mi floats are 16 MiB per
# intermediate of Eq. 2, under glibc's largest mmap threshold (pipeline/runtime/allocator.py). The
# reference ODE-RNN-TW (batch 32, 6 new rk4 times per interval, 320 weights per layer) builds
# all its 50 intervals in one call, NCDE-TW (a 416 x 16 last layer) 6 rk4 steps per call.
CHUNK_ELEMENTS = 1 << 22

Build = Callable[[torch.Tensor], list[torch.Tensor]]  # clock (P, ...) -> each layer's W' (P, ..., rows, cols)


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


def weights_per_time(net: nn.Module) -> int:
    """Weight entries the temporal layers of `net` build for one time of one row (the largest
    layer's: chunks are sized per layer)."""
    return max(m.rows * m.cols for m in net.modules() if isinstance(m, TemporalWeights))


def chunk_length(net: nn.Module, times_per_unit: int) -> int:
    """How many units (intervals or solver steps) of `times_per_unit` times each (rows included)
    one call builds: at least one, at most CHUNK_ELEMENTS weight entries per layer."""
    return max(1, CHUNK_ELEMENTS // max(1, weights_per_time(net) * times_per_unit))


def time_major(clock: torch.Tensor) -> torch.Tensor:
    """A per-row clock (B, ...) as (..., B), so that the weights of one time are contiguous
    (..., B, rows, cols) and unbinding the times gives contiguous views."""
    return clock.movedim(0, -1)


def at_distinct_times(build: Callable[[torch.Tensor], torch.Tensor], clock: torch.Tensor) -> torch.Tensor:
    """W'(t) = build(t) at every time of a per-row clock (N, B) -> (N, B, rows, cols), Eq. 2
    evaluated once per distinct time: W'(t) is a function of t alone (Eqs. 1-2), so rows at the
    same time share it. A shared clock (N,) is built as it is.

    Why: per row, a batch's times repeat. A padded row holds its last time (dt = 0) to the
    batch's longest row, and rows share observation times (PhysioNet's minute grid, the 00:00
    descriptors): on physionet2012 a batch of 50 evaluates 10,150 (row, time) pairs per ODE
    network, of 2,136 distinct times (docs/benchmarks/temporal-weights.md). Eq. 2 and its
    backward pass over (times, rows, cols) then run on the distinct times; each row's weights
    are one index_select of them (its backward one index_add). The values are those built per
    row (the same t gives the same W'(t), bit for bit).
    """
    if clock.ndim < 2:
        return build(clock)
    times, where = torch.unique(clock, return_inverse=True)  # (U,), (N, B)
    if times.numel() == clock.numel():
        return build(clock)
    built = build(times)  # (U, rows, cols)
    return built.index_select(0, where.flatten()).view(*clock.shape, *built.shape[1:])


class IntervalField(nn.Module):
    """dy/ds = scale * net(y, clock_start + s * clock_rate) on s in [0, 1]: an interval of
    length `scale` (B,) (signed: negative runs backwards in time) whose temporal-weight network
    reads the clock per row (clock_start, clock_rate (B,): time clock) or shared by the batch
    (0-dim: index clock); y (B, D).

    `stages`: each layer's weights at s = k / parts (k < len), `grid` = (parts, points), built
    ahead (IntervalStages); an evaluation at another s builds its own, as do all without them.
    """

    def __init__(self, net: TemporalMLP, scale: torch.Tensor, clock_start: torch.Tensor, clock_rate: torch.Tensor,
                 grid: tuple[int, int] | None = None, stages: list[tuple[torch.Tensor, ...]] | None = None) -> None:
        super().__init__()
        self.net, self.scale = net, scale.unsqueeze(-1)  # (B, 1)
        self.clock_start, self.clock_rate = clock_start, clock_rate
        self.grid, self.stages = grid, stages if grid is not None else None

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


class IntervalStages:
    """W'(t) of a TemporalMLP at every grid time of every observation interval j < n, built a
    chunk of intervals per call, when an interval of the chunk is first asked for (any order:
    the Latent ODE's encoder walks backwards).

    Interval j's clock runs from clock_start[..., j] at rate clock_rate[..., j]: (B, n) per row
    (time clock) or (n,) shared (index clock); grid = (parts, points) from stage_grid.
    `chained`: interval j ends where j + 1 starts (clock_start[j] + clock_rate[j] =
    clock_start[j + 1], as the ODE-RNN's observation times do), so where the grid includes the
    interval's end (rk4) that time's weights are built once for both: 6 instead of 7 times per
    interval with two rk4 steps.
    """

    def __init__(self, net: TemporalMLP, grid: tuple[int, int], clock_start: torch.Tensor,
                 clock_rate: torch.Tensor, chained: bool = False) -> None:
        self.net, self.grid = net, grid
        self.clock_start, self.clock_rate = clock_start, clock_rate
        parts, points = grid
        self.shared_end = chained and points == parts + 1
        self.stride = parts if self.shared_end else points  # built times per interval
        rows = clock_start.shape[0] if clock_start.ndim == 2 else 1
        self.size = chunk_length(net, self.stride * rows)
        self.chunks: dict[int, list[tuple[torch.Tensor, ...]]] = {}  # chunk -> each layer's weights, in time order

    def _clock(self, first: int, last: int) -> torch.Tensor:
        """The clock at every time intervals first .. last - 1 evaluate, (N, B) or (N,): stride
        times per interval, then (shared_end) the last interval's end."""
        parts, points = self.grid
        start, rate = self.clock_start[..., first:last, None], self.clock_rate[..., first:last, None]
        fractions = torch.arange(self.stride, dtype=start.dtype, device=start.device) / parts
        clock = (start + fractions * rate).flatten(-2)  # (B, c * stride) or (c * stride,)
        if self.shared_end:
            clock = torch.cat([clock, (start[..., -1, :] + rate[..., -1, :])], dim=-1)
        return time_major(clock) if clock.ndim == 2 else clock

    def _fill(self, chunk: int) -> None:
        first = chunk * self.size
        clock = self._clock(first, min(first + self.size, self.clock_start.shape[-1]))
        # one unbind of all the chunk's times, not indexing: its backward is one stack for all
        # the views, where each index would scatter into a zero tensor of the full size
        self.chunks[chunk] = [at_distinct_times(layer.weights, clock).unbind(0) for layer in self.net.layers]

    def at(self, interval: int) -> list[tuple[torch.Tensor, ...]]:
        """Each layer's P weights of `interval`, (rows, cols) or (B, rows, cols) each."""
        chunk = interval // self.size
        if chunk not in self.chunks:
            self._fill(chunk)
        first = (interval - chunk * self.size) * self.stride
        return [layer[first:first + self.grid[1]] for layer in self.chunks[chunk]]

    def field(self, interval: int, scale: torch.Tensor) -> IntervalField:
        """The interval's IntervalField, its weights looked up here; scale (B,) its signed length."""
        start, rate = self.clock_start[..., interval], self.clock_rate[..., interval]
        return IntervalField(self.net, scale, start, rate, self.grid, self.at(interval))


class StageCache:
    """W'(t) of temporal-weight layers at the times a fixed-step solver evaluates over a whole
    path, built a chunk of solver steps per call when the solver first reaches it: for the
    models that solve once over all the observations (GRU-ODE-TW, NCDE-TW).

    The solver runs from `origin` in steps of `step` and evaluates at s = origin + k * step / d
    (stage_grid's d per step), k <= `last`; `clock` maps such s (P,) to the layers' clock, (P,)
    shared or (B, P) per row; `build` maps a clock (P, ...) to each layer's weights
    (P, ..., rows, cols). A time off that grid (the last step of a span the step does not
    divide) gets None: the caller builds its weights itself.
    """

    def __init__(self, build: Build, clock: Callable[[torch.Tensor], torch.Tensor], origin: float, step: float,
                 divisions: int, last: int, steps_per_chunk: int) -> None:
        self.build, self.clock = build, clock
        self.origin, self.step, self.divisions, self.last = origin, step, divisions, last
        self.width = divisions * steps_per_chunk  # points per chunk after the first
        self.chunks: dict[int, tuple[int, list[tuple[torch.Tensor, ...]]]] = {}  # chunk -> (first k, weights)

    def _chunk(self, k: int) -> int:
        """Point k's chunk: 0 holds k = 0 alone; chunk c + 1 the points after the start of its
        `steps_per_chunk` solver steps (a step's start is the previous step's end)."""
        return 0 if k == 0 else (k - 1) // self.width + 1

    def _fill(self, chunk: int, like: torch.Tensor) -> None:
        first = 0 if chunk == 0 else (chunk - 1) * self.width + 1
        count = 1 if chunk == 0 else min(self.width, self.last - first + 1)
        k = torch.arange(first, first + count, dtype=like.dtype, device=like.device)
        clock = self.clock(self.origin + k * (self.step / self.divisions))
        self.chunks[chunk] = (first, [w.unbind(0) for w in self.build(time_major(clock))])

    def at(self, s: torch.Tensor) -> list[torch.Tensor] | None:
        """Each layer's weights at solver time s, or None off the grid."""
        k = grid_point((float(s) - self.origin) / self.step * self.divisions)
        if k is None or k > self.last:
            return None
        chunk = self._chunk(k)
        if chunk not in self.chunks:
            self._fill(chunk, s)
        first, weights = self.chunks[chunk]
        return [layer[k - first] for layer in weights]


def cache_for(solver: dict, grid: torch.Tensor, net: nn.Module, build: Build,
              clock: Callable[[torch.Tensor], torch.Tensor], rows: int) -> StageCache | None:
    """A StageCache for one fixed-step torchdiffeq solve over `grid` (from its first time to
    its last) of `net`'s temporal layers with `rows` rows of weights per time (the batch for the
    time clock, 1 for the index clock); None for adaptive solvers and methods whose stage times
    are not known."""
    stages = STAGE_DIVISIONS.get(solver["method"])
    step = solver.get("options", {}).get("step_size")
    if stages is None or step is None:
        return None
    origin, end = float(grid[0]), float(grid[-1])
    last = math.floor((end - origin) / step * stages[0] + _OFF_GRID)  # the last grid point within the solve
    return StageCache(build, clock, origin, float(step), stages[0], last, chunk_length(net, stages[0] * rows))
