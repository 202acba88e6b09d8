"""Temporal weights, GRU-ODE and the Latent ODE against their equations, by hand-sized cases."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.models import get_model_class
from pipeline.models.neural_de.gru_ode import GRUODEField
from pipeline.models.temporal_weights.weights import (
    MAX_DENSE_GROUP,
    TemporalLinear,
    TemporalMLP,
    TemporalWeights,
    coupling_coefficients,
)
from tests.test_models import SMALL, make_split


def _randomise(module: torch.nn.Module, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7)


def _k(layer: TemporalWeights, i: int, j: int, g: int = 0, a: int = 0, b: int = 0) -> float:
    """K_ij read off the parameters: i, j index the flattened weights, a, b their places in group g."""
    if layer.coupling_form == "dense":
        return layer.coupling[g, a, b].item()
    k_i = layer.receiver.flatten()[i].item()
    return k_i if layer.coupling_form == "weight" else k_i * layer.sender.flatten()[j].item()


def _by_formula(layer: TemporalWeights, t: float, groups: list[list[int]]) -> torch.Tensor:
    """w'_i = sum_j K_ij / n sin(f(t)(w_i - w_j) + phi(t)), the sum over i's group, in loops."""
    f, phi = (v.item() for v in layer.frequency_phase(torch.tensor(t)))
    w = layer.weight.detach().flatten().tolist()
    out = [0.0] * len(w)
    for g, members in enumerate(groups):
        for a, i in enumerate(members):
            total = sum(_k(layer, i, j, g, a, b) * math.sin(f * (w[i] - w[j]) + phi) for b, j in enumerate(members))
            out[i] = total / len(members)
    return torch.tensor(out).view(layer.rows, layer.cols)


def _eq2_double_sum(w: torch.Tensor, k: torch.Tensor, f: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """Eq. 2 term by term: w (rows, cols), K (#W, #W), f and phi scalars -> W' (rows, cols)."""
    flat = w.flatten()
    n = flat.numel()
    out = torch.zeros(n, dtype=w.dtype)
    for i in range(n):
        for j in range(n):
            out[i] = out[i] + k[i, j] / n * torch.sin(f * (flat[i] - flat[j]) + phi)
    return out.view_as(w)


@pytest.mark.parametrize("coupling", ["weight", "rank1", "dense"])
def test_full_coupling_is_eq2_by_a_double_sum(coupling: str) -> None:
    # Every weight of a 2 x 3 layer with every other, normalised by #W = 6 (Eqs. 1-2), at one
    # time for the batch and at a time per row.
    layer = TemporalWeights(2, 3, scope="full", clock_units=3, coupling=coupling).double()
    _randomise(layer, seed=4)
    n = 6
    k = torch.tensor([[_k(layer, i, j, 0, i, j) for j in range(n)] for i in range(n)], dtype=torch.float64)
    if coupling == "weight":
        assert torch.equal(k, layer.receiver.detach().flatten()[:, None].expand(n, n))  # K_ij = k_i
    torch.testing.assert_close(layer.coupling_matrix()[0].detach(), k)
    times = torch.tensor([0.0, 1.7, -2.3], dtype=torch.float64)
    with torch.no_grad():
        batch = layer(times)  # (3, 2, 3)
        for row, t in enumerate(times):
            f, phi = layer.frequency_phase(t)
            expected = _eq2_double_sum(layer.weight, k, f, phi)
            torch.testing.assert_close(layer(t), expected)
            torch.testing.assert_close(batch[row], expected)


@pytest.mark.parametrize("coupling", ["weight", "dense"])
@pytest.mark.parametrize(
    "scope, block, groups",
    [
        ("full", 1, [[0, 1, 2, 3, 4, 5]]),
        ("row", 1, [[0, 1, 2], [3, 4, 5]]),
        ("block", 4, [[0, 1, 2, 3], [4, 5]]),  # the last block is short: padding must not count
    ],
)
def test_weights_follow_the_coupling_formula(scope: str, block: int, groups: list[list[int]], coupling: str) -> None:
    layer = TemporalWeights(2, 3, scope=scope, block=block, clock_units=3, coupling=coupling)
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


@pytest.mark.parametrize("scope", ["full", "row"])
def test_initial_weights_are_the_centred_parameters_for_small_weights(scope: str) -> None:
    # K = 1, f = 1, phi = 0: w'_i = mean_j sin(w_i - w_j) ~ w_i - mean(w) when the weights are small
    layer = TemporalWeights(1, 4, scope=scope, block=1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.01, -0.02, 0.03, 0.0]]))
    w = layer.weight.detach()
    torch.testing.assert_close(layer(torch.tensor(3.0)).detach(), w - w.mean(), atol=1e-6, rtol=1e-3)


