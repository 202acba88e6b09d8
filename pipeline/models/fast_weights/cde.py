"""CDE fast weight programmers (Irie, Faccio & Schmidhuber 2022, NeurIPS, Eqs. 23-25): the slow
net reads both the path X(s) and its derivative X'(s), one for the keys, the other for the values.

    u(s)   = LayerNorm(W_in A(s)),    k(s) = W_k u(s),    beta(s) = w_b u(s)
    v(s)   = [tanh] W_v B(s)          (optionally W_v' LayerNorm(W_v B(s)) first, `value_layer_norm`)
    dW/ds  = F_rule(k, v, sigmoid(beta), W)          see fwp_rules.py
    W(0)   = F_rule(k(0), v(0), sigmoid(beta(0)), 0)
    y      = W^T q (Hebb, Oja) or W q (Delta),   q = softmax(W_q LayerNorm(W_in A(T)))

    Hebb, Oja:  A = X (keys and query),  B = X' (values)   FastWeightCDE + CDE{Hebb,Oja}UpdateVectorField
    Delta:      A = X' (keys and query), B = X (values)    FastWeightCDEv2 + CDEDeltaUpdateVectorField

(IDSIA/neuraldiffeq-fwp, speech_and_physionet/experiments/models/{metamodel,learning_rules}.py;
model names hebb_cde, oja_cde, delta_cde.) Then the output block of _fwp.py.

Where this follows the authors' code rather than the printed equations:
    * Oja (Eq. 24): v softmax(k - W^T v)^T, the forgetting term inside the key softmax
      (CDEOjaUpdateVectorField); Eq. 24 prints (W_k x - W^T W_v x') (x) W_v x'.
    * Hebb and Oja orientation (Eqs. 24-25): W stores v k^T (value from X', key from X) and the
      readout is W^T q = k (v . q), so the query (from X) is matched against the X'-derived values
      (FastWeightCDE: bmm(vs, ks), then z_t.transpose(1, 2)). Printed, Eq. 24 stores
      (W_k x) (x) (W_v x') and Eq. 25 reads W^T W_q x = W_v x' ((W_k x) . q), matching the query
      against the X-derived keys.
Where this follows the printed equation rather than the authors' code:
    * Hebb (Eq. 24): sigma(beta) scales the write. CDEHebbUpdateVectorField multiplies the
      values by the raw learning-rate logit (its sigmoid is computed after use), so the Table 1
      Hebb-CDE numbers come from that variant.
Other differences: as in the reference, only the Hebb CDE leaves its values without tanh. The
query is read at each row's own T; the reference reads all rows at the batch's last time. W(0)
is the rule's write at s = 0 unless static_channels is set: then it comes from the static
features as in the reference's Sepsis runs (_fwp.py, StaticInitialState).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from pipeline.models.fast_weights.programmer import FastWeightProgrammer
from pipeline.models.fast_weights.rules import RULES


class CDEWriter(nn.Module):
    """The slow net of the CDE FWPs: (X (B, K), X' (B, K), W (B, H, d, d) or None) -> dW (B, H, d, d)."""

    reads_derivative: ClassVar[bool] = True

    def __init__(
        self, rule: str, path_channels: int, hidden_size: int, num_heads: int, *,
        keys_from_derivative: bool, value_tanh: bool, value_layer_norm: bool,
    ) -> None:
        super().__init__()
        self.update = RULES[rule]
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.keys_from_derivative = keys_from_derivative
        self.value_tanh = value_tanh
        self.input_proj = nn.Linear(path_channels, hidden_size)
        self.input_norm = nn.LayerNorm(hidden_size)
        self.key_rate = nn.Linear(hidden_size, num_heads * (self.head_dim + 1))
        self.value_proj = nn.Linear(path_channels, hidden_size)
        # Optional extra value layer (the reference's use_v_laynorm, used for Sepsis no-OI).
        self.value_net = (
            nn.Sequential(nn.LayerNorm(hidden_size), nn.Linear(hidden_size, hidden_size))
            if value_layer_norm else nn.Identity()
        )

    def key_features(self, x: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
        """(..., K) -> (..., hidden): the projected input that keys and queries come from."""
        return self.input_norm(self.input_proj(dx if self.keys_from_derivative else x))

    def forward(self, x: torch.Tensor, dx: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        batch, heads, d = x.shape[0], self.num_heads, self.head_dim
        key_rate = self.key_rate(self.key_features(x, dx)).view(batch, heads, d + 1)  # (B, H, d + 1)
        values = self.value_net(self.value_proj(x if self.keys_from_derivative else dx))
        if self.value_tanh:
            values = values.tanh()
        return self.update(key_rate[..., :-1], values.view(batch, heads, d), key_rate[..., -1:].sigmoid(), weights)


class _CDEFWP(FastWeightProgrammer):
    """forward(coeffs (B, L-1, 4(C+1)), last (B,), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    Arguments: those of FastWeightProgrammer (_fwp.py) and value_layer_norm (Delta: post_tanh).
    """

    learning_rule: ClassVar[str]
    keys_from_derivative: ClassVar[bool]
    value_tanh: ClassVar[bool] = True

    def __init__(self, *, value_layer_norm: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = CDEWriter(
            self.learning_rule, self.control_channels, self.hidden_size, self.num_heads,
            keys_from_derivative=self.keys_from_derivative, value_tanh=self.value_tanh,
            value_layer_norm=value_layer_norm,
        )


class HebbCDEFWP(_CDEFWP):
    """Hebb CDE FWP: keys from X, values from X' (no tanh), readout W^T q; reference `hebb_cde`."""

    learning_rule = "hebb"
    keys_from_derivative = False
    transpose_readout = True
    value_tanh = False


class OjaCDEFWP(_CDEFWP):
    """Oja CDE FWP: keys from X, values tanh(W_v X'), readout W^T q; reference `oja_cde`."""

    learning_rule = "oja"
    keys_from_derivative = False
    transpose_readout = True


class DeltaCDEFWP(_CDEFWP):
    """Delta CDE FWP: keys and rate from X', values tanh(W_v X), readout W q; reference `delta_cde`.

    post_tanh: tanh(v - W k) instead of tanh(v) - W k (delta_ode_post_tahn, its Sepsis OI run).
    """

    learning_rule = "delta"
    keys_from_derivative = True
    transpose_readout = False

    def __init__(self, *, post_tanh: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if post_tanh:
            self._squash_after_retrieval()
