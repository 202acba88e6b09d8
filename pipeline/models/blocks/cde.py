"""Shared input and solver code of the models that read a continuous path ("interp").

The path X runs over the index axis s = 0 .. L-1 (observation spacing 1) with channels
[t, x_1 .. x_C]: time is a channel, as in Kidger et al. 2020, so irregular sampling reaches the
model through dX. The spline of each sequence is fitted to its own observed prefix only and
is exactly constant afterwards. Fitting the padded rows directly is not enough, although
torchcde fills trailing NaNs forward: the natural cubic spline is global, so it rings after
the last observation T and its observed part depends on how much padding the split has; the
Hermite spline still moves on [T, T + 1] with the last backward difference.

Causality (issue 30): with outputs at the knots, the state at step i reads X on [0, i]. Only
`hermite_causal` (causal_path.py) makes that depend on x_0 .. x_i alone; `cubic` and `hermite`
read later inputs (LATER_STEPS says how), so CDEModel.causal_arguments swaps in hermite_causal,
which is what every per-step task trains (pipeline/spaces/causal.py).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping

import torch
import torchcde

from pipeline.models.base import SequenceModel, argument_value, last_valid_index, model_arguments
from pipeline.models.blocks.causal_path import hermite_causal_coeffs

INTERPOLATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "cubic": torchcde.natural_cubic_coeffs,
    "hermite": torchcde.hermite_cubic_coefficients_with_backward_differences,
    "hermite_causal": hermite_causal_coeffs,  # causal_path.py: what per-step tasks train with
}
CAUSAL_INTERPOLATION = "hermite_causal"
# Why a per-step output at step i reads later inputs with each of the other interpolations.
LATER_STEPS = {
    "cubic": "interpolation cubic: the natural cubic spline is fitted to the whole series, so the path "
             "before step i moves with every later input",
    "hermite": "interpolation hermite: torchcde fills a missing value from the observation after its gap, "
               "and X'(0) = x_1 - x_0",
}
FIXED_STEP_METHODS = ("rk4", "euler")
METHODS = FIXED_STEP_METHODS + ("dopri5",)


def check_choice(name: str, value: str, valid: tuple[str, ...] | dict) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {sorted(valid)}")


def solver_kwargs(method: str, step_fraction: float, rtol: float, atol: float, max_steps: int) -> dict:
    """torchdiffeq keyword arguments: a fixed step of `step_fraction` index units, or tolerances
    with at most `max_steps` adaptive steps per unit interval.

    The cap bounds a trial's cost: past it torchdiffeq raises and the trial fails cleanly
    instead of crawling for hours through a stiff region.
    """
    check_choice("method", method, METHODS)
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if method in FIXED_STEP_METHODS:
        return {"method": method, "options": {"step_size": step_fraction}}
    return {"method": method, "rtol": rtol, "atol": atol, "options": {"max_num_steps": max_steps}}


def stop_at_knots(solver: dict, grid: torch.Tensor, *, outputs_at_knots: bool = True) -> dict:
    """Solver kwargs for one call over `grid`: adaptive solvers restart at the knots, where the
    spline's third derivative jumps (torchcde's advice for dopri5).

    torchdiffeq counts `max_num_steps` per output interval. With outputs at every knot (the
    default, t = grid) the per-interval cap stands as it is; a call that outputs only the two
    ends (outputs_at_knots=False, t = grid[[0, -1]]) gets the cap times the number of intervals.
    """
    if solver["method"] in FIXED_STEP_METHODS:
        return solver
    cap = solver["options"]["max_num_steps"] * (1 if outputs_at_knots else len(grid) - 1)
    return {**solver, "options": {"jump_t": grid, "max_num_steps": cap}}


def _end_value(coeffs: torch.Tensor, channels: int) -> torch.Tensor:
    """Value at the end of the last segment, (n, S, 4K) -> (n, K); segments have length 1."""
    a, b, two_c, three_d = coeffs[:, -1].split(channels, dim=-1)
    return a + b + 0.5 * two_c + three_d / 3.0


def path_coefficients(
    x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, interpolation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spline coefficients of the paths [t, x], one segment per index step.

    Args:
        x: (N, L, C) values, NaN where missing and at padding.
        t: (N, L) times.
        mask: (N, L) bool, True at observed steps (a prefix of each row).
        interpolation: "cubic" (natural cubic spline), "hermite" (torchcde's Hermite cubic
            with backward differences, causal on complete rows only) or "hermite_causal" (the
            same over values carried forward, causal; causal_path.py).
    Returns:
        coeffs (N, max(L - 1, 1), 4 * (C + 1)) for torchcde.CubicSpline, in x's dtype; segments
        from each row's last observed step on are constant. last (N,) long.
    """
    check_choice("interpolation", interpolation, INTERPOLATIONS)
    fit = INTERPOLATIONS[interpolation]
    path = torch.cat([t.unsqueeze(-1), x], dim=-1).double()  # (N, L, K); float64 for the fit
    n_rows, length, channels = path.shape
    last = last_valid_index(mask)
    coeffs = path.new_zeros(n_rows, max(length - 1, 1), 4 * channels)
    for prefix in (last + 1).unique().tolist():
        rows = (last + 1 == prefix).nonzero().squeeze(1)
        if prefix == 1:  # a single observation: a constant path
            end = torch.nan_to_num(path[rows, 0], nan=0.0)
        else:
            # torchcde's missing-value branch loops in Python, so keep complete rows out of it.
            piece = path[rows, :prefix]  # (n, prefix, K)
            has_nan = piece.isnan().flatten(1).any(dim=1)
            for subset in (rows[~has_nan], rows[has_nan]):
                if len(subset):
                    coeffs[subset, : prefix - 1] = fit(path[subset, :prefix])
            end = _end_value(coeffs[rows, : prefix - 1], channels)
        # constant tail: a = X(T), b = c = d = 0
        coeffs[rows, prefix - 1 :, :channels] = end.unsqueeze(1)
    return coeffs.to(x.dtype), last