def test_coupling_coefficients_per_scope_and_form() -> None:
    rows, cols = 64, 64
    count = rows * cols
    assert coupling_coefficients(rows, cols, "full", 1) == count  # one per weight: the default
    assert coupling_coefficients(rows, cols, "full", 1, "rank1") == 2 * count
    assert coupling_coefficients(rows, cols, "full", 1, "dense") == count**2
    assert coupling_coefficients(rows, cols, "row", 1, "dense") == rows * cols * cols
    assert coupling_coefficients(rows, cols, "block", 16, "dense") == count * 16
    for scope, coupling in (("full", "weight"), ("full", "rank1"), ("block", "dense")):
        layer = TemporalWeights(rows, cols, scope=scope, block=16, coupling=coupling)
        named = layer.named_parameters()
        extra = sum(p.numel() for name, p in named if name != "weight" and not name.startswith("clock"))
        assert extra == coupling_coefficients(rows, cols, scope, 16, coupling)  # built as counted
    with pytest.raises(ValueError, match=r"tw_coupling='dense'.*4096"):
        TemporalWeights(MAX_DENSE_GROUP + 1, 1, scope="full", coupling="dense")
    with pytest.raises(ValueError, match=r"tw_scope.*valid"):
        TemporalWeights(2, 2, scope="diagonal")
    with pytest.raises(ValueError, match=r"tw_coupling.*valid"):
        TemporalWeights(2, 2, coupling="lowrank")
    with pytest.raises(ValueError, match="tw_block"):
        TemporalWeights(2, 2, scope="block", block=0)


def test_full_coupling_scales_to_large_layers_and_keeps_the_mean_field() -> None:
    # 256 x 256 = 65,536 weights all-to-all: a dense K would hold 4.3e9 coefficients. With
    # K_ij = k_i the layer is k_i times the same Eq. 2 sum as K = 1, which for small weights
    # is w - mean(w) over the whole layer.
    layer = TemporalWeights(256, 256, scope="full")
    assert layer.receiver.shape == (256, 256) and layer.coupling is None
    w = layer.weight.detach() * 1e-3
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.receiver.copy_(torch.linspace(-2.0, 2.0, 256 * 256).view(256, 256))
    out = layer(torch.tensor([0.0, 4.0]))
    assert out.shape == (2, 256, 256)
    expected = layer.receiver.detach() * (w - w.mean())
    torch.testing.assert_close(out[0].detach(), expected, atol=1e-9, rtol=1e-3)


