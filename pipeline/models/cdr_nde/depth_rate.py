"""The depth field of CDR-NDE and CDR-NDE-heat (Anumasa, Gunapati & Srijith, Eqs. 11, 12 and 14;
cdr_nde.py) as one autograd Function with its backward pass written out.

dh(t_i, t')/dt' = GRUCell(input=h(t_i, t'), hidden=h(t_{i-1}, t')) [+ k * D2_t h, heat model],
0 at padded steps: the formula of cdr_nde.gru_source, previous_steps and second_difference,
which tests/test_cdr_nde_fast_field.py keeps as the reference (outputs and gradients to 1e-5).
First derivatives only (the backward is once_differentiable).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from pipeline.models.base import last_valid_index

# The depth field computes the formula of `gru_source`, `previous_steps` and `second_difference`
# (Eqs. 11 and 14) as one autograd Function whose backward pass is written out, over the state's
# rows (N, H): the steps of all sequences one after another, so h(t_{i-1}, t') is one row up.
# Why it is faster (1 thread, B = 256, L = 50, H = 64; tests/test_cdr_nde_fast_field.py holds it
# to the composed form): autograd through GRUCell, the cats and torch.where makes some thirty
# passes over (B, L, H) and (B, L, 3H) tensors per evaluation, too large for the cache, and its
# cat and slice backward passes fill whole zero tensors; here the cell runs on chunks of rows whose
# (rows, 3H) gate tensors stay in cache, the backward pass reuses the gates saved by the forward
# pass, and the steps after each sequence's last observation are left out (`_kept_steps`), which
# takes their share off the matrix products, the largest remaining cost. Measured per evaluation,
# forward + backward, with lengths 30-50: about 50 ms before, 29 ms after, of which 17 ms are the
# six (rows x 64 x 192) matrix products (at this core's peak; one product with [W_ih; W_hh]
# stacked instead of two takes as long, so the cell keeps its two).
_CHUNK_ROWS = 2048


class _Rows(NamedTuple):
    """Where the depth field's N rows come from, and its per-row constants ((N, 1), state dtype).

    index: (N,) flat index into the B * L steps of each row, None when every step is a row.
    spread: (B * L,) each step's row, N (a zero row below the last) for a step left out.
    carry: 0 where the row is a sequence's first step (h(t_0 - 1, t') = 0 enters the cell), else 1.
    moving: 0 at a padded step kept as a row (padding before an observation), None if all move.
    inv_gap: stencil weight of the edge from the row above into this row, 0 at first steps.
    heat_scale: diffusivity k times the stencil's inv_width (Eq. 14); None for CDR-NDE.
    """

    index: torch.Tensor | None
    spread: torch.Tensor | None
    carry: torch.Tensor
    moving: torch.Tensor | None
    inv_gap: torch.Tensor | None
    heat_scale: torch.Tensor | None

    def to(self, dtype: torch.dtype) -> _Rows:
        """The same rows with the constants in dtype (no copy when they are already)."""
        cast = [None if v is None or not v.is_floating_point() else v.to(dtype) for v in self[2:]]
        return _Rows(self.index, self.spread, *cast)


def _kept_steps(mask: torch.Tensor) -> torch.Tensor:
    """(B, L) mask -> (B, L) bool, True up to each sequence's last observed step. A later step
    reaches no kept one (the cell reads step i - 1 for step i, and the stencil's edge into a
    padded step has weight 0), and its rate is 0, so the depth field leaves it out."""
    steps = torch.arange(mask.shape[1], device=mask.device)
    return steps <= last_valid_index(mask).unsqueeze(1)


def depth_rows(
    mask: torch.Tensor, dtype: torch.dtype, diffusivity: float, weights: tuple[torch.Tensor, torch.Tensor] | None
) -> _Rows:
    """The depth field's rows for mask (B, L): the kept steps (`_kept_steps`) in sequence order."""
    kept = _kept_steps(mask).flatten()  # (B L,)
    index = spread = None
    if not bool(kept.all()):
        index = kept.nonzero().squeeze(1)
        spread = torch.full_like(kept, index.numel(), dtype=torch.long)
        spread[index] = torch.arange(index.numel(), device=mask.device)

    def on_rows(per_step: torch.Tensor) -> torch.Tensor:  # (B, L, 1) -> (N, 1)
        flat = per_step.reshape(-1, 1)
        return flat if index is None else flat[index]

    steps = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    carry = on_rows((steps > 0).unsqueeze(-1).to(dtype))
    moving = on_rows(mask.unsqueeze(-1))
    moving = None if bool(moving.all()) else moving.to(dtype)
    if weights is None:
        return _Rows(index, spread, carry, moving, None, None)
    inv_gap, inv_width = weights  # (B, L-1, 1) for the edge (i-1, i), (B, L, 1)
    into_step = torch.cat([inv_gap.new_zeros(inv_gap.shape[0], 1, 1), inv_gap], dim=1)  # (B, L, 1)
    heat_scale = (diffusivity * inv_width).to(dtype)
    return _Rows(index, spread, carry, moving, on_rows(into_step.to(dtype)), on_rows(heat_scale))