class CDEModel(SequenceModel):
    """Base of the "interp" models: inputs are spline coefficients, built once per split."""

    representation: ClassVar[str] = "interp"
    input_arguments: ClassVar[tuple[str, ...]] = ("interpolation",)

    @classmethod
    def reads_later_steps(cls, model_kwargs: Mapping[str, Any]) -> str | None:
        """Why the path makes a per-step output read later inputs (LATER_STEPS), or None."""
        return LATER_STEPS.get(str(argument_value(cls, model_kwargs, "interpolation")))

    @classmethod
    def causal_arguments(cls, model_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """model_kwargs with the causal interpolation (hermite_causal) in place of cubic or hermite."""
        if cls.reads_later_steps(model_kwargs) is None:
            return dict(model_kwargs)
        return {**model_kwargs, "interpolation": CAUSAL_INTERPOLATION}

    @classmethod
    def prepare_inputs(
        cls, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, **model_kwargs: object
    ) -> dict[str, torch.Tensor]:
        """Whole split -> {"coeffs": (N, L-1, 4(C+1)), "last": (N,) long, "mask": (N, L)}.

        Only `interpolation` of model_kwargs is used (default: the model's own default).
        For L == 1 there is still one (constant) segment.
        """
        default = model_arguments(cls)["interpolation"].default
        interpolation = str(model_kwargs.get("interpolation", default))
        coeffs, last = path_coefficients(x, t, mask, interpolation)
        return {"coeffs": coeffs, "last": last, "mask": mask}

    @property
    def path_channels(self) -> int:
        """Channels of the path the vector field reads: time plus the values; a subclass that
        feeds another path (log-signature windows) overrides it. Read it in __init__ to size layers."""
        return self.input_channels + 1

    def _path(
        self, coeffs: torch.Tensor, last: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torchcde.CubicSpline, torch.Tensor]:
        """Spline over the steps this batch needs and the solver's output grid 0, 1, .., T_max.

        Steps after the batch's longest sequence are constant for every row, so they are not
        solved; the grid has at least two points because the solvers need an interval.
        """
        path_channels = self.path_channels
        if (
            coeffs.ndim != 3
            or coeffs.shape[-1] != 4 * path_channels
            or last.shape != coeffs.shape[:1]
            or mask.shape[0] != coeffs.shape[0]
        ):
            raise ValueError(
                f"expected coeffs (B, S, {4 * path_channels}), last (B,) and mask (B, L); got "
                f"coeffs {tuple(coeffs.shape)}, last {tuple(last.shape)}, mask {tuple(mask.shape)}"
            )
        segments = max(int(last.max()), 1)
        grid = torch.arange(segments + 1, dtype=coeffs.dtype, device=coeffs.device)
        return torchcde.CubicSpline(coeffs[:, :segments]), grid

    def _to_steps(self, seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-step outputs: states on the solver grid (B, n, ...) -> one per step (B, L, ...).

        The grid points are the observation indices here, so this cuts or repeats the last
        state; paths whose knots are not the observations (log-signature windows) override it.
        """
        return fit_length(seq, mask.shape[1])


def solve_per_interval(
    solve: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], y0: torch.Tensor, grid: torch.Tensor
) -> torch.Tensor:
    """States at every grid point, (B, n, ...), from `solve(y (B, ...), span (2,)) -> y at span[1]`.

    For large states: torchdiffeq writes each output time of a call into a preallocated tensor,
    and the backward of every such write copies the whole output gradient, quadratic in the
    number of output times. One call per unit interval avoids that; it also restarts adaptive
    solvers at every knot, where the spline's third derivative jumps.
    """
    states = [y0]
    for step in range(len(grid) - 1):
        states.append(solve(states[-1], grid[step : step + 2]))
    return torch.stack(states, dim=1)


def fit_length(seq: torch.Tensor, length: int) -> torch.Tensor:
    """(B, n, ...) -> (B, length, ...): cut, or repeat the last entry (the padding steps)."""
    if seq.shape[1] >= length:
        return seq[:, :length]
    tail = seq[:, -1:].expand(-1, length - seq.shape[1], *seq.shape[2:])
    return torch.cat([seq, tail], dim=1)
