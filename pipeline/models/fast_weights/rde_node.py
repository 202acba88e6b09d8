"""Direct-NODE fast weight programmers on log-signature windows: the EigenWorms model of Irie,
Faccio & Schmidhuber 2022 (NeurIPS, Table 2), obtained by "replacing the input x in Eqs. 18-19 of
the direct NODE formulation ... by the corresponding log-signatures" (Sec. 4).

The input pipeline is logsig.py's (the same knots as nrde and rde_fwp_*): one unit of solver time
per window of `logsig_step` observations, and on window k, s in [k, k + 1], the path's derivative
is that window's log-signature logsig_k (D channels). The writer of node_fwp.py reads it:

    u(s)       = LayerNorm(W_in logsig_k)                                   (B, hidden)
    [k, v, b]  = W_slow u(s),   v <- tanh(v),   beta = sigmoid(b)   per head          Eq. 21
    dW/ds      = F_rule(k, v, beta, W)    Hebb, Oja or Delta (fwp_rules.py)           Eq. 18
    W(0)       = F_rule(k, v, beta, 0) of u = LayerNorm(W_in (A [t_0, x_0] + a))
    y          = W q,   q = softmax(W_q LayerNorm(W_in logsig_last))                 Eqs. 19-20

then the output block of _fwp.py (projection, feed-forward block, Linear). logsig_last is the
log-signature of each row's last window, the one ending at its last observation.

Footnote 6 says that with log-signatures the direct NODE and the NCDE form (Eqs. 23-25, the
rde_fwp_* families of rde.py) "coincide". They do not share parameters or inputs here: rde_fwp_*
keep the CDE writer, which reads the cumulative path Y(s) and logsig_k through separate
projections, while this writer reads logsig_k alone through one fused projection; the direct-NODE
form is what the authors ran for Table 2 (its parameter count matches the paper's "87 K" for the
last row of Table 2, rde_node_fwp_delta.yaml).

Follows FastWeightODE of IDSIA/neuraldiffeq-fwp (eigenworms/ncdes/fwp_model.py, model_type
`logsig-ode-fwp`): `initial_network`, Linear(C + 1 -> D), maps the first observation [t_0, x_0] to
the log-signature space and W(0) is the writer's write of it at W = 0 (so the absolute starting
point, which depth-1 log-signatures, being increments, never show, still reaches the model); the
query reads the last window's log-signature. [t_0, x_0] is the level-1 part of knot 0 of the
log-signature path (logsig.py). Differences: each row's query reads its own last window (the
reference reads the batch's last, the same thing for equal-length EigenWorms rows); the
reference's x10 learning rate on the last Linear (final_layer_scaling) is a training setting and
is not reproduced. Delta's `post_tanh` defaults to off as in node_fwp.py; the reference's
FastWeightODE defaults delta_post_tahn=True and the EigenWorms command keeps it, so the search
space's reference sets it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from pipeline.models.fast_weights.node import DeltaNODEFWP, HebbNODEFWP, OjaNODEFWP
from pipeline.models.fast_weights.rde import _RoughFWP


class _RoughNODEFWP(_RoughFWP):
    """Mixin part shared by the direct-NODE FWPs on log-signature windows.

    forward(coeffs (B, W+1, D), last (B,) in windows, mask (B, L)) -> (B, O), or (B, L, O) with
    per_step. Arguments: logsig_depth, logsig_step and those of the NODE FWP except
    `interpolation` and `static_channels`; method rk4 or euler, step_fraction in windows.
    """

    writer_reads_derivative: ClassVar[bool] = True  # Eq. 18's input is logsig_k = dY/ds

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The reference's initial_network: [t_0, x_0] (C + 1) -> the writer's input space (D).
        self.initial_network = nn.Linear(self.input_channels + 1, self.path_channels)

    def _initial_state(self, start: torch.Tensor, x0: torch.Tensor, dx0: torch.Tensor | None) -> torch.Tensor:
        """W(0) (B, H, d, d): the writer's write (W = 0) of initial_network([t_0, x_0]); start is
        knot 0 of the log-signature path (B, D), whose first C + 1 channels are [t_0, x_0]."""
        return self.rule(x0, self.initial_network(start[..., : self.input_channels + 1]), None)


class RoughHebbNODEFWP(_RoughNODEFWP, HebbNODEFWP):
    """Direct-NODE Hebb FWP on log-signature windows (see _RoughNODEFWP); reference `logsig-ode-fwp`, hebb."""


class RoughOjaNODEFWP(_RoughNODEFWP, OjaNODEFWP):
    """Direct-NODE Oja FWP on log-signature windows (see _RoughNODEFWP); reference `logsig-ode-fwp`, oja."""


class RoughDeltaNODEFWP(_RoughNODEFWP, DeltaNODEFWP):
    """Direct-NODE Delta FWP on log-signature windows (see _RoughNODEFWP); reference `logsig-ode-fwp`,
    delta (post_tanh: the reference's delta_post_tahn)."""