def _chunks(rows: int, device: torch.device) -> list[tuple[int, int]]:
    """(start, end) of each chunk of rows: `_CHUNK_ROWS` on the CPU, where that keeps the chunk's
    gate tensors in cache; one chunk elsewhere, where each chunk costs kernel launches (not timed
    on a GPU)."""
    size = _CHUNK_ROWS if device.type == "cpu" else max(rows, 1)
    return [(start, min(start + size, rows)) for start in range(0, rows, size)]


def _widest(chunks: list[tuple[int, int]]) -> int:
    return max((end - start for start, end in chunks), default=0)


def _rows_above(h: torch.Tensor, carry: torch.Tensor, start: int, end: int, out: torch.Tensor) -> torch.Tensor:
    """`previous_steps` on rows start .. end - 1 of h (N, H): h[j - 1] * carry[j], 0 for j = 0.
    Written into out (at least end - start rows) and returned, (end - start, H)."""
    out = out[: end - start]
    first = max(start, 1)
    out[: first - start] = 0.0
    torch.mul(h[first - 1 : end - 1], carry[first:end], out=out[first - start :])
    return out


def _gru_chunk(
    h: torch.Tensor, prev: torch.Tensor, params: tuple[torch.Tensor, ...],
    gates: torch.Tensor, hidden_n: torch.Tensor, rate: torch.Tensor,
) -> None:
    """Eq. 11's GRUCell(input=h, hidden=prev) on R rows, h and prev (R, H), into rate (R, H).

    Torch's cell: r, z = σ(W_{r,z} h + b_{r,z} + U_{r,z} prev + c_{r,z}), n = tanh(W_n h + b_n +
    r * (U_n prev + c_n)), out = z * prev + (1 - z) * n. Keeps r, z, n in gates (R, 3H) and
    U_n prev + c_n in hidden_n (R, H) for the backward pass. params: weight_ih, weight_hh (3H, H),
    b_{r,z} + c_{r,z} (2H,), b_n, c_n (H,). The biases are added to the cached products, not by
    addmm (which first writes them into its whole output), and tanh a = 2 σ(2a) - 1, as σ is
    vectorised and several times faster than torch's tanh on the CPU (they differ by ~2e-7).
    """
    weight_ih, weight_hh, bias_rz, bias_in, bias_hn = params
    size = h.shape[1]
    torch.mm(h, weight_ih.t(), out=gates)  # W h, (R, 3H)
    from_prev = torch.mm(prev, weight_hh.t())  # U prev
    rz = gates[:, : 2 * size].add_(from_prev[:, : 2 * size]).add_(bias_rz).sigmoid_()
    torch.add(from_prev[:, 2 * size :], bias_hn, out=hidden_n)
    n = gates[:, 2 * size :].add_(bias_in).addcmul_(rz[:, :size], hidden_n)
    n.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)  # tanh
    torch.lerp(n, prev, rz[:, size:], out=rate)  # n + z (prev - n), one pass


