"""Log-signature window inputs ("logsig"): the log-ODE method of Morrill et al. 2021 (ICML, "Neural
rough differential equations for long time series").

The path X = [t, x] over the index axis (time as a channel, as in _cde.py) is cut into windows of
`logsig_step` observation steps, [0, r], [r, 2r], ...; each window is summarised by its depth-1 or
depth-2 log-signature, computed with signatory through torchcde.logsig_windows. The model is then
driven by the piecewise-linear path (torchcde.LinearInterpolation) through the knots

    Y_0 = [X_0, 0],    Y_{k+1} = Y_k + logsig(X on window k),    k = 0 .. W-1,

one unit of solver time per window, so on window k dY/ds = logsig_k and a CDE dz = f(z) dY is the
NRDE's dz/ds = f(z) logsig_k (jambo6/neuralRDEs, rdeint.py: one unit interval per window). The
level-1 part of Y_k is X at the window boundary k r, hence Y_0 carries the initial value [t_0, x_0]
that the NRDE's initial layer reads.

Missing values are filled by linear interpolation along the index axis within each row's observed
prefix (torchcde.linear_interpolation_coeffs: interior gaps linear, leading and trailing gaps held at
the nearest observation, a channel never observed is 0), then the row is held constant after its
last observation T. A window past T therefore has log-signature 0, and the window holding T only
sees [kr, T]: padding cannot change anything. The last window of a row may be partial: torchcde
keeps it (the reference FixedIntervalSampler drops a trailing partial window instead; here that
would throw away a row's last observations).

Shapes: N sequences, L padded steps, K = C + 1 path channels, D log-signature channels
(signatory.logsignature_channels(K, depth): K at depth 1, K + K(K-1)/2 at depth 2), W = number of
windows = ceil((L - 1) / r).
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch
import torchcde

from pipeline.models.blocks.cde import FIXED_STEP_METHODS
from pipeline.models.base import last_valid_index, model_arguments

LOGSIG_DEPTHS = (1, 2)


def check_logsig_args(depth: int, step: int) -> None:
    if depth not in LOGSIG_DEPTHS:
        raise ValueError(f"logsig_depth must be one of {list(LOGSIG_DEPTHS)}, got {depth!r}")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ValueError(f"logsig_step must be an integer >= 1 (observation steps per window), got {step!r}")


def windows_of(last: torch.Tensor, step: int) -> torch.Tensor:
    """(N,) last observed index -> (N,) index of the knot where that row's path ends: ceil(T / r)."""
    return torch.div(last + step - 1, step, rounding_mode="floor")


