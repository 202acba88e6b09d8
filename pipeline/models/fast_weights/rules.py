"""The three learning rules of the continuous-time fast weight programmers (Irie, Faccio &
Schmidhuber 2022, NeurIPS, Eqs. 18-21 and 23-25): dW/ds from a key, a value and a learning rate.

Every rule acts per head on a fast weight matrix W (d x d) whose rows live in value space and
whose columns live in key space, so a rule writes an outer product v k^T and W k retrieves a value:

    hebb    dW/ds = sigma(beta) v softmax(k)^T
    oja     dW/ds = v (sigma(beta) softmax(k - W^T v))^T
    delta   dW/ds = sigma(beta) (v - W softmax(k)) softmax(k)^T

Orientation and normalisation follow the authors' code, HebbUpdateVectorField,
OjaUpdateVectorField and DeltaUpdateVectorField (and their CDE variants) in IDSIA/neuraldiffeq-fwp,
speech_and_physionet/experiments/models/learning_rules.py, rather than the printed equations:
    * the outer products are value x key. Eq. 21 prints Hebb as k (x) v, which does not fit
      W in R^{d_out x d_key} read by y = W q (Eq. 20); Eq. 24's Hebb/Oja orientation is
      discussed in cde_fwp.py.
    * Oja's forgetting term W^T v is subtracted from the key logits *before* the softmax,
      v softmax(k - W^T v)^T; Eqs. 21 and 24 write v (x) (phi(k) - W^T v), with the key already
      normalised (phi, footnote 3) and the forgetting term outside it.
    * Delta subtracts the retrieval W k from the value, as Eqs. 21 and 24 print it.

Shapes: B rows, H heads, d = head size. key_logits and values (B, H, d), rate (B, H, 1) already
through the sigmoid, weights (B, H, d, d) or None for W = 0 (the initial write, W(0)). The values
arrive already through the family's tanh (except Delta with post_tanh).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

UpdateRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


def _outer(values: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(B, H, d) x (B, H, d) -> (B, H, d, d): v k^T per head."""
    return values.unsqueeze(-1) * keys.unsqueeze(-2)


def matvec(weights: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """(..., d, d) @ (..., d) -> (..., d). Broadcast multiply and sum: for these many tiny
    matrices it is ~6x faster forward+backward on CPU than batched matmul (bmm)."""
    return (weights * vector.unsqueeze(-2)).sum(dim=-1)


def hebb_update(
    key_logits: torch.Tensor, values: torch.Tensor, rate: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Hebb: sigma(beta) v softmax(k)^T; does not read W. Returns (B, H, d, d)."""
    return _outer(rate * values, key_logits.softmax(dim=-1))


def oja_update(
    key_logits: torch.Tensor, values: torch.Tensor, rate: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Oja: v (sigma(beta) softmax(k - W^T v))^T. Returns (B, H, d, d)."""
    if weights is not None:
        key_logits = key_logits - matvec(weights.transpose(-1, -2), values)  # forget along v
    return _outer(values, rate * key_logits.softmax(dim=-1))


def delta_update(
    key_logits: torch.Tensor, values: torch.Tensor, rate: torch.Tensor, weights: torch.Tensor | None = None,
    post_tanh: bool = False,
) -> torch.Tensor:
    """Delta: sigma(beta) (v - W k) k^T with k = softmax(key logits). Returns (B, H, d, d).

    post_tanh: the values arrive without tanh and it is applied to v - W k instead
    (sigma(beta) tanh(v - W k) k^T; the reference's delta_post_tahn).
    """
    keys = key_logits.softmax(dim=-1)
    if weights is not None:
        values = values - matvec(weights, keys)  # write only what W does not yet retrieve for k
    if post_tanh:
        values = values.tanh()
    return _outer(rate * values, keys)


RULES: dict[str, UpdateRule] = {"hebb": hebb_update, "oja": oja_update, "delta": delta_update}
