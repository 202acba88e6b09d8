"""The depth field of CDR-NDE and CDR-NDE-heat (`_DepthField`, computed by the fused cdr_rate.DepthRate)
against the composed form it replaced, kept here as the reference: GRUCell(input=h,
hidden=previous_steps(h)) + k * second_difference(h), masked with torch.where (Anumasa et al.,
Eqs. 11, 12 and 14). Outputs and gradients (state and every parameter) must agree to 1e-5, field
by field and through the whole model's forward and backward pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeline.models.cdr_nde import cdr_nde
from pipeline.models.cdr_nde import depth_rate as cdr_rate
from pipeline.models.cdr_nde.cdr_nde import (CDRNDE, CDRNDEHeat, gap_weights, gru_source, previous_steps,
                                     second_difference, uniform_weights)

TOL = {"rtol": 1e-5, "atol": 1e-5}


class DirectDepthField(nn.Module):
    """The depth field as written before the fused form (the reference), from cdr_nde's composed
    parts: torch's GRUCell on (h, h one step back, 0 before the first step), plus diffusivity *
    the zero-flux second difference built with two cats (whose formulas tests/test_cdr_nde.py
    checks by hand), padded steps held by torch.where."""

    def __init__(
        self,
        cell: nn.GRUCell,
        mask: torch.Tensor,
        diffusivity: float = 0.0,
        weights: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.cell, self.moving = cell, mask.unsqueeze(-1)
        self.diffusivity, self.weights = diffusivity, weights

    def forward(self, d: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        rate = gru_source(self.cell, h, previous_steps(h))
        if self.weights is not None:
            rate = rate + self.diffusivity * second_difference(h, *self.weights)
        return torch.where(self.moving, rate, torch.zeros_like(rate))


def make_mask(kind: str) -> torch.Tensor:
    """(6, 12): padded tails of several lengths with a lone step ("tails"), the same with padding
    before an observation in row 2 ("hole"), or no padding ("full")."""
    lengths = torch.tensor([7, 1, 12, 3, 12, 5])
    mask = torch.arange(12) < lengths[:, None]
    if kind == "hole":
        mask[2, 4] = False
    if kind == "full":
        mask[:] = True
    return mask


def field_weights(laplacian: str | None, mask: torch.Tensor, dtype: torch.dtype):
    if laplacian is None:
        return None
    if laplacian == "uniform":
        return uniform_weights(mask, dtype)
    dt = (0.1 + torch.rand(mask.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)) * mask
    return gap_weights(dt, mask, 0.25)


def rate_and_grads(field: nn.Module, cell: nn.GRUCell, h0: torch.Tensor, upstream: torch.Tensor) -> list[torch.Tensor]:
    """[rate, d h, d weight_ih, d weight_hh, d bias_ih, d bias_hh] for loss = sum(rate * upstream)."""
    cell.zero_grad()
    h = h0.clone().requires_grad_()
    rate = field(torch.tensor(0.0), h)
    (rate * upstream).sum().backward()
    return [rate.detach(), h.grad] + [p.grad.clone() for p in cell.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk_rows", [None, 5])
@pytest.mark.parametrize("mask_kind", ["tails", "hole", "full"])
@pytest.mark.parametrize("laplacian", [None, "uniform", "irregular"])
def test_fused_depth_field_equals_the_composed_form(
    laplacian: str | None, mask_kind: str, chunk_rows: int | None, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """laplacian None: CDR-NDE's field (Eq. 11); else CDR-NDE-heat's (Eq. 14). chunk_rows 5 puts
    chunk boundaries inside and between sequences."""
    if chunk_rows is not None:
        monkeypatch.setattr(cdr_rate, "_CHUNK_ROWS", chunk_rows)
    torch.manual_seed(0)
    cell = nn.GRUCell(8, 8).to(dtype)
    mask = make_mask(mask_kind)
    weights = field_weights(laplacian, mask, dtype)
    gen = torch.Generator().manual_seed(2)
    h0 = torch.randn(6, 12, 8, generator=gen, dtype=dtype)
    upstream = torch.randn(6, 12, 8, generator=gen, dtype=dtype)
    fused = rate_and_grads(cdr_nde._DepthField(cell, mask, 0.7, weights), cell, h0, upstream)
    direct = rate_and_grads(DirectDepthField(cell, mask, 0.7, weights), cell, h0, upstream)
    assert direct[0].abs().max() > 0.1 and all(g.abs().max() > 1e-3 for g in direct[1:])  # not vacuous
    for name, got, want in zip(["rate", "h", "weight_ih", "weight_hh", "bias_ih", "bias_hh"], fused, direct):
        torch.testing.assert_close(got, want, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert (fused[0][~mask] == 0).all()  # padded steps do not move


def raw_batch(batch: int, length: int, channels: int, seed: int) -> dict[str, torch.Tensor]:
    """Irregular times (dt > 0), lengths between length // 2 and length (padded tails)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, channels, generator=gen)
    t = torch.cumsum(0.05 + torch.rand(batch, length, generator=gen), dim=1)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    lengths[0] = length
    mask = torch.arange(length) < lengths[:, None]
    t = torch.where(mask, t, t.gather(1, lengths[:, None] - 1))
    x = torch.where(mask[..., None], x, torch.full_like(x, float("nan")))
    return CDRNDE.prepare_inputs(x, t, mask)


def model_outputs_and_grads(cls: type[CDRNDE], kwargs: dict, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    torch.manual_seed(3)
    model = cls(input_channels=12, output_size=3, **kwargs)
    out = model(**inputs)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    (out * upstream).sum().backward()
    return [out.detach()] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("chunk_rows", [None, 7])
@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        # search_spaces/cdr_nde_heat.yaml's reference configuration (the batch is smaller)
        (CDRNDEHeat, {"hidden_size": 64, "method": "dopri5", "rtol": 1e-3, "atol": 1e-3, "solver_steps": 2,
                      "diffusivity": 1.0, "depth": 1.0}),
        (CDRNDEHeat, {"hidden_size": 16, "method": "euler", "laplacian": "irregular", "diffusivity": 0.2}),
        (CDRNDE, {"hidden_size": 16, "method": "dopri5"}),
        (CDRNDE, {"hidden_size": 16, "per_step": True}),
    ],
)
def test_model_forward_and_backward_equal_the_composed_field(
    cls: type[CDRNDE], kwargs: dict, chunk_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk_rows is not None:
        monkeypatch.setattr(cdr_rate, "_CHUNK_ROWS", chunk_rows)
    inputs = raw_batch(batch=8, length=20, channels=12, seed=5)
    fused = model_outputs_and_grads(cls, kwargs, inputs)
    monkeypatch.setattr(cdr_nde, "_DepthField", DirectDepthField)
    direct = model_outputs_and_grads(cls, kwargs, inputs)
    assert all(g.abs().max() > 0 for g in direct[1:])
    for got, want in zip(fused, direct):
        torch.testing.assert_close(got, want, **TOL)