def test_algorithm1_layout_has_no_bias_and_tanh_after_every_layer() -> None:
    # Algorithm 1: h'_l = tanh(h'_{l-1} W'_l), l = 1..L, the last layer included.
    mlp = TemporalMLP([3, 4, 2], scope="full", block=1, clock_units=3, layout="algorithm1")
    _randomise(mlp, seed=5)
    assert all(layer.bias is None for layer in mlp.layers)
    x, t = torch.randn(5, 3), torch.tensor(0.8)
    first, second = (layer.weights(t) for layer in mlp.layers)
    torch.testing.assert_close(mlp(x, t), torch.tanh(torch.tanh(x @ first.T) @ second.T))
    plain = TemporalMLP([3, 4, 2], scope="full", block=1, clock_units=3)  # the base field's layout
    _randomise(plain, seed=5)
    first, second = (layer.weights(t) for layer in plain.layers)
    b1, b2 = (layer.bias for layer in plain.layers)
    torch.testing.assert_close(plain(x, t), torch.tanh(x @ first.T + b1) @ second.T + b2)
    with pytest.raises(ValueError, match="tw_layout"):
        TemporalMLP([3, 2], scope="full", block=1, clock_units=3, layout="paper")


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
    with pytest.raises(ValueError, match="tw_coupling"):
        cls(input_channels=2, output_size=1, tw_coupling="lowrank")
    if name in ("ode_rnn_tw", "latent_ode_tw"):  # the tanh-MLP fields offer Algorithm 1's layout
        with pytest.raises(ValueError, match="tw_layout"):
            cls(input_channels=2, output_size=1, tw_layout="paper")


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


def _latent(name: str, per_step: bool, **kwargs: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return get_model_class(name)(input_channels=2, output_size=3, per_step=per_step, **{**SMALL[name], **kwargs})


@pytest.mark.parametrize("clock", ["time", "index"])
def test_per_sequence_latent_ode_tw_decodes_with_temporal_weights(clock: str) -> None:
    # Algorithm 1 is the decoder: per sequence it runs z0 through the observation times with
    # temporal weights, and the classifier reads z at each row's last observation, the value
    # the per-step model reads at that step.
    model = _latent("latent_ode_tw", per_step=False, tw_clock=clock)
    assert isinstance(model.rec_field, TemporalMLP) and isinstance(model.gen_field, TemporalMLP)
    x, t, mask = make_split([4, 2, 3], length=4)
    inputs = model.prepare_inputs(x, t, mask)
    model(**inputs).square().sum().backward()
    decoder = [p for n, p in model.gen_field.named_parameters()
               if n.endswith(("weights.weight", "receiver", "clock.2.weight"))]  # W, K and f, phi of each layer
    assert len(decoder) == 3 * len(model.gen_field.layers)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in decoder)

    per_step = _latent("latent_ode_tw", per_step=True, tw_clock=clock)
    per_step.load_state_dict(model.state_dict())
    model.eval(), per_step.eval()
    with torch.no_grad():
        last = mask.sum(dim=1) - 1
        torch.testing.assert_close(model(**inputs), per_step(**inputs)[torch.arange(3), last])
        z0, _ = model.encode(**inputs)
        assert not torch.allclose(model(**inputs), model.classifier(z0))  # not the z0 readout


@pytest.mark.parametrize("name, clock", [("latent_ode", None), ("latent_ode_tw", "time"), ("latent_ode_tw", "index")])
def test_time_scale_is_the_same_model_on_scaled_times(name: str, clock: str | None) -> None:
    # time_scale c multiplies the observation times before both ODEs and the temporal weights'
    # clock read them: the model on dt is the unscaled model, same weights, on c * dt (the
    # reference's time on [0, 1], latent_ode.py's docstring). c = 1 changes nothing.
    extra = {} if clock is None else {"tw_clock": clock}
    scaled = _latent(name, per_step=False, time_scale=1 / 48, **extra).eval()
    plain = _latent(name, per_step=False, **extra).eval()
    plain.load_state_dict(scaled.state_dict())
    inputs = scaled.prepare_inputs(*make_split([4, 2, 3], length=4))
    with torch.no_grad():
        got = scaled(**inputs)
        torch.testing.assert_close(got, plain(**{**inputs, "dt": inputs["dt"] * (1 / 48)}), rtol=0, atol=0)
        assert not torch.allclose(got, plain(**inputs))  # the scale reaches the output
    with pytest.raises(ValueError, match="time_scale"):
        _latent(name, per_step=False, time_scale=0.0)


