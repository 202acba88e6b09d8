"""Direct NODE fast weight programmers (Irie, Faccio & Schmidhuber 2022, NeurIPS, Eqs. 18-21): the
fast weights follow an ODE driven by the input path X(s) alone (not its derivative).

    u(s)        = LayerNorm(W_in X(s))
    [k, v, b]   = W_slow u(s),   v <- tanh(v),   beta = sigmoid(b)      per head
    dW/ds       = F_rule(k, v, beta, W)                 Hebb, Oja or Delta, see fwp_rules.py
    W(0)        = F_rule(k(0), v(0), beta(0), 0)
    y           = W q,   q = softmax(W_q LayerNorm(W_in X(T)))

Follows FastWeightODE with HebbUpdateVectorField / OjaUpdateVectorField / DeltaUpdateVectorField
of IDSIA/neuraldiffeq-fwp (speech_and_physionet/experiments/models/; model names hebb_ode, oja_ode,
delta_ode), then the output block of _fwp.py. X is the spline path [t, x] of _cde.py, so time
enters as a channel; the query is read at each row's own T (the reference reads the batch's last
time for every row). With static_channels (_fwp.py) W(0) comes from the static features instead.

Where this follows the authors' code rather than the printed Eq. 21 (see fwp_rules.py):
    * Hebb writes v k^T (value x key); Eq. 21 prints k (x) v, which does not fit
      W in R^{d_out x d_key} with y = W q (Eq. 20).
    * Oja subtracts W^T v from the key logits inside the softmax: v softmax(k - W^T v)^T, where
      Eq. 21 has v (x) (phi(k) - W^T v).
    * Keys go through a softmax and values through tanh (footnote 3's "activation functions ...
      where appropriate"), also in the query (Eq. 19: q = softmax(W_q LayerNorm(W_in X(T)))).

The writer can read X' instead of X (`from_derivative`): that is the rough-path case, where the
input of Eq. 18 is the log-signature of the current window (rde_node_fwp.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from pipeline.models.fast_weights.programmer import FastWeightProgrammer
from pipeline.models.fast_weights.rules import RULES


class NODEWriter(nn.Module):
    """The slow net of the NODE FWPs: (X (B, K), X' (B, K) or None, W (B, H, d, d) or None) -> dW (B, H, d, d).

    One fused projection gives every head's key, value and learning rate at once (Eq. 21's
    [beta, k, v] = W_slow x). It reads X, or X' alone with from_derivative (then X is unused).
    """

    def __init__(
        self, rule: str, path_channels: int, hidden_size: int, num_heads: int, *, from_derivative: bool = False
    ) -> None:
        super().__init__()
        self.update = RULES[rule]
        self.reads_derivative = from_derivative
        self.value_tanh = True
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.input_proj = nn.Linear(path_channels, hidden_size)
        self.input_norm = nn.LayerNorm(hidden_size)
        self.kvb_net = nn.Linear(hidden_size, num_heads * (2 * self.head_dim + 1))

    def key_features(self, x: torch.Tensor, dx: torch.Tensor | None = None) -> torch.Tensor:
        """(..., K) -> (..., hidden): the projected input that keys, values and queries come from."""
        return self.input_norm(self.input_proj(dx if self.reads_derivative else x))

    def forward(self, x: torch.Tensor, dx: torch.Tensor | None, weights: torch.Tensor | None) -> torch.Tensor:
        batch, heads, d = x.shape[0], self.num_heads, self.head_dim
        kvb = self.kvb_net(self.key_features(x, dx)).view(batch, heads, 2 * d + 1)  # (B, H, 2d + 1)
        key_logits, values, rate = kvb.split((d, d, 1), dim=-1)
        values = values.tanh() if self.value_tanh else values
        return self.update(key_logits, values, rate.sigmoid(), weights)


class _NODEFWP(FastWeightProgrammer):
    """forward(coeffs (B, L-1, 4(C+1)), last (B,), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    Arguments: those of FastWeightProgrammer (_fwp.py).
    """

    learning_rule: ClassVar[str]
    writer_reads_derivative: ClassVar[bool] = False  # True: Eq. 18's input is X' (log-signature windows)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = NODEWriter(
            self.learning_rule, self.control_channels, self.hidden_size, self.num_heads,
            from_derivative=self.writer_reads_derivative,
        )


class HebbNODEFWP(_NODEFWP):
    """Direct NODE FWP with the Hebb rule (reference `hebb_ode`)."""

    learning_rule = "hebb"


class OjaNODEFWP(_NODEFWP):
    """Direct NODE FWP with Oja's rule (reference `oja_ode`)."""

    learning_rule = "oja"


class DeltaNODEFWP(_NODEFWP):
    """Direct NODE FWP with the Delta rule (reference `delta_ode`); post_tanh: tanh(v - W k) instead
    of tanh(v) - W k (the reference's delta_post_tahn, on in its EigenWorms model)."""

    learning_rule = "delta"

    def __init__(self, *, post_tanh: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if post_tanh:
            self._squash_after_retrieval()
