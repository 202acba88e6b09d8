"""The closed-form family (CfC, CfC-noGate, Cf-S, CfC-mmRNN) and LTC against their equations.

Each expected value is written out here from the module's own weights, independently of the
module's fused/precomputed implementation, on hand-sized tensors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pipeline.models.cfc.cfc import CfC, CfCMMRNN, CfCNoGate, CfS, last_observed_and_mask
from pipeline.models.cfc.ltc import LTC

C, H, U = 3, 4, 5  # input channels, hidden size, backbone units


def small(cls: type, **kwargs: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls(input_channels=C, output_size=2, hidden_size=H, backbone_units=U,
               backbone_activation="tanh", **kwargs)


def features(model: torch.nn.Module, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """u = tanh([x, h] W^T + b) of a one-layer tanh backbone, from its weights."""
    bb = model.cell.backbone
    weight = torch.cat([bb.input_map.weight, bb.recurrent_map.weight], dim=1)  # (U, C + H)
    return torch.tanh(torch.cat([x, h], dim=-1) @ weight.T + bb.input_map.bias)


def cfc_heads(model: torch.nn.Module, u: torch.Tensor, dt: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """tanh(g(u)), tanh(k(u)) and the gate sigmoid(f_a(u) dt + f_b(u)), head by head."""
    w_g, w_k, w_a, w_b = model.cell.heads.weight.split(H)
    b_g, b_k, b_a, b_b = model.cell.heads.bias.split(H)
    g = torch.tanh(u @ w_g.T + b_g)
    k = torch.tanh(u @ w_k.T + b_k)
    gate = torch.sigmoid((u @ w_a.T + b_a) * dt + (u @ w_b.T + b_b))
    return g, k, gate


def eq10(model: torch.nn.Module, x: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    g, k, gate = cfc_heads(model, features(model, x, h), dt)
    return g * (1 - gate) + gate * k


def step(model: torch.nn.Module, x: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    return model.cell(model.cell.project_inputs(x), h, dt)


def inputs(batch: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, C, generator=gen), torch.randn(batch, H, generator=gen),
            torch.rand(batch, 1, generator=gen) * 2)


def test_cfc_step_is_eq10() -> None:
    model = small(CfC)
    x, h, dt = inputs()
    torch.testing.assert_close(step(model, x, h, dt), eq10(model, x, h, dt))


def test_cfc_gate_moves_from_g_to_k_as_time_passes() -> None:
    model = small(CfC)
    x, h, _ = inputs()
    g, k, _ = cfc_heads(model, features(model, x, h), torch.zeros(2, 1))
    f_a = features(model, x, h) @ model.cell.heads.weight.split(H)[2].T + model.cell.heads.bias.split(H)[2]
    late = step(model, x, h, torch.full((2, 1), 1e4))
    # sigmoid(f_a dt + f_b) -> 1 where f_a > 0 (state k), -> 0 where f_a < 0 (state g)
    torch.testing.assert_close(late, torch.where(f_a > 0, k, g), rtol=0, atol=1e-4)


def test_no_gate_step() -> None:
    model = small(CfCNoGate)
    x, h, dt = inputs()
    g, k, gate = cfc_heads(model, features(model, x, h), dt)
    torch.testing.assert_close(step(model, x, h, dt), g + gate * k)


def test_cf_s_step_is_eq9() -> None:
    model = small(CfS)
    with torch.no_grad():  # away from the initial w_tau = 0, A = 1
        model.cell.w_tau.copy_(torch.tensor([[0.5, -0.2, 0.0, 1.0]]))
        model.cell.A.copy_(torch.tensor([[1.5, -0.5, 2.0, 0.3]]))
    x, h, dt = inputs()
    f = features(model, x, h) @ model.cell.head.weight.T + model.cell.head.bias
    a, w_tau = model.cell.A, model.cell.w_tau
    expected = -a * torch.exp(-(w_tau.abs() + f.abs()) * dt) * f + a  # B = x(0) - A = -A
    torch.testing.assert_close(step(model, x, h, dt), expected)
    # the solution relaxes to its equilibrium A
    torch.testing.assert_close(step(model, x, h, torch.full((2, 1), 1e4)), a.expand(2, H))


def test_cf_s_printed_form_is_eq9_with_its_own_b_and_a_sigmoid_f() -> None:
    model = small(CfS, form="eq9")
    cell = model.cell
    assert not any("backbone" in name for name, _ in model.named_parameters())  # f is one layer
    with torch.no_grad():
        cell.w_tau.copy_(torch.tensor([[0.5, -0.2, 0.0, 1.0]]))
        cell.A.copy_(torch.tensor([[1.5, -0.5, 2.0, 0.3]]))
        cell.B.copy_(torch.tensor([[0.7, 1.0, -2.0, 0.1]]))
        cell.bias.copy_(torch.tensor([[0.3, -0.4, 0.0, 0.8]]))
    x, h, dt = inputs()

    def f(state: torch.Tensor, inp: torch.Tensor) -> torch.Tensor:  # one theta = {W_Ix, W_xx, b_x}
        return torch.sigmoid(inp @ cell.input_map.weight.T + state @ cell.recurrent_map.weight.T + cell.bias)

    expected = cell.B * torch.exp(-(cell.w_tau.abs() + f(h, x)) * dt) * f(-h, -x) + cell.A  # Eq. 9
    torch.testing.assert_close(step(model, x, h, dt), expected)
    torch.testing.assert_close(step(model, x, h, torch.zeros(2, 1)), cell.B * f(-h, -x) + cell.A)  # x(0) side
    assert not torch.allclose(f(-h, -x), 1 - f(h, x))  # the bias keeps its sign: not the complement
    with pytest.raises(ValueError, match=r"unknown form 'paper'; valid: \['code', 'eq9'\]"):
        small(CfS, form="paper")


def test_mixed_memory_sequence_is_lstm_then_cfc() -> None:
    model = small(CfCMMRNN, forget_bias=0.7, per_step=True, time_scale=2.0)
    gen = torch.Generator().manual_seed(2)
    x, dt = torch.randn(2, 3, C, generator=gen), torch.rand(2, 3, generator=gen)
    lstm = model.memory
    h, c, outputs = torch.zeros(2, H), torch.zeros(2, H), []
    for t in range(3):
        z = x[:, t] @ lstm.input_map.weight.T + lstm.input_map.bias + h @ lstm.recurrent_map.weight.T
        i, i_gate, f_gate, o_gate = z.split(H, dim=-1)
        c = c * torch.sigmoid(f_gate + 0.7) + torch.tanh(i) * torch.sigmoid(i_gate)
        h_lstm = torch.tanh(c) * torch.sigmoid(o_gate)
        h = eq10(model, x[:, t], h_lstm, 2.0 * dt[:, t, None])
        outputs.append(h @ model.readout.weight.T + model.readout.bias)
    got = model(x=x, dt=dt, mask=torch.ones(2, 3, dtype=torch.bool))
    torch.testing.assert_close(got, torch.stack(outputs, dim=1))


@pytest.mark.parametrize("cls", [CfC, CfCNoGate, CfS])
def test_time_scale_multiplies_elapsed_time(cls: type) -> None:
    gen = torch.Generator().manual_seed(3)
    x, dt = torch.randn(2, 4, C, generator=gen), torch.rand(2, 4, generator=gen)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    scaled = small(cls, time_scale=3.0)(x=x, dt=dt, mask=mask)
    torch.testing.assert_close(scaled, small(cls)(x=x, dt=3.0 * dt, mask=mask))


def test_sequence_output_reads_the_last_observed_step() -> None:
    model = small(CfC, per_step=True)
    gen = torch.Generator().manual_seed(4)
    x, dt = torch.randn(2, 4, C, generator=gen), torch.rand(2, 4, generator=gen)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    per_step = model(x=x, dt=dt, mask=mask)
    model.per_step = False
    torch.testing.assert_close(model(x=x, dt=dt, mask=mask), per_step[[0, 1], [3, 1]])


def test_backbone_dropout_follows_layers_two_and_up() -> None:
    def dropouts(layers: int) -> int:
        model = small(CfC, backbone_layers=layers, backbone_dropout=0.2)
        return sum(isinstance(m, torch.nn.Dropout) for m in model.cell.backbone.modules())

    assert [dropouts(1), dropouts(2), dropouts(3)] == [0, 1, 2]


def lecun_tanh(z: torch.Tensor) -> torch.Tensor:
    return 1.7159 * torch.tanh(0.666 * z)


def test_keras_code_drops_out_after_every_layer_and_squashes_with_lecun_tanh() -> None:
    """tf_cfc.py CfcCell: Dropout after each backbone Dense (a one-layer one included), ff1 and ff2
    with lecun_tanh, every Dense bias starting at 0."""
    def dropouts(layers: int) -> int:
        model = small(CfC, backbone_layers=layers, backbone_dropout=0.2, code="keras")
        return sum(isinstance(m, torch.nn.Dropout) for m in model.cell.backbone.modules())

    assert [dropouts(1), dropouts(2), dropouts(3)] == [1, 2, 3]
    model = small(CfC, code="keras")
    biases = [model.cell.backbone.input_map.bias, model.cell.heads.bias, model.readout.bias]
    assert all(torch.count_nonzero(b) == 0 for b in biases)
    with torch.no_grad():  # away from the zero start, to see every term
        model.cell.heads.bias.normal_(generator=torch.Generator().manual_seed(5))
        model.cell.backbone.input_map.bias.normal_(generator=torch.Generator().manual_seed(6))
    x, h, dt = inputs()
    u = features(model, x, h)
    w_g, w_k, w_a, w_b = model.cell.heads.weight.split(H)
    b_g, b_k, b_a, b_b = model.cell.heads.bias.split(H)
    g, k = lecun_tanh(u @ w_g.T + b_g), lecun_tanh(u @ w_k.T + b_k)
    gate = torch.sigmoid((u @ w_a.T + b_a) * dt + (u @ w_b.T + b_b))
    torch.testing.assert_close(step(model, x, h, dt), g * (1 - gate) + gate * k)
    dropped = small(CfC, backbone_dropout=0.5, code="keras")
    assert not torch.equal(step(dropped.train(), x, h, dt), step(dropped.eval(), x, h, dt))
    with pytest.raises(ValueError, match=r"unknown code 'tf'; valid: \['torch', 'keras'\]"):
        small(CfC, code="tf")


def test_keras_mixed_memory_feeds_the_lstm_output_to_the_cfc_as_its_input() -> None:
    """tf_cfc.py MixedCfcCell: the LSTM reads x and the CfC's state; the CfC reads the LSTM's
    output as its input and keeps its own state."""
    model = small(CfCMMRNN, forget_bias=0.7, per_step=True, code="keras")
    lstm, bb = model.memory, model.cell.backbone
    assert bb.input_map.in_features == H and torch.count_nonzero(lstm.input_map.bias) == 0
    gen = torch.Generator().manual_seed(2)
    x, dt = torch.randn(2, 3, C, generator=gen), torch.rand(2, 3, generator=gen)
    h, c, outputs = torch.zeros(2, H), torch.zeros(2, H), []
    for t in range(3):
        z = x[:, t] @ lstm.input_map.weight.T + h @ lstm.recurrent_map.weight.T
        i, i_gate, f_gate, o_gate = z.split(H, dim=-1)
        c = c * torch.sigmoid(f_gate + 0.7) + torch.tanh(i) * torch.sigmoid(i_gate)
        h_lstm = torch.tanh(c) * torch.sigmoid(o_gate)
        u = torch.tanh(torch.cat([h_lstm, h], -1) @ bb.first_weight().T + bb.input_map.bias)
        w_g, w_k, w_a, w_b = model.cell.heads.weight.split(H)
        g, k = lecun_tanh(u @ w_g.T), lecun_tanh(u @ w_k.T)
        gate = torch.sigmoid((u @ w_a.T) * dt[:, t, None] + u @ w_b.T)
        h = g * (1 - gate) + gate * k
        outputs.append(h @ model.readout.weight.T)
    got = model(x=x, dt=dt, mask=torch.ones(2, 3, dtype=torch.bool))
    torch.testing.assert_close(got, torch.stack(outputs, dim=1))


def test_init_gain_sets_the_xavier_bound() -> None:
    model = small(CfC, init_gain=0.5)
    bound = lambda fan_in, fan_out: 0.5 * math.sqrt(6.0 / (fan_in + fan_out))  # noqa: E731
    first = model.cell.backbone.first_weight()
    heads = model.cell.heads.weight
    assert first.abs().max() <= bound(C + H, U) and heads.abs().max() <= bound(U, H)
    assert heads.abs().max() > 0.5 * bound(U, H)  # drawn over the whole range, not shrunk


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (CfC, {"backbone_activation": "swish"}, r"backbone_activation.*lecun_tanh"),
        (CfC, {"backbone_layers": 0}, "backbone_layers must be > 0"),
        (CfS, {"backbone_dropout": 1.0}, r"backbone_dropout must be in \[0, 1\)"),
        (CfCNoGate, {"time_scale": 0.0}, "time_scale must be > 0"),
        (CfCMMRNN, {"init_gain": -1.0}, "init_gain must be > 0"),
        (CfC, {"missing_values": "mean"}, r"missing_values 'mean'.*last_and_mask"),
        (LTC, {"solver": "midpoint"}, r"solver 'midpoint'.*fused"),
        (LTC, {"ode_unfolds": 0}, "ode_unfolds must be >= 1"),
        (LTC, {"hidden_size": 0}, "hidden_size must be >= 1"),
    ],
)
def test_bad_arguments_are_rejected(cls: type, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cls(input_channels=C, output_size=2, **kwargs)


def test_last_observed_and_mask_carries_each_channel_forward_on_its_own() -> None:
    nan = float("nan")
    x = torch.tensor([[[nan, 1.0], [2.0, nan], [nan, nan], [nan, 3.0]]])  # (1, 4, 2)
    carried, flags = last_observed_and_mask(x).split(2, dim=-1)
    assert carried.tolist() == [[[0.0, 1.0], [2.0, 1.0], [2.0, 1.0], [2.0, 3.0]]]  # 0 before a first value
    assert flags.tolist() == [[[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]]


@pytest.mark.parametrize("cls", [CfC, CfCNoGate, CfS, CfCMMRNN])
def test_last_and_mask_doubles_what_a_step_reads_and_reads_no_later_step(cls: type) -> None:
    """The authors' PhysioNet inputs (train_physio.py in_features=41 * 2): 2C per step; a later
    value changes no earlier output (per step), as with missing values read as 0."""
    x = torch.randn(2, 6, C)
    x[0, 1, 0] = x[1, 3, 2] = float("nan")
    t = torch.arange(6.0).expand(2, 6)
    mask = torch.ones(2, 6, dtype=torch.bool)
    model = small(cls, missing_values="last_and_mask", per_step=True).eval()
    inputs = cls.prepare_inputs(x, t, mask, missing_values="last_and_mask")
    assert inputs["x"].shape == (2, 6, 2 * C) and not inputs["x"].isnan().any()
    later = x.clone()
    later[:, 4:] += 5.0
    changed = cls.prepare_inputs(later, t, mask, missing_values="last_and_mask")
    assert torch.allclose(model(**inputs)[:, :4], model(**changed)[:, :4], atol=1e-6)
    with pytest.raises(ValueError, match=rf"expected x \(B, L, {2 * C}\)"):
        model(**cls.prepare_inputs(x, t, mask))  # the C-channel inputs of `zero`


# ----------------------------------------------------------------------------------------- LTC


def ltc(**kwargs: object) -> LTC:
    torch.manual_seed(0)
    model = LTC(input_channels=2, output_size=1, hidden_size=3, **kwargs)
    with torch.no_grad():  # raw conductances partly negative: softplus must make them positive
        model.cell.w.sub_(0.8)
        model.cell.input_w.copy_(torch.tensor([0.5, -1.5]))
        model.cell.input_b.copy_(torch.tensor([0.1, 0.2]))
    return model


def ltc_terms(model: LTC, x: torch.Tensor, v: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per neuron j: sums over sensory and recurrent synapses, written as loops (batch of 1)."""
    p = {name: param.detach() for name, param in model.cell.named_parameters()}
    soft = F.softplus
    x = x * p["input_w"] + p["input_b"]
    terms = {key: torch.zeros(3) for key in ("num", "den")}
    for j in range(3):
        for k in range(2):
            s = soft(p["sensory_w"][k, j]) * torch.sigmoid(p["sensory_sigma"][k, j] * (x[k] - p["sensory_mu"][k, j]))
            terms["num"][j] += s * p["sensory_erev"][k, j]
            terms["den"][j] += s
        for i in range(3):
            s = soft(p["w"][i, j]) * torch.sigmoid(p["sigma"][i, j] * (v[i] - p["mu"][i, j]))
            terms["num"][j] += s * p["erev"][i, j]
            terms["den"][j] += s
    terms.update(cm=soft(p["cm"]), gleak=soft(p["gleak"]), vleak=p["vleak"])
    return terms