def test_latent_ode_z0_readout_builds_no_decoder_and_reads_z0() -> None:
    for name in ("latent_ode", "latent_ode_tw"):
        model = _latent(name, per_step=False, sequence_readout="z0").eval()
        assert model.gen_field is None
        inputs = model.prepare_inputs(*make_split([3, 2], length=3))
        with torch.no_grad():
            mean, _ = model.encode(**inputs)
            torch.testing.assert_close(model(**inputs), model.classifier(mean))
    with pytest.raises(ValueError, match="sequence_readout"):
        _latent("latent_ode", per_step=False, sequence_readout="last")


def test_latent_ode_linear_classifier() -> None:
    # classifier_units = 0: the reference's --linear-classif (its Human Activity run)
    model = _latent("latent_ode", per_step=True, classifier_units=0)
    assert len(model.classifier) == 1 and isinstance(model.classifier[0], torch.nn.Linear)
    assert model.classifier[0].in_features == SMALL["latent_ode"]["latent_size"]


def test_latent_ode_tw_adds_one_coupling_coefficient_per_ode_weight() -> None:
    # The paper's TW Latent ODE sizes (Sec. 3.1): hidden 20, ODEs 25 x 3 layers, latent 20; its
    # ODE networks 20 -> 25 -> 25 -> 25 -> 25 -> 20 hold 2,875 weights each. With K_ij = k_i,
    # temporal weights add one coefficient per weight and the f, phi network (66 per layer).
    sizes = dict(latent_size=20, rec_size=20, rec_layers=3, gen_layers=3, units=25, sequence_readout="decoded")
    plain = get_model_class("latent_ode")(input_channels=42, output_size=1, **sizes)
    temporal = get_model_class("latent_ode_tw")(input_channels=42, output_size=1, tw_units=16, **sizes)
    linears = [m for field in (plain.rec_field, plain.gen_field) for m in field if isinstance(m, torch.nn.Linear)]
    weights = sum(m.weight.numel() for m in linears)
    assert weights == 2 * 2875
    clocks = len(linears) * (1 * 16 + 16 + 16 * 2 + 2)
    assert temporal.num_parameters() == plain.num_parameters() + weights + clocks


def _assert_precomputation_changes_nothing(model: torch.nn.Module, inputs: dict, seed: int | None = None) -> None:
    """Outputs (to 1e-5) and gradients (to 1e-5 / 1e-4 relative) of one forward and backward pass
    are the same with the stage weights precomputed (tw_stages) as built at every evaluation.
    `seed`: reseeded before each pass, for models that sample in training (Latent ODE's z0)."""
    results = []
    for precompute in (False, True):
        model.precompute_stages = precompute
        model.zero_grad()
        if seed is not None:
            torch.manual_seed(seed)
        out = model(**inputs)
        out.square().sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (out_each, grads_each), (out_once, grads_once) = results
    torch.testing.assert_close(out_once, out_each, rtol=0, atol=1e-5)
    assert grads_once and len(grads_once) == len(grads_each)
    for a, b in zip(grads_once, grads_each):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options", [
    {"solver_steps": 1},
    {"solver_steps": 3},
    {"solver_steps": 2, "tw_clock": "index"},
    {"method": "euler", "solver_steps": 2, "tw_scope": "block", "tw_coupling": "rank1"},
    {"tw_layout": "algorithm1", "tw_scope": "row"},
    {"tw_coupling": "dense", "tw_scope": "block", "tw_block": 8},
])
@pytest.mark.parametrize("chunk", ["large", "small"])
def test_ode_rnn_tw_weights_built_per_interval_equal_those_built_per_evaluation(options: dict, chunk: str,
                                                                               monkeypatch) -> None:
    # The stage precomputation (tw_stages.IntervalStages) must be an implementation detail: the
    # same outputs and gradients on a fixed batch as building W'(t) at every solver evaluation;
    # "small" builds one interval per call, "large" all seven in one.
    from pipeline.models.temporal_weights import stages as tw_stages
    from pipeline.models.temporal_weights.ode_models import ODERNNTW

    monkeypatch.setattr(tw_stages, "CHUNK_ELEMENTS", 1 if chunk == "small" else 1 << 22)
    torch.manual_seed(0)
    x, dt, mask = torch.randn(6, 7, 3), torch.rand(6, 7) + 0.1, torch.rand(6, 7) > 0.2
    dt[:2, 5:], mask[:2, 5:] = 0.0, False  # padded rows: dt = 0
    model = ODERNNTW(input_channels=3, output_size=2, hidden_size=8, vf_units=5, **options)
    _assert_precomputation_changes_nothing(model, {"x": x, "dt": dt, "mask": mask})