def _gru_chunk_backward(
    grad: torch.Tensor, h: torch.Tensor, prev: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor],
    saved: tuple[torch.Tensor, torch.Tensor], param_grads: list[torch.Tensor],
    d_h: torch.Tensor, d_prev: torch.Tensor,
) -> None:
    """Backward pass of `_gru_chunk` on R rows: grad (R, H) -> d_h, d_prev (R, H), written in place;
    adds to param_grads (weight_ih, weight_hh, bias_ih, bias_hh). weights: weight_ih, weight_hh.
    saved: `_gru_chunk`'s gates (R, 3H) and hidden_n (R, H)."""
    weight_ih, weight_hh = weights
    gates, hidden_n = saved
    size = h.shape[1]
    rz, n = gates[:, : 2 * size], gates[:, 2 * size :]
    d_in = torch.empty_like(gates)  # d/d(W h + b) for r, z, n
    d_n = d_in[:, 2 * size :]
    torch.addcmul(grad, grad * n, n, value=-1.0, out=d_n)  # grad tanh' = grad (1 - n²)
    d_n.addcmul_(d_n, rz[:, size:], value=-1.0)  # times (1 - z)
    torch.mul(d_n, hidden_n, out=d_in[:, :size])  # via r
    torch.sub(prev, n, out=d_in[:, size : 2 * size]).mul_(grad)  # via z
    d_in[:, : 2 * size].mul_(torch.addcmul(rz, rz, rz, value=-1.0))  # σ' = σ - σ²
    d_hidden = torch.empty_like(gates)  # d/d(U prev + c): r and z as above, n times r
    d_hidden[:, : 2 * size] = d_in[:, : 2 * size]
    torch.mul(d_n, rz[:, :size], out=d_hidden[:, 2 * size :])
    torch.mm(d_in, weight_ih, out=d_h)
    torch.addcmul(torch.mm(d_hidden, weight_hh), grad, rz[:, size:], out=d_prev)
    param_grads[0].addmm_(d_in.t(), h)
    param_grads[1].addmm_(d_hidden.t(), prev)
    d_bias = d_in.sum(0)
    param_grads[2] += d_bias
    param_grads[3][: 2 * size] += d_bias[: 2 * size]
    param_grads[3][2 * size :] += d_hidden[:, 2 * size :].sum(0)


def _add_heat(rate: torch.Tensor, h: torch.Tensor, rows: _Rows, start: int, end: int) -> None:
    """rate[start:end] += k * D2_t h (Eqs. 12, 14) on rows, in place, h and rate (N, H):
    `second_difference` with the flux through edge (j, j + 1) added to row j and taken from row
    j + 1 (no cats); the edges from row start - 1 to row end (those that exist)."""
    low, high = max(start - 1, 0), min(end, h.shape[0] - 1)  # edges (j, j + 1), low <= j < high
    if high <= low:
        return
    flux = (h[low + 1 : high + 1] - h[low:high]).mul_(rows.inv_gap[low + 1 : high + 1])
    rate[start:high].addcmul_(flux[start - low :], rows.heat_scale[start:high])
    first = max(start, 1)
    rate[first:end].addcmul_(flux[first - 1 - low : end - 1 - low], rows.heat_scale[first:end], value=-1.0)


def _add_heat_backward(d_h: torch.Tensor, grad: torch.Tensor, rows: _Rows, start: int, end: int) -> None:
    """Backward pass of `_add_heat` for the edges (j, j + 1), start - 1 <= j < end - 1: adds to
    d_h (N, H) rows start - 1 .. end - 1, so each edge is counted by one chunk only."""
    low, high = max(start - 1, 0), end - 1
    if high <= low:
        return
    scaled = grad[low : high + 1] * rows.heat_scale[low : high + 1]
    d_flux = (scaled[:-1] - scaled[1:]).mul_(rows.inv_gap[low + 1 : high + 1])
    d_h[low + 1 : high + 1] += d_flux
    d_h[low:high] -= d_flux


