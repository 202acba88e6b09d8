"""Temporal weights, GRU-ODE and the Latent ODE against their equations, by hand-sized cases."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.models import get_model_class
from pipeline.models.gru_ode import GRUODEField
from pipeline.models.temporal_weights import (
    MAX_FULL_WEIGHTS,
    TemporalLinear,
    TemporalWeights,
    coupling_coefficients,
)
from tests.test_models import SMALL, make_split


def _randomise(module: torch.nn.Module, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7)


def _by_formula(layer: TemporalWeights, t: float, groups: list[list[int]]) -> torch.Tensor:
    """w'_i = sum_j K_ij / n sin(f(t)(w_i - w_j) + phi(t)), the sum over i's group, in loops."""
    f, phi = (v.item() for v in layer.frequency_phase(torch.tensor(t)))
    w = layer.weight.detach().flatten().tolist()
    out = [0.0] * len(w)
    for g, members in enumerate(groups):
        for a, i in enumerate(members):
            total = sum(layer.coupling[g, a, b].item() * math.sin(f * (w[i] - w[j]) + phi) for b, j in enumerate(members))
            out[i] = total / len(members)
    return torch.tensor(out).view(layer.rows, layer.cols)


@pytest.mark.parametrize(
    "scope, block, groups",
    [
        ("full", 1, [[0, 1, 2, 3, 4, 5]]),
        ("row", 1, [[0, 1, 2], [3, 4, 5]]),
        ("block", 4, [[0, 1, 2, 3], [4, 5]]),  # the last block is short: padding must not count
    ],
)
def test_weights_follow_the_coupling_formula(scope: str, block: int, groups: list[list[int]]) -> None:
    layer = TemporalWeights(2, 3, scope=scope, block=block, clock_units=3)
    _randomise(layer)
    for t in (0.0, 1.7):
        torch.testing.assert_close(layer(torch.tensor(t)).detach(), _by_formula(layer, t, groups))


def test_per_row_times_give_each_row_its_own_weights() -> None:
    layer = TemporalWeights(2, 3, scope="row", block=1, clock_units=3)
    _randomise(layer, seed=1)
    times = torch.tensor([0.0, 1.7, 5.0])
    batch = layer(times)  # (3, 2, 3)
    assert batch.shape == (3, 2, 3)
    for row, t in enumerate(times):
        torch.testing.assert_close(batch[row], layer(t))
    assert not torch.allclose(batch[0], batch[1])  # the clock does move the weights


def test_temporal_linear_uses_the_weights_at_each_rows_time() -> None:
    layer = TemporalLinear(3, 2, scope="row", block=1, clock_units=3)
    _randomise(layer, seed=2)
    x, t = torch.randn(2, 3), torch.tensor([0.5, 2.0])
    expected = torch.stack([layer.weights(t[b]) @ x[b] + layer.bias for b in range(2)])
    torch.testing.assert_close(layer(x, t), expected)


def test_initial_weights_are_the_centred_parameters_for_small_weights() -> None:
    # K = 1, f = 1, phi = 0: w'_i = mean_j sin(w_i - w_j) ~ w_i - mean(w) when the weights are small
    layer = TemporalWeights(1, 4, scope="row", block=1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.01, -0.02, 0.03, 0.0]]))
    w = layer.weight.detach()
    torch.testing.assert_close(layer(torch.tensor(3.0)).detach(), w - w.mean(), atol=1e-6, rtol=1e-3)


def test_coupling_coefficients_per_scope_and_memory_bound() -> None:
    rows, cols = 64, 64
    assert coupling_coefficients(rows, cols, "full", 1) == (rows * cols) ** 2
    assert coupling_coefficients(rows, cols, "row", 1) == rows * cols * cols
    assert coupling_coefficients(rows, cols, "block", 16) == rows * cols * 16
    layer = TemporalWeights(rows, cols, scope="block", block=16)
    assert layer.coupling.numel() == rows * cols * 16  # built as counted
    with pytest.raises(ValueError, match=r"tw_scope='full'.*4096"):
        TemporalWeights(MAX_FULL_WEIGHTS + 1, 1, scope="full")
    with pytest.raises(ValueError, match=r"tw_scope.*valid"):
        TemporalWeights(2, 2, scope="diagonal")
    with pytest.raises(ValueError, match="tw_block"):
        TemporalWeights(2, 2, scope="block", block=0)


def test_gru_ode_field_is_the_reference_equation() -> None:
    field = GRUODEField(2, 3)
    _randomise(field, seed=3)
    x, h = torch.randn(4, 2), torch.rand(4, 3) - 0.5
    (w_r, w_z, w_h), (u_r, u_z), u_h = field.input_map.weight.chunk(3), field.gate_map.weight.chunk(2), field.candidate_map.weight
    (b_r, b_z), b_h = field.gate_map.bias.chunk(2), field.candidate_map.bias
    r = torch.sigmoid(x @ w_r.T + h @ u_r.T + b_r)
    z = torch.sigmoid(x @ w_z.T + h @ u_z.T + b_z)
    g = torch.tanh(x @ w_h.T + (r * h) @ u_h.T + b_h)
    torch.testing.assert_close(field(x, h), (1 - z) * (g - h))


def test_gru_ode_is_driven_by_the_time_channel() -> None:
    # Same values at two time scales: the ODE runs in real time, so a slower clock moves h more.
    model = get_model_class("gru_ode")(input_channels=1, output_size=1, hidden_size=3, method="rk4", step_fraction=0.25)
    x = torch.tensor([[[0.5], [1.0], [-0.5]]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    outputs = []
    for scale in (1.0, 4.0):
        inputs = model.prepare_inputs(x, scale * torch.tensor([[0.0, 1.0, 2.0]]), mask)
        path, grid = model._path(**inputs)
        outputs.append(model(**inputs))
    assert not torch.allclose(outputs[0], outputs[1])
    # constant time channel: dt = 0, so h stays at h(0) = 0 and the output is the bias
    frozen = model.prepare_inputs(x, torch.zeros(1, 3), mask)
    torch.testing.assert_close(model(**frozen), model.readout.bias.view(1, 1))


@pytest.mark.parametrize("name", ["ode_rnn_tw", "gru_ode_tw", "ncde_tw", "latent_ode_tw"])
@pytest.mark.parametrize("clock", ["time", "index"])
def test_tw_families_run_with_each_clock(name: str, clock: str) -> None:
    torch.manual_seed(0)
    kwargs = {**SMALL[name], "tw_clock": clock}
    model = get_model_class(name)(input_channels=2, output_size=1, **kwargs)
    x, t, mask = make_split([4, 2], length=4)
    out = model(**type(model).prepare_inputs(x, t, mask, **kwargs))
    out.sum().backward()
    # f(t), phi(t) start constant (zero last layer), so the time reaches them through that layer
    clocks = [p for n, p in model.named_parameters() if ".clock.2." in n]
    assert clocks and all(p.grad is not None and p.grad.abs().sum() > 0 for p in clocks)


@pytest.mark.parametrize("name", ["ode_rnn_tw", "gru_ode_tw", "ncde_tw", "latent_ode_tw"])
def test_tw_families_reject_bad_settings(name: str) -> None:
    cls = get_model_class(name)
    with pytest.raises(ValueError, match="tw_clock"):
        cls(input_channels=2, output_size=1, tw_clock="wall")
    with pytest.raises(ValueError, match="tw_scope"):
        cls(input_channels=2, output_size=1, tw_scope="everything")


@pytest.mark.parametrize("name", ["gru_ode", "latent_ode"])
def test_solver_choices_build_and_run(name: str) -> None:
    x, t, mask = make_split([3, 2], length=3)
    for method in ("euler", "rk4", "dopri5"):
        model = get_model_class(name)(input_channels=2, output_size=1, **SMALL[name], method=method)
        assert torch.isfinite(model(**type(model).prepare_inputs(x, t, mask))).all()
    with pytest.raises(ValueError, match="method"):
        get_model_class(name)(input_channels=2, output_size=1, method="midpoint")


def test_latent_ode_samples_z0_in_training_only() -> None:
    model = get_model_class("latent_ode")(input_channels=2, output_size=2, **SMALL["latent_ode"])
    inputs = model.prepare_inputs(*make_split([3, 3], length=3))
    with torch.no_grad():
        model.to_z0[2].bias[4:].fill_(1.0)  # std = |1 + ...| > 0
        model.eval()
        torch.testing.assert_close(model(**inputs), model(**inputs))
        model.train()
        assert not torch.allclose(model(**inputs), model(**inputs))


def test_latent_ode_encoder_is_the_backward_ode_rnn_by_hand() -> None:
    # Two observations at t = 0.3 and 1.1, Euler with one step per interval:
    # h = GRU(x_1, 0); back over the gap: h <- h - 0.8 f_rec(h); h = GRU(x_0, h); z0 stats = MLP(h).
    model = get_model_class("latent_ode")(
        input_channels=2, output_size=1, **SMALL["latent_ode"], method="euler", solver_steps=1
    )
    x = torch.tensor([[[0.5, -1.0], [2.0, 0.3], [float("nan")] * 2]])
    t = torch.tensor([[0.3, 1.1, 1.1]])
    mask = torch.tensor([[True, True, False]])
    inputs = model.prepare_inputs(x, t, mask)
    with torch.no_grad():
        h = model.cell(x[:, 1], torch.zeros(1, model.rec_size))
        h = h - 0.8 * model.rec_field(h)
        h = model.cell(x[:, 0], h)
        mean, std = model.to_z0(h).chunk(2, dim=-1)
        got_mean, got_std = model.encode(**inputs)
    torch.testing.assert_close(got_mean, mean)
    torch.testing.assert_close(got_std, std.abs())