def test_stage_grid_knows_the_fixed_step_solvers_evaluation_times() -> None:
    from pipeline.models.temporal_weights.stages import stage_grid

    assert stage_grid({"method": "rk4", "options": {"step_size": 1.0 / 3}}) == (9, 10)  # 3/8 rule: thirds, both ends
    assert stage_grid({"method": "euler", "options": {"step_size": 0.5}}) == (2, 2)  # step starts only
    assert stage_grid({"method": "midpoint", "options": {"step_size": 1.0}}) == (2, 2)
    assert stage_grid({"method": "dopri5", "rtol": 1e-3, "atol": 1e-4, "options": {"max_num_steps": 100}}) is None
    assert stage_grid({"method": "rk4", "options": {"step_size": 0.3}}) is None  # not a whole number of steps


def test_an_evaluation_off_the_grid_builds_its_own_weights() -> None:
    from pipeline.models.temporal_weights.weights import TemporalMLP
    from pipeline.models.temporal_weights.stages import IntervalStages

    torch.manual_seed(0)
    net = TemporalMLP([4, 3, 4], scope="full", block=16, clock_units=4)
    start, dt = torch.rand(5, 2), torch.rand(5, 2) + 0.5  # (B, n): two intervals
    field = IntervalStages(net, (3, 3), start, dt).field(1, dt[:, 1])  # the end, s = 1, is not built ahead
    h = torch.randn(5, 4)
    assert len(field.stages[0]) == 3 and field.stages[0][0].shape == (5, 3, 4)
    for s in (0.0, 1.0 / 3, 0.5, 1.0):  # 0.5 is off the grid of thirds, 1.0 past its points
        expected = dt[:, 1:] * net(h, start[:, 1] + s * dt[:, 1])
        torch.testing.assert_close(field(torch.tensor(s), h), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chained", [False, True])
@pytest.mark.parametrize("clock", ["time", "index"])
def test_interval_stages_split_into_chunks_give_every_interval_its_own_weights(clock: str, chained: bool,
                                                                              monkeypatch) -> None:
    # A chunk budget of two intervals' weights (5 rows x 3 times x 12 weights each) splits 5
    # intervals into chunks of 2, 2, 1; each interval's weights are those of its own times,
    # whichever order the intervals are asked for (the Latent ODE encoder walks backwards).
    # Chained intervals (each starts where the one before ends) build their shared end once:
    # 2 times per interval, the chunk's last end besides.
    from pipeline.models.temporal_weights import stages as tw_stages
    from pipeline.models.temporal_weights.weights import TemporalMLP

    torch.manual_seed(0)
    net = TemporalMLP([4, 3, 4], scope="full", block=16, clock_units=4)
    rows = 5 if clock == "time" else 1
    per_interval = 2 if chained else 3
    monkeypatch.setattr(tw_stages, "CHUNK_ELEMENTS", 2 * rows * per_interval * 12 + 1)
    shape = (5, 5) if clock == "time" else (5,)
    rate = torch.rand(shape) + 0.5
    start = torch.cumsum(rate, dim=-1) - rate if chained else torch.rand(shape)
    stages = tw_stages.IntervalStages(net, (2, 3), start, rate, chained=chained)
    assert stages.size == 2
    for interval in (4, 0, 3, 1, 2):
        weights = stages.at(interval)
        for k in range(3):
            clock_k = start[..., interval] + k / 2 * rate[..., interval]
            for layer, built in zip(net.layers, weights):
                assert len(built) == 3
                torch.testing.assert_close(built[k], layer.weights(clock_k), rtol=0, atol=1e-6)
    assert sorted(stages.chunks) == [0, 1, 2]
    built = [len(stages.chunks[c][0]) for c in (0, 1, 2)]  # times built per chunk (first layer)
    assert built == ([5, 5, 3] if chained else [6, 6, 3])


@pytest.mark.parametrize("clock", ["time", "index"])
@pytest.mark.parametrize("solver", [{"method": "euler", "solver_steps": 2}, {"method": "rk4", "solver_steps": 2}])
@pytest.mark.parametrize("chunk", ["large", "small"])
def test_latent_ode_tw_weights_built_per_interval_equal_those_built_per_evaluation(clock: str, solver: dict, chunk: str,
                                                                                  monkeypatch) -> None:
    from pipeline.models.temporal_weights import stages as tw_stages

    monkeypatch.setattr(tw_stages, "CHUNK_ELEMENTS", 1 if chunk == "small" else 1 << 22)
    model = _latent("latent_ode_tw", per_step=False, tw_clock=clock, **solver)
    x, t, mask = make_split([4, 2, 3], length=5)
    inputs = model.prepare_inputs(x, t, mask)
    _assert_precomputation_changes_nothing(model, inputs, seed=3)  # z0 is sampled in training


def test_sin_cos_gradient_is_the_analytic_one() -> None:
    from pipeline.models.temporal_weights.weights import sin_cos

    angle = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: sin_cos(a), (angle,))
    assert torch.autograd.gradcheck(lambda a: sin_cos(a)[0], (angle,))  # cos unused: no gradient flows to it
    assert torch.autograd.gradcheck(lambda a: sin_cos(a)[1], (angle,))