def filled_path(x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[t, x] without NaN, constant after each row's last observation.

    Args:
        x: (N, L, C) values, NaN where missing and at padding.
        t: (N, L) times.
        mask: (N, L) bool, True at observed steps (a prefix of each row).
    Returns:
        path (N, L, C + 1) in float64, last (N,) long.
    """
    path = torch.cat([t.unsqueeze(-1), x], dim=-1).double()  # (N, L, K)
    last = last_valid_index(mask)
    # torchcde fills one scalar series at a time in Python, so only rows with gaps go through it.
    gappy = path.isnan() & mask.unsqueeze(-1)
    for prefix in (last + 1).unique().tolist():
        rows = ((last + 1 == prefix) & gappy.flatten(1).any(dim=1)).nonzero().squeeze(1)
        if not len(rows):
            continue
        if prefix == 1:  # a single observation: unobserved channels are 0, as torchcde does
            path[rows, :1] = torch.nan_to_num(path[rows, :1], nan=0.0)
        else:
            path[rows, :prefix] = torchcde.linear_interpolation_coeffs(path[rows, :prefix])
    steps = torch.arange(path.shape[1], device=path.device)
    held = torch.minimum(steps, last.unsqueeze(1))  # (N, L): step j reads step min(j, T)
    return path.gather(1, held.unsqueeze(-1).expand_as(path)), last


def logsig_knots(
    x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, depth: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Knots of the cumulative log-signature path and each row's last knot (window units).

    Args:
        x: (N, L, C) values, NaN where missing and at padding.
        t: (N, L) times; mask: (N, L) bool observed prefix.
        depth: log-signature depth (1 or 2); step: window length r in observation steps.
    Returns:
        knots (N, max(W, 1) + 1, D) in x's dtype, for torchcde.LinearInterpolation; last (N,) long,
        ceil(T / r) for a row whose last observation is at index T.
    """
    check_logsig_args(depth, step)
    path, last = filled_path(x, t, mask)
    if path.shape[1] == 1:  # torchcde needs two points; a constant second one adds a zero window
        path = path.expand(-1, 2, -1)
    knots = torchcde.logsig_windows(path, depth, window_length=step)  # (N, W + 1, D), cumulative
    return knots.to(x.dtype), windows_of(last, step)


class LogSigInputs:
    """Mixin for a CDEModel subclass: drive it by the log-signature path instead of the spline.

    Put it first in the bases, `class NeuralRDE(LogSigInputs, NeuralCDE)`; the model's forward
    then receives `coeffs` = the knots of logsig_knots (B, S, D), `last` in window units and the
    `mask` (B, L). Per-step outputs: observation step j < T reads the state at the last window
    boundary at or before it, knot floor(j / r) (causal: later observations of the window are not
    used); steps j >= T read knot ceil(T / r), which equals the state at T since the path is
    constant after T. With r = 1 this is the ordinary per-step output.

    The model must keep its torchdiffeq keyword arguments in `self.solver` (solver_kwargs of
    _cde.py); fixed-step solvers get torchdiffeq's `perturb` (see __init__).
    """

    representation: ClassVar[str] = "logsig"
    input_arguments: ClassVar[tuple[str, ...]] = ("logsig_depth", "logsig_step")
    # The path is always piecewise linear: a search space naming `interpolation` fails at load.
    withheld_arguments: ClassVar[tuple[str, ...]] = ("interpolation",)

    @classmethod
    def reads_later_steps(cls, model_kwargs: Mapping[str, Any]) -> str | None:
        """Always a reason: the fill of missing values (above) is linear between observations, so
        a step inside a gap reads the next observation (on complete rows NRDE itself is causal)."""
        return ("log-signature path: a missing value is filled by linear interpolation from the observation "
                "after its gap")

    @classmethod
    def causal_arguments(cls, model_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """None: no argument changes the fill; the family runs as it is and is marked."""
        return None

    def __init__(self, *, logsig_depth: int = 2, logsig_step: int = 4, **kwargs: Any) -> None:
        check_logsig_args(logsig_depth, logsig_step)
        if "interpolation" in kwargs:
            raise ValueError("interpolation: the log-signature path is always piecewise linear; leave it unset")
        # Set before the model's __init__, which sizes its layers by path_channels.
        self.logsig_depth = logsig_depth
        self.logsig_step = logsig_step
        super().__init__(**kwargs)
        if self.solver["method"] in FIXED_STEP_METHODS:
            # dY/ds jumps at every knot and torchcde's linear path returns, at a knot, the slope
            # of the segment ending there: a step starting at knot k would read window k - 1.
            # torchdiffeq's perturb nudges each step's first and last evaluation inside [k, k + 1].
            self.solver["options"]["perturb"] = True

    @classmethod
    def prepare_inputs(
        cls, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, **model_kwargs: object
    ) -> dict[str, torch.Tensor]:
        """Whole split -> {"coeffs": (N, W + 1, D), "last": (N,) long in windows, "mask": (N, L)}.

        Only logsig_depth and logsig_step of model_kwargs are used (default: the model's own).
        """
        arguments = model_arguments(cls)
        depth = model_kwargs.get("logsig_depth", arguments["logsig_depth"].default)
        step = model_kwargs.get("logsig_step", arguments["logsig_step"].default)
        knots, last = logsig_knots(x, t, mask, depth, step)  # validated there
        return {"coeffs": knots, "last": last, "mask": mask}

    @property
    def path_channels(self) -> int:
        """D = signatory.logsignature_channels(C + 1, depth)."""
        # Imported here, not at the top: a process that builds no log-ODE model (a CfC trial, a
        # GPU machine without signatory's build) must not need signatory to import the registry.
        import signatory

        return signatory.logsignature_channels(self.input_channels + 1, self.logsig_depth)

    def _path(
        self, coeffs: torch.Tensor, last: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torchcde.LinearInterpolation, torch.Tensor]:
        """Linear path over the windows this batch needs and the grid of window boundaries 0 .. W_max."""
        channels = self.path_channels
        if (
            coeffs.ndim != 3
            or coeffs.shape[-1] != channels
            or last.shape != coeffs.shape[:1]
            or mask.shape[0] != coeffs.shape[0]
        ):
            raise ValueError(
                f"expected coeffs (B, S, {channels}), last (B,) and mask (B, L); got coeffs "
                f"{tuple(coeffs.shape)}, last {tuple(last.shape)}, mask {tuple(mask.shape)}"
            )
        segments = max(int(last.max()), 1)
        grid = torch.arange(segments + 1, dtype=coeffs.dtype, device=coeffs.device)
        return torchcde.LinearInterpolation(coeffs[:, : segments + 1]), grid

    def _to_steps(self, seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """States on the window grid (B, n, ...) -> one per observation step (B, L, ...), see the class doc."""
        steps = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)  # (B, L)
        last = last_valid_index(mask).unsqueeze(1)  # (B, 1)
        knot = torch.where(steps < last, steps // self.logsig_step, windows_of(last, self.logsig_step))
        return seq[torch.arange(seq.shape[0], device=seq.device).unsqueeze(1), knot]  # (B, L, ...)