def ltc_solve(model: LTC, x: torch.Tensor, v: torch.Tensor, dt: float, unfolds: int) -> torch.Tensor:
    syn = model.cell.synapses()
    sensory = model.cell.sensory_currents(x[None])
    return model.cell.fused_solve(v[None], syn, sensory, torch.tensor([[dt]]), unfolds)[0]


def test_ltc_one_fused_unfold() -> None:
    model = ltc()
    x, v, dt = torch.tensor([0.3, -0.7]), torch.tensor([0.2, -0.4, 0.9]), 0.5
    t = ltc_terms(model, x, v)
    cm_t = t["cm"] / (dt + 1e-3)  # one unfold: delta = dt (+ the 1e-3 that keeps it finite)
    expected = (cm_t * v + t["gleak"] * t["vleak"] + t["num"]) / (cm_t + t["gleak"] + t["den"] + 1e-8)
    new = ltc_solve(model, x, v, dt, unfolds=1)
    torch.testing.assert_close(new, expected)
    # semi-implicit Euler: activations at v, the linear terms at the new state
    residual = cm_t * (new - v) - (t["gleak"] * (t["vleak"] - new) + t["num"] - new * t["den"])
    assert residual.abs().max() < 1e-5


def test_ltc_unfolds_repeat_the_step_with_a_shorter_delta() -> None:
    model = ltc()
    x, v = torch.tensor([0.3, -0.7]), torch.tensor([0.2, -0.4, 0.9])
    twice = ltc_solve(model, x, ltc_solve(model, x, v, 0.25 - 5e-4, 1), 0.25 - 5e-4, 1)
    torch.testing.assert_close(ltc_solve(model, x, v, 0.5, unfolds=2), twice)


