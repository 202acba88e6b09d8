"""Eq. 2 of Temporal Weights (Kohan, Rietman & Siegelmann 2022) for the factorised couplings
(K_ij = k_i c_j, temporal_weights.py) as one autograd Function whose backward is written out.

With b_j = f w_j, s_j = sin b_j, c_j = cos b_j and, per group of n coupled weights,
C = sum_j e_j c_j and S = sum_j e_j s_j (e_j the sender factor c_j of "rank1", 1 for "weight"):

    w'_i = k_i (A s_i + B c_i),   A = (C cos phi + S sin phi) / n,   B = (C sin phi - S cos phi) / n

(sin(b_i + phi - b_j) expanded; see temporal_weights.py). Why a Function: autograd through
these dozen tensor operations makes about seventeen passes over the (times, rows, weights)
tensors in the backward pass, where the derivatives below need seven, plus matrix-vector
products for the reductions; and it keeps three full tensors (sin, cos, W') for the backward
pass, this keeps two. The backward pass of a chunk of stage weights (tw_stages) was three
times its forward pass before. The derivatives, with g = dL/dw' and g_k = g * k:

    dA = sum_i g_k,i s_i,   dB = sum_i g_k,i c_i,   dk_i = sum_t g_i (A s_i + B c_i)
    dC = (dA cos phi + dB sin phi) / n,   dS = (dA sin phi - dB cos phi) / n
    dphi = sum over groups of (dB A - dA B)                       (dA/dphi = -B, dB/dphi = A)
    db_i = c_i (g_k,i A + dS e_i) - s_i (g_k,i B + dC e_i)        (e_i: i's sender factor)
    dw_i = sum_t db_i f,   df = sum_i db_i w_i,   de_i = sum_t (dS s_i + dC c_i)

tests/test_temporal_weights.py checks them with gradcheck (float64) and against autograd
through the composed operations. First derivatives only (the Function's backward is
once_differentiable), as the torchdiffeq adjoint needs.
"""

from __future__ import annotations

import torch


def _per_time(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """sum_n x[t, g, n] v[g, n]: x (T, G, n), v (G, n) -> (T, G). One group (scope "full"): a
    matrix-vector product that reads x once; einsum would copy x into a batched layout first."""
    if x.shape[1] == 1:
        return (x.flatten(1) @ v.flatten()).unsqueeze(1)
    return (x * v).sum(-1)


def _per_weight(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """sum_t x[t, g, n] u[t, g]: x (T, G, n), u (T, G) -> (G, n), likewise without a copy."""
    if x.shape[1] == 1:
        return (u.flatten() @ x.flatten(1)).unsqueeze(0)
    return (x * u[..., None]).sum(0)


class FactoredEq2(torch.autograd.Function):
    """(f (T,), phi (T,), w (G, n), k (G, n), sender (G, n) or None, pad (G,), scale (G,)) ->
    W' (T, G, n): Eq. 2 at T times for G groups of n coupled weights.

    pad: the padding entries of each group (zero weights: cos 0 = 1 is taken off C exactly);
    used without a sender only, the sender is zero there. scale: 1 / members of each group.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, f: torch.Tensor, phi: torch.Tensor, w: torch.Tensor,
                k: torch.Tensor, sender: torch.Tensor | None, pad: torch.Tensor,
                scale: torch.Tensor) -> torch.Tensor:
        angle = f[:, None, None] * w  # (T, G, n)
        s, c = angle.sin(), angle.cos()
        del angle
        if sender is None:
            big_c, big_s = c.sum(-1) - pad, s.sum(-1)  # (T, G)
        else:
            big_c, big_s = (c * sender).sum(-1), (s * sender).sum(-1)
        cos_phi, sin_phi = phi.cos()[:, None], phi.sin()[:, None]  # (T, 1)
        along_s = (big_c * cos_phi + big_s * sin_phi) * scale  # A (T, G)
        along_c = (big_c * sin_phi - big_s * cos_phi) * scale  # B (T, G)
        out = s * along_s[..., None]
        out.addcmul_(c, along_c[..., None]).mul_(k)
        ctx.save_for_backward(f, w, k, sender, s, c, along_s, along_c, cos_phi, sin_phi, scale)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # works in place on its own buffers
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        f, w, k, sender, s, c, along_s, along_c, cos_phi, sin_phi, scale = ctx.saved_tensors
        grad_s, grad_c = grad * s, grad * c  # (T, G, n)
        d_along_s, d_along_c = _per_time(grad_s, k), _per_time(grad_c, k)  # dA, dB (T, G)
        d_k = _per_weight(grad_s, along_s) + _per_weight(grad_c, along_c)
        d_phi = (d_along_c * along_s - d_along_s * along_c).sum(-1)  # (T,)
        d_big_c = (d_along_s * cos_phi + d_along_c * sin_phi) * scale  # dC (T, G)
        d_big_s = (d_along_s * sin_phi - d_along_c * cos_phi) * scale  # dS
        d_sender = None
        if sender is None:
            add_s, add_c = d_big_s[..., None], d_big_c[..., None]  # (T, G, 1)
        else:
            add_s, add_c = d_big_s[..., None] * sender, d_big_c[..., None] * sender  # (T, G, n)
            if ctx.needs_input_grad[4]:
                d_sender = _per_weight(s, d_big_s) + _per_weight(c, d_big_c)
        # db = k (A g c - B g s) + (dS e) c - (dC e) s, in place over g c (its sums are taken):
        # five passes; out-of-place operations with two broadcast operands run slower on CPU
        d_angle = grad_c.mul_(along_s[..., None]).addcmul_(grad_s, along_c[..., None], value=-1.0).mul_(k)
        del grad_s
        d_angle.addcmul_(c, add_s).addcmul_(s, add_c, value=-1.0)
        flat = d_angle.flatten(1)  # (T, G n): both sums run over the weights of all groups at once
        d_w = (f @ flat).view_as(w)
        d_f = flat @ w.flatten()
        return d_f, d_phi, d_w, d_k, d_sender, None, None
