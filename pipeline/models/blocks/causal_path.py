"""A causal path for the CDE families on per-step tasks: `interpolation: hermite_causal`.

Neither of torchcde's splines is causal on data with missing values. The natural cubic spline
(natural_cubic_coeffs) is global: the path on [i - 1, i] depends on every later knot. The Hermite
cubic with backward differences (hermite_cubic_coefficients_with_backward_differences) is causal
on complete rows, but it first fills missing values by linear interpolation between the
observations around a gap (linear_interpolation_coeffs: a leading gap is held at the first
observation), so a step inside a gap reads the next observation; and it sets the slope at knot 0
to x_1 - x_0, which a model reading X'(0) (the CDE FWPs' W(0)) sees at step 0.

hermite_causal removes both, as Morrill et al. 2021 ("Neural controlled differential equations
for online prediction tasks", arXiv:2106.11028, Sec. 3) ask of an online path: each channel's
missing values hold its last observation (0, the standardised train mean, before the first, as
the raw families' nan_to_num), then the Hermite cubic with backward differences runs on the
filled knots, with slope 0 at knot 0. On segment k, s in [k, k + 1] (knots one index apart):

    X(s) = a + b u + c u^2 + d u^3,  u = s - k,  X(k) = x_k, X(k + 1) = x_{k+1},
    X'(k) = x_k - x_{k-1} (0 for k = 0),  X'(k + 1) = x_{k+1} - x_k,

so X on [0, i] reads x_0 .. x_i only, and a solver that outputs at the knots gives a state at
step i that no later input moves. On complete rows it differs from torchcde's Hermite only on
the first segment (its start slope).
"""

from __future__ import annotations

import torch


def carried_forward(path: torch.Tensor) -> torch.Tensor:
    """(n, L, K) with NaN where missing -> (n, L, K): each channel's last observation held, 0 before the first."""
    observed = ~path.isnan()
    steps = torch.arange(path.shape[1], device=path.device).view(1, -1, 1).expand_as(path)
    # index of the latest observed step at or before each step (0 where none is, then zeroed)
    latest = torch.where(observed, steps, torch.zeros_like(steps)).cummax(dim=1).values
    held = torch.nan_to_num(path, nan=0.0).gather(1, latest)
    seen = observed.cummax(dim=1).values  # an observation at or before this step
    return torch.where(seen, held, torch.zeros_like(held))


def hermite_causal_coeffs(path: torch.Tensor) -> torch.Tensor:
    """Causal Hermite cubic coefficients (see the module doc) of a path sampled at s = 0 .. L-1.

    Args:
        path: (n, L, K) values, NaN where missing; L >= 2.
    Returns:
        (n, L - 1, 4K) = [a, b, 2c, 3d] per segment, torchcde.CubicSpline's layout.
    """
    x = carried_forward(path)
    step = x[:, 1:] - x[:, :-1]  # (n, L-1, K): x_{k+1} - x_k, the slope at the end of segment k
    start = torch.cat([torch.zeros_like(step[:, :1]), step[:, :-1]], dim=1)  # the slope at its start
    # Hermite on a unit interval: c = 3 step - 2 start - end, d = start + end - 2 step, with end = step.
    two_c = 4.0 * (step - start)
    three_d = 3.0 * (start - step)
    return torch.cat([x[:, :-1], start, two_c, three_d], dim=-1)
