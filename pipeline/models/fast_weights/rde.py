"""Continuous-time fast weight programmers on log-signature windows, the rough-path case of Irie,
Faccio & Schmidhuber 2022 (NeurIPS, Table 2, EigenWorms; IDSIA/neuraldiffeq-fwp, eigenworms/).

Each is a CDE FWP of cde_fwp.py (Eqs. 23-25) driven by the cumulative log-signature path Y of
logsig.py instead of the spline of [t, x]: on window k the derivative input is X'(s) = logsig_k and
the path input X(s) is Y(s) (level 1: [t, x] at the window boundaries, linear in between; level 2:
the accumulated Levy areas). So the Delta rule takes keys, rate and query from logsig_k and values
from Y(s); Hebb and Oja take keys and query from Y(s) and values from logsig_k.

Differences from the reference EigenWorms code: its published run (`logsig-ode-fwp`,
FastWeightODE, eigenworms/README.md) is the direct-NODE variant, whose slow net reads logsig_k
alone (keys, values and rates), with W(0) from a projection of [t_0, x_0]: that model, the one
behind Table 2, is rde_node_fwp.py. Its `logsig-cde-fwp` (FastWeightCDEv2) feeds logsig_k as both
inputs. Here the CDE FWP equations are kept unchanged, so a rough CDE FWP and its smooth
counterpart differ only in their input path. The static initial state (static_channels of
_fwp.py) is not offered: its statics would have to be cut out of the log-signature channels,
which logsig.py does not expose, and the rough-path dataset (EigenWorms) has none.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from pipeline.models.blocks.cde import FIXED_STEP_METHODS
from pipeline.models.fast_weights.cde import DeltaCDEFWP, HebbCDEFWP, OjaCDEFWP
from pipeline.models.blocks.logsig import LogSigInputs


def check_fixed_step(method: str) -> None:
    """Per-step outputs solve one window per torchdiffeq call; an adaptive solver evaluates its
    first stage exactly at the knot, where torchcde's linear path gives the previous window's
    slope (fixed-step solvers are nudged inside the window), so only fixed-step ones are allowed."""
    if method not in FIXED_STEP_METHODS:
        raise ValueError(
            f"method {method!r}: the rough FWPs take a fixed-step solver, one of {list(FIXED_STEP_METHODS)}"
        )


class _RoughFWP(LogSigInputs):
    """Mixin part shared by the rough FWPs: log-signature inputs and a fixed-step solver.

    forward(coeffs (B, W+1, D), last (B,) in windows, mask (B, L)) -> (B, O), or (B, L, O) with
    per_step. Arguments: logsig_depth, logsig_step and those of the CDE FWP except
    `interpolation`; method rk4 or euler, step_fraction in windows.
    """

    # No static initial state (see the module doc): the statics are not separable in the log-signature channels.
    withheld_arguments: ClassVar[tuple[str, ...]] = ("static_channels",)

    @classmethod
    def reads_later_steps(cls, model_kwargs: Mapping[str, Any]) -> str | None:
        """LogSigInputs' fill, and X'(0): the writer (W(0)) or the query of the steps before the first
        window boundary read X' at knot 0, the first window's log-signature (steps 0 .. logsig_step)."""
        return (f"{super().reads_later_steps(model_kwargs)}; steps before the first window boundary read the "
                "first window's log-signature")

    def __init__(self, *, method: str = "rk4", **kwargs: Any) -> None:
        check_fixed_step(method)
        if "static_channels" in kwargs:
            raise ValueError("static_channels: the rough FWPs take no static initial state; leave it unset")
        super().__init__(method=method, **kwargs)


class RoughHebbFWP(_RoughFWP, HebbCDEFWP):
    """Hebb CDE FWP on log-signature windows (see _RoughFWP)."""


class RoughOjaFWP(_RoughFWP, OjaCDEFWP):
    """Oja CDE FWP on log-signature windows (see _RoughFWP)."""


class RoughDeltaFWP(_RoughFWP, DeltaCDEFWP):
    """Delta CDE FWP on log-signature windows (see _RoughFWP)."""