@pytest.mark.parametrize("name", ["gru_ode_tw", "ncde_tw"])
@pytest.mark.parametrize("clock", ["time", "index"])
@pytest.mark.parametrize("solver", [{"method": "rk4", "step_fraction": 0.5}, {"method": "rk4", "step_fraction": 0.4},
                                    {"method": "euler", "step_fraction": 1.0}])
def test_path_driven_tw_weights_built_per_step_equal_those_built_per_evaluation(name: str, clock: str,
                                                                               solver: dict, monkeypatch) -> None:
    # tw_stages.StageCache over a whole cdeint / odeint solve: the same outputs and gradients as
    # building W'(t) at every evaluation. step_fraction 0.4 does not divide the 5-index path, so
    # its last step is shorter and off the grid: those evaluations build their own weights. The
    # chunk budget fits about three solver steps of the largest layer: several chunks per solve.
    from pipeline.models.temporal_weights import stages as tw_stages

    monkeypatch.setattr(tw_stages, "CHUNK_ELEMENTS", 3 * 3 * 3 * 8 * 8)
    torch.manual_seed(0)
    kwargs = {**SMALL[name], "tw_clock": clock, **solver}
    model = get_model_class(name)(input_channels=2, output_size=2, **kwargs)
    inputs = type(model).prepare_inputs(*make_split([5, 3, 4], length=5), **kwargs)
    _assert_precomputation_changes_nothing(model, inputs)