def test_ltc_derivative_is_the_conductance_ode() -> None:
    model = ltc()
    x, v = torch.tensor([0.3, -0.7]), torch.tensor([0.2, -0.4, 0.9])
    t = ltc_terms(model, x, v)
    expected = (t["gleak"] * (t["vleak"] - v) + t["num"] - v * t["den"]) / t["cm"]
    got = model.cell.derivative(v[None], model.cell.synapses(), model.cell.sensory_currents(x[None]))
    torch.testing.assert_close(got[0], expected)
    assert (model.cell.synapses().w > 0).all()  # positive though raw w went below 0


@pytest.mark.parametrize("solver", ["euler", "rk4", "dopri5"])
def test_ltc_solvers_agree_on_short_intervals(solver: str) -> None:
    gen = torch.Generator().manual_seed(5)
    x, dt = torch.randn(2, 6, 2, generator=gen), torch.full((2, 6), 0.05)
    mask = torch.ones(2, 6, dtype=torch.bool)
    # the fused step lengthens each interval by 1e-3: hand it 1e-3 less to integrate the same time
    fused = ltc(per_step=True)(x=x, dt=dt - 1e-3, mask=mask)
    other = ltc(per_step=True, solver=solver)(x=x, dt=dt, mask=mask)
    assert other.shape == (2, 6, 1)
    # same ODE: first-order methods differ by O(delta) (~5e-4 here); ignoring the input or
    # doubling dt would move the output by > 1e-2
    torch.testing.assert_close(other, fused, rtol=0, atol=1e-3)
    assert (fused[:, 0] - fused[:, -1]).abs().max() > 1e-2  # the state did move