def _gather(steps: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """(B L, H) -> (N, H), contiguous: the rows' steps (no copy when every step is a contiguous row)."""
    return steps.contiguous() if index is None else steps.index_select(0, index)


def _spread(values: torch.Tensor, rows: _Rows) -> torch.Tensor:
    """(N + 1, H), last row 0 -> (B L, H): back to the steps, 0 at those left out. A gather, as
    `index_select` is several times faster on the CPU than the scatter (`index_copy`) it replaces."""
    return values[:-1] if rows.spread is None else values.index_select(0, rows.spread)


class DepthRate(torch.autograd.Function):
    """(h (B L, H), weight_ih, weight_hh (3H, H), bias_ih, bias_hh (3H,), rows) -> dh/dt' (B L, H):
    Eq. 11's GRUCell(h, h one row up), plus Eq. 14's k * D2_t h with a heat stencil, times
    `moving`, on the rows, 0 at the steps left out. The rows' constants get no gradient."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, steps: torch.Tensor, weight_ih: torch.Tensor,
        weight_hh: torch.Tensor, bias_ih: torch.Tensor, bias_hh: torch.Tensor, rows: _Rows,
    ) -> torch.Tensor:
        h = _gather(steps, rows.index)  # (N, H)
        count, size = h.shape
        bias_rz = bias_ih[: 2 * size] + bias_hh[: 2 * size]
        params = (weight_ih, weight_hh, bias_rz, bias_ih[2 * size :], bias_hh[2 * size :])
        gates, hidden_n = h.new_empty(count, 3 * size), torch.empty_like(h)  # r, z, n; U_n prev + c_n
        chunks = _chunks(count, h.device)
        rate, prev = h.new_empty(count + 1, size), h.new_empty(_widest(chunks), size)
        rate[-1] = 0.0
        for start, end in chunks:
            chunk = slice(start, end)
            above = _rows_above(h, rows.carry, start, end, prev)
            _gru_chunk(h[chunk], above, params, gates[chunk], hidden_n[chunk], rate[chunk])
            if rows.heat_scale is not None:
                _add_heat(rate, h, rows, start, end)
        if rows.moving is not None:
            rate[:-1].mul_(rows.moving)
        ctx.save_for_backward(h, weight_ih, weight_hh, bias_ih, bias_hh, gates, hidden_n)
        ctx.rows = rows
        return _spread(rate, rows)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_steps: torch.Tensor) -> tuple:
        h, *params, gates, hidden_n = ctx.saved_tensors  # params: weight_ih, weight_hh, bias_ih, bias_hh
        rows = ctx.rows
        grad = _gather(grad_steps, rows.index)  # the solver hands a strided view of its stages
        if rows.moving is not None:
            grad = grad * rows.moving
        count, size = h.shape
        param_grads = [torch.zeros_like(p) for p in params]
        d_h = h.new_empty(count + 1, size)
        d_h[-1] = 0.0
        chunks = _chunks(count, h.device)
        prev, d_prev = (h.new_empty(_widest(chunks), size) for _ in range(2))
        for start, end in chunks:
            chunk = slice(start, end)
            above = _rows_above(h, rows.carry, start, end, prev)  # recomputed: cheaper than keeping it
            saved = (gates[chunk], hidden_n[chunk])
            d_above = d_prev[: end - start]
            _gru_chunk_backward(
                grad[chunk], h[chunk], above, params[:2], saved, param_grads, d_h[chunk], d_above
            )
            first = max(start, 1)  # row j - 1 gets d prev of row j
            d_h[first - 1 : end - 1].addcmul_(d_above[first - start :], rows.carry[first:end])
            if rows.heat_scale is not None:
                _add_heat_backward(d_h, grad, rows, start, end)
        return (_spread(d_h, rows), *param_grads, None)