def test_the_stage_cache_is_not_used_with_the_adjoint() -> None:
    # the adjoint's backward solve evaluates the field again with gradients on: weights built in
    # the forward solve (no graph) would give the parameters no gradient
    model = get_model_class("ncde_tw")(input_channels=2, output_size=1, **SMALL["ncde_tw"], adjoint=True)
    inputs = type(model).prepare_inputs(*make_split([3, 2], length=3))
    model(**inputs).sum().backward()
    clocks = [p for n, p in model.named_parameters() if ".clock." in n]
    assert all(p.grad is not None for p in clocks)


@pytest.mark.parametrize("coupling", ["weight", "rank1"])
@pytest.mark.parametrize("scope, block", [("full", 16), ("row", 16), ("block", 7), ("block", 6)])
def test_fused_eq2_equals_autograd_through_the_composed_operations(scope: str, block: int, coupling: str) -> None:
    # tw_fused.FactoredEq2 writes Eq. 2's backward out by hand: its values and every gradient
    # (weights, k, sender, the clock network through f and phi) must be autograd's through the
    # composed operations. Blocks of 7 leave the 30-weight layer's last block part padding
    # (cos 0 = 1 taken off C), blocks of 6 divide it.
    torch.manual_seed(0)
    from pipeline.models.temporal_weights.weights import TemporalWeights

    layer = TemporalWeights(5, 6, scope, block, 4, coupling).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))  # away from the initial k = 1, f = 1, phi = 0
    times = torch.rand(3, 4, dtype=torch.float64)
    fused, composed = layer(times), layer.composed(times)
    assert fused.shape == (3, 4, 5, 6)
    torch.testing.assert_close(fused, composed, rtol=0, atol=1e-12)
    params = [p for p in layer.parameters()]
    weight = torch.randn_like(fused)
    got = torch.autograd.grad((fused * weight).sum(), params)
    want = torch.autograd.grad((composed * weight).sum(), params)
    for name, a, b in zip([n for n, _ in layer.named_parameters()], got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("coupling", ["weight", "rank1"])
def test_fused_eq2_gradient_is_the_analytic_one(coupling: str) -> None:
    from pipeline.models.temporal_weights.fused import FactoredEq2

    torch.manual_seed(1)
    f, phi = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    w, k = torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 5, dtype=torch.float64)
    sender = torch.randn(2, 5, dtype=torch.float64) if coupling == "rank1" else None
    pad, scale = torch.zeros(2, dtype=torch.float64), torch.full((2,), 0.2, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (f, phi, w, k) + ((sender,) if sender is not None else ())]

    def eq2(*args: torch.Tensor) -> torch.Tensor:
        return FactoredEq2.apply(*args[:4], args[4] if sender is not None else None, pad, scale)

    assert torch.autograd.gradcheck(eq2, tuple(inputs))


def test_per_row_weights_are_built_once_per_distinct_time() -> None:
    # W'(t) is a function of t alone (Eqs. 1-2): rows at the same time (a padded row holds its
    # last time; rows share observation times) get the weights of that time, built once, equal
    # bit for bit to those built per row; gradients flow back to the shared parameters alike.
    from pipeline.models.temporal_weights.stages import at_distinct_times

    torch.manual_seed(0)
    layer = TemporalWeights(3, 4, scope="full", clock_units=4)
    _randomise(layer)
    clock = torch.tensor([[0.5, 0.5, 1.0], [2.0, 0.5, 2.0]])  # (N=2, B=3): 3 distinct times of 6
    built: list[int] = []
    layer.register_forward_hook(lambda _m, _i, out: built.append(out.shape[0]))
    shared = at_distinct_times(layer, clock)
    assert built == [3] and shared.shape == (2, 3, 3, 4)
    per_row = layer(clock)
    assert torch.equal(shared, per_row)
    weights = torch.randn(2, 3, 3, 4)
    grads = [torch.autograd.grad((w * weights).sum(), layer.weight)[0] for w in (shared, per_row)]
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)
    assert torch.equal(at_distinct_times(layer, torch.tensor([0.0, 1.0])), layer(torch.tensor([0.0, 1.0])))
