"""Fast weight programmers (node_fwp.py, cde_fwp.py, rde_node_fwp.py): learning rules, slow nets and
readouts against hand computations of the paper's equations, the per-row switch-off, solvers,
arguments, the direct NODE on log-signature windows (Table 2) and the static initial state (Sec. 4)."""

from __future__ import annotations

import math

from pathlib import Path

import pytest
import signatory
import torch
import torch.nn.functional as F

from pipeline.models import MODELS
from pipeline.models.fast_weights.programmer import STATIC_HIDDEN, _GatedField, _unit_grid
from pipeline.models.base import model_arguments
from pipeline.models.fast_weights.cde import DeltaCDEFWP, HebbCDEFWP, OjaCDEFWP
from pipeline.models.fast_weights.rules import delta_update, hebb_update, oja_update
from pipeline.models.blocks.logsig import LogSigInputs
from pipeline.models.fast_weights.node import DeltaNODEFWP, HebbNODEFWP, OjaNODEFWP
from pipeline.models.fast_weights.rde import RoughDeltaFWP
from pipeline.models.fast_weights.rde_node import RoughDeltaNODEFWP, RoughHebbNODEFWP, RoughOjaNODEFWP
from pipeline.spaces import load_space, split_config

from test_models import make_split

FAMILIES = {
    "node_fwp_hebb": HebbNODEFWP, "node_fwp_oja": OjaNODEFWP, "node_fwp_delta": DeltaNODEFWP,
    "cde_fwp_hebb": HebbCDEFWP, "cde_fwp_oja": OjaCDEFWP, "cde_fwp_delta": DeltaCDEFWP,
}
ROUGH_NODE_FAMILIES = {
    "rde_node_fwp_hebb": RoughHebbNODEFWP, "rde_node_fwp_oja": RoughOjaNODEFWP, "rde_node_fwp_delta": RoughDeltaNODEFWP,
}
SMALL = {"hidden_size": 4, "num_heads": 2, "ff_dim": 8}
SPACES = Path(__file__).resolve().parents[1] / "search_spaces"

# One head, d = 2: softmax([0, ln 3]) = [1/4, 3/4], v = [1, -2], sigma(beta) = 1/2, W = [[1, 2], [3, 4]].
KEY_LOGITS = torch.tensor([[[0.0, math.log(3.0)]]], dtype=torch.float64)  # (B=1, H=1, d=2)
VALUES = torch.tensor([[[1.0, -2.0]]], dtype=torch.float64)
RATE = torch.tensor([[[0.5]]], dtype=torch.float64)
W = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]], dtype=torch.float64)


def as_matrix(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor([[rows]], dtype=torch.float64)


def test_hebb_writes_rate_times_value_key_outer_product() -> None:
    # 1/2 [1, -2]^T [1/4, 3/4]; W is not read
    expected = as_matrix([[0.125, 0.375], [-0.25, -0.75]])
    torch.testing.assert_close(hebb_update(KEY_LOGITS, VALUES, RATE, W), expected)
    torch.testing.assert_close(hebb_update(KEY_LOGITS, VALUES, RATE, None), expected)


def test_delta_writes_the_retrieval_error() -> None:
    # W k = [1.75, 3.75], v - W k = [-0.75, -5.75]; 1/2 (v - W k) k^T
    expected = as_matrix([[-0.09375, -0.28125], [-0.71875, -2.15625]])
    torch.testing.assert_close(delta_update(KEY_LOGITS, VALUES, RATE, W), expected)
    # W = 0 (the initial write) is Hebb's term
    torch.testing.assert_close(delta_update(KEY_LOGITS, VALUES, RATE, None), hebb_update(KEY_LOGITS, VALUES, RATE))
    # post_tanh: tanh(v - W k) instead of v - W k
    squashed = 0.5 * torch.tensor([math.tanh(-0.75), math.tanh(-5.75)])[:, None] * torch.tensor([0.25, 0.75])
    torch.testing.assert_close(delta_update(KEY_LOGITS, VALUES, RATE, W, post_tanh=True)[0, 0], squashed.double())


def test_oja_forgets_along_the_value_before_the_softmax() -> None:
    # W^T v = [-5, -6]: key logits [5, ln 3 + 6] -> softmax [1, 3e] / (1 + 3e); v (1/2 softmax)^T
    key = torch.tensor([1.0, 3.0 * math.e]) / (1.0 + 3.0 * math.e)
    expected = torch.tensor([1.0, -2.0])[:, None] * (0.5 * key)[None, :]
    torch.testing.assert_close(oja_update(KEY_LOGITS, VALUES, RATE, W)[0, 0], expected.double())
    torch.testing.assert_close(oja_update(KEY_LOGITS, VALUES, RATE, None), hebb_update(KEY_LOGITS, VALUES, RATE))


def linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return x @ layer.weight.T + layer.bias


def norm(layer: torch.nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], layer.weight, layer.bias, layer.eps)


def by_hand(rule: str, keys: torch.Tensor, values: torch.Tensor, rate: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The paper's update per head, written out with einsum: (B, H, d) keys/values, (B, H) rate."""
    if rule == "hebb":
        return torch.einsum("bh,bhi,bhj->bhij", rate, values, keys.softmax(-1))
    if rule == "oja":
        forget = torch.einsum("bhji,bhj->bhi", w, values)  # W^T v
        return torch.einsum("bh,bhi,bhj->bhij", rate, values, (keys - forget).softmax(-1))
    k = keys.softmax(-1)
    return torch.einsum("bh,bhi,bhj->bhij", rate, values - torch.einsum("bhij,bhj->bhi", w, k), k)


def random_state(channels: int, heads: int, d: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(3)
    x, dx = torch.randn(2, 3, channels, generator=gen, dtype=torch.float64)
    return x, dx, torch.randn(3, heads, d, d, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("cls", [HebbCDEFWP, OjaCDEFWP, DeltaCDEFWP])
def test_cde_slow_net_matches_eqs_23_25(cls: type) -> None:
    """Delta: keys and rate from X', values tanh(W_v X); Hebb/Oja: keys from X, values W_v X'
    (tanh for Oja only, as the reference)."""
    torch.manual_seed(0)
    model = cls(input_channels=2, output_size=1, **SMALL).double()
    writer, (heads, d) = model.rule, (2, 2)
    x, dx, w = random_state(3, heads, d)
    key_in, value_in = (dx, x) if cls is DeltaCDEFWP else (x, dx)
    key_rate = linear(writer.key_rate, norm(writer.input_norm, linear(writer.input_proj, key_in))).view(3, heads, d + 1)
    values = linear(writer.value_proj, value_in).view(3, heads, d)
    values = values if cls is HebbCDEFWP else values.tanh()
    expected = by_hand(cls.learning_rule, key_rate[..., :d], values, key_rate[..., d].sigmoid(), w)
    torch.testing.assert_close(writer(x, dx, w), expected)


@pytest.mark.parametrize("cls", [HebbNODEFWP, OjaNODEFWP, DeltaNODEFWP])
def test_node_slow_net_matches_eqs_18_21(cls: type) -> None:
    """[k, v, beta] = W_slow LayerNorm(W_in X) per head, values through tanh; X' is not read."""
    torch.manual_seed(0)
    model = cls(input_channels=2, output_size=1, **SMALL).double()
    writer, (heads, d) = model.rule, (2, 2)
    x, _, w = random_state(3, heads, d)
    kvb = linear(writer.kvb_net, norm(writer.input_norm, linear(writer.input_proj, x))).view(3, heads, 2 * d + 1)
    expected = by_hand(cls.learning_rule, kvb[..., :d], kvb[..., d:2 * d].tanh(), kvb[..., -1].sigmoid(), w)
    torch.testing.assert_close(writer(x, None, w), expected)


def test_delta_post_tanh_squashes_after_the_retrieval() -> None:
    torch.manual_seed(0)
    model = DeltaNODEFWP(input_channels=2, output_size=1, post_tanh=True, **SMALL).double()
    writer, (heads, d) = model.rule, (2, 2)
    x, _, w = random_state(3, heads, d)
    kvb = linear(writer.kvb_net, norm(writer.input_norm, linear(writer.input_proj, x))).view(3, heads, 2 * d + 1)
    k = kvb[..., :d].softmax(-1)
    error = (kvb[..., d:2 * d] - torch.einsum("bhij,bhj->bhi", w, k)).tanh()
    expected = torch.einsum("bh,bhi,bhj->bhij", kvb[..., -1].sigmoid(), error, k)
    torch.testing.assert_close(writer(x, None, w), expected)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_one_euler_step_and_readout_by_hand(name: str) -> None:
    """Two observations, Euler with step 1: W(1) = W(0) + F(X(0), X'(0), W(0)), W(0) = F(., ., 0);
    y = W(1) q (W(1)^T q for the CDE Hebb/Oja), q = softmax(W_q LN(W_in A(1))), then the output block."""
    cls = FAMILIES[name]
    torch.manual_seed(0)
    model = cls(input_channels=2, output_size=3, method="euler", **SMALL).double().eval()
    x, t, mask = make_split([2], length=2, seed=4)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in cls.prepare_inputs(x, t, mask).items()}
    path, grid = model._path(**inputs)
    xs, dxs = path.evaluate(grid), path.derivative(grid)  # (1, 2, K)
    w0 = model.rule(xs[:, 0], dxs[:, 0], None)
    w1 = w0 + model.rule(xs[:, 0], dxs[:, 0], w0)  # (1, H, d, d)
    features = model.rule.key_features(xs[:, 1], dxs[:, 1])
    query = linear(model.query_net, features).view(1, 2, 2).softmax(-1)
    w1 = w1.transpose(-1, -2) if name in ("cde_fwp_hebb", "cde_fwp_oja") else w1
    y = linear(model.out_proj, torch.einsum("bhij,bhj->bhi", w1, query).flatten(1))
    expected = model.readout(model.feed_forward(y))
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs), expected)


@pytest.mark.parametrize("adjoint", [False, True])
def test_switching_rows_off_after_their_end_keeps_w_of_t(adjoint: bool) -> None:
    """The per-sequence solve runs to the batch's end with each row's field off after its T: its end
    state is every row's W(T), the per-step solve's state at T (which does not switch rows off)."""
    torch.manual_seed(0)
    model = OjaCDEFWP(input_channels=2, output_size=3, adjoint=adjoint, step_fraction=0.5, **SMALL).double()
    x, t, mask = make_split([6, 3, 1], length=6)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in model.prepare_inputs(x, t, mask).items()}
    path, grid = model._path(**inputs)
    last = inputs["last"]
    w0 = model.rule(path.evaluate(grid[0]), path.derivative(grid[0]), None).flatten(1)
    with torch.no_grad():
        states = model._solve_all(_GatedField(model.rule, path, None), w0, grid)  # (B, n, S)
        end = model._solve_end(_GatedField(model.rule, path, grid[last]), w0, grid)
    assert not torch.allclose(states[1, 5], states[1, 2])  # without the switch W moves on after T
    torch.testing.assert_close(end, states[[0, 1, 2], last])
    torch.testing.assert_close(end[2], w0[2], rtol=0, atol=0)  # a single observation: W = W(0)


def test_per_sequence_output_is_the_per_step_output_at_the_last_observation() -> None:
    torch.manual_seed(0)
    per_seq = DeltaCDEFWP(input_channels=2, output_size=3, **SMALL).double().eval()
    per_step = DeltaCDEFWP(input_channels=2, output_size=3, per_step=True, **SMALL).double().eval()
    per_step.load_state_dict(per_seq.state_dict())
    x, t, mask = make_split([6, 3, 1], length=6)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in per_seq.prepare_inputs(x, t, mask).items()}
    with torch.no_grad():
        torch.testing.assert_close(per_step(**inputs)[[0, 1, 2], [5, 2, 0]], per_seq(**inputs))


@pytest.mark.parametrize("per_step", [False, True])
def test_adjoint_gradients_match_backpropagation(per_step: bool) -> None:
    grads = []
    for adjoint in (False, True):
        torch.manual_seed(0)
        model = DeltaCDEFWP(input_channels=2, output_size=3, per_step=per_step, adjoint=adjoint, **SMALL).double()
        x, t, mask = make_split([5, 3], length=5, seed=5)
        inputs = {k: v.double() if v.is_floating_point() else v for k, v in model.prepare_inputs(x, t, mask).items()}
        model(**inputs).square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    # rk4 discretise-then-optimise vs the adjoint ODE: equal up to the solver's error
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-3, atol=1e-3)
    assert grads[0].abs().max() > 1e-2


@pytest.mark.parametrize("solver", [
    {"method": "rk4"}, {"method": "euler", "step_fraction": 0.25}, {"method": "rk4", "step_fraction": 0.4},
    {"method": "dopri5", "rtol": 1e-3, "atol": 1e-4}, {"method": "dopri5", "adjoint": True},
])
def test_solver_choices_agree(solver: dict) -> None:
    torch.manual_seed(0)
    model = DeltaNODEFWP(input_channels=2, output_size=3, **SMALL, **solver).double()
    reference = DeltaNODEFWP(input_channels=2, output_size=3, **SMALL, step_fraction=0.2).double()
    reference.load_state_dict(model.state_dict())
    x, t, mask = make_split([4, 3], length=4, seed=6)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in model.prepare_inputs(x, t, mask).items()}
    out = model(**inputs)
    out.sum().backward()
    tolerance = 0.05 if solver["method"] == "euler" else 5e-3
    torch.testing.assert_close(out, reference(**inputs), rtol=tolerance, atol=tolerance)


def test_unit_grid_keeps_every_knot_in_both_directions() -> None:
    grid = _unit_grid(3)(None, None, torch.tensor([0.0, 2.0]))
    assert len(grid) == 7 and torch.equal(grid[::3], torch.tensor([0.0, 1.0, 2.0]))
    backward = _unit_grid(3)(None, None, torch.tensor([2.0, 0.0]))
    assert torch.equal(backward[::3], torch.tensor([2.0, 1.0, 0.0]))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hidden_size": 6, "num_heads": 4}, r"hidden_size=6 must be divisible by num_heads=4"),
    ({"step_fraction": 0.0}, r"step_fraction must be in \(0, 1\]"),
    ({"step_fraction": 2.0}, r"step_fraction must be in \(0, 1\]"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ({"ff_dim": 0}, r"ff_dim must be >= 1"),
    ({"method": "midpoint"}, r"unknown method 'midpoint'.*dopri5"),
    ({"interpolation": "linear"}, r"unknown interpolation 'linear'.*cubic"),
])
@pytest.mark.parametrize("cls", [HebbNODEFWP, OjaCDEFWP])
def test_bad_arguments_are_rejected(cls: type, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cls(input_channels=2, output_size=1, **kwargs)


def test_registry_names_and_rules() -> None:
    for name, cls in {**FAMILIES, **ROUGH_NODE_FAMILIES}.items():
        assert MODELS[name] is cls and name.endswith(cls.learning_rule)


@pytest.mark.parametrize("cls", [HebbCDEFWP, OjaCDEFWP, DeltaCDEFWP])
def test_cde_fwps_take_a_log_signature_path(cls: type) -> None:
    """The CDE FWPs touch the path only through CDEModel's hooks, so the log-signature mixin
    (another path, other channels, window grid) composes with each rule unchanged."""

    class Rough(LogSigInputs, cls):
        pass

    torch.manual_seed(0)
    kwargs = {**SMALL, "logsig_depth": 2, "logsig_step": 2}
    model = Rough(input_channels=2, output_size=3, **kwargs)
    assert model.rule.input_proj.in_features == model.path_channels == 6
    x, t, mask = make_split([6, 3], length=6, seed=7)
    out = model(**Rough.prepare_inputs(x, t, mask, **kwargs))
    assert out.shape == (2, 3) and torch.isfinite(out).all()


# --- Direct NODE on log-signature windows (rde_node_fwp.py; Sec. 4, Table 2, footnote 6) ---


def fully_observed(length: int, channels: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One row, every value observed, float64: x (1, L, C), irregular t (1, L), mask (1, L)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, length, channels, generator=gen, dtype=torch.float64)
    t = torch.cumsum(0.2 + torch.rand(1, length, generator=gen, dtype=torch.float64), dim=1)
    return x, t, torch.ones(1, length, dtype=torch.bool)


@pytest.mark.parametrize("name", sorted(ROUGH_NODE_FAMILIES))
def test_rough_node_euler_steps_and_readout_by_hand(name: str) -> None:
    """Eqs. 18-21 with log-signatures as input, Euler with one step per window: W(0) is the write
    (W = 0) of initial_network([t_0, x_0]); W(k + 1) = W(k) + F(logsig_k, W(k)) (Eq. 18), with
    [k, v, beta] from LayerNorm(W_in logsig_k) (Eq. 21); y = W(2) q, q from the last window's
    log-signature (Eqs. 19-20). logsig_k is computed here by signatory on the window's own points."""
    cls = ROUGH_NODE_FAMILIES[name]
    torch.manual_seed(0)
    kwargs = {**SMALL, "logsig_depth": 2, "logsig_step": 2}
    model = cls(input_channels=2, output_size=3, method="euler", **kwargs).double().eval()
    x, t, mask = fully_observed(length=5, channels=2, seed=8)  # windows: steps [0, 2] and [2, 4]
    path = torch.cat([t.unsqueeze(-1), x], dim=-1)  # (1, 5, 3) = [t, x]
    logsigs = [signatory.logsignature(path[:, 2 * k : 2 * k + 3], 2) for k in range(2)]  # (1, 6) each
    writer, heads, d = model.rule, 2, 2

    def projected(inputs: torch.Tensor) -> torch.Tensor:
        return norm(writer.input_norm, linear(writer.input_proj, inputs))

    def write(inputs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        kvb = linear(writer.kvb_net, projected(inputs)).view(1, heads, 2 * d + 1)
        return by_hand(cls.learning_rule, kvb[..., :d], kvb[..., d : 2 * d].tanh(), kvb[..., -1].sigmoid(), w)

    w = write(linear(model.initial_network, path[:, 0]), torch.zeros(1, heads, d, d, dtype=torch.float64))
    for logsig in logsigs:
        w = w + write(logsig, w)
    query = linear(model.query_net, projected(logsigs[-1])).view(1, heads, d).softmax(-1)
    expected = model.readout(model.feed_forward(linear(model.out_proj, torch.einsum("bhij,bhj->bhi", w, query).flatten(1))))
    with torch.no_grad():
        torch.testing.assert_close(model(**cls.prepare_inputs(x, t, mask, **kwargs)), expected)


@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("name", sorted(ROUGH_NODE_FAMILIES))
def test_rough_node_shapes_and_one_training_step(name: str, per_step: bool) -> None:
    cls = ROUGH_NODE_FAMILIES[name]
    torch.manual_seed(0)
    kwargs = {**SMALL, "logsig_depth": 1, "logsig_step": 2}
    model = cls(input_channels=2, output_size=3, per_step=per_step, **kwargs)
    assert model.rule.reads_derivative and model.rule.input_proj.in_features == model.path_channels == 3
    x, t, mask = make_split([6, 3, 1], length=6, seed=7)
    out = model(**cls.prepare_inputs(x, t, mask, **kwargs))
    assert out.shape == ((3, 6, 3) if per_step else (3, 3)) and torch.isfinite(out).all()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.initial_network.weight.grad.abs().sum() > 0  # W(0) reads [t_0, x_0]
    optimizer.step()
    assert all(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_eigenworms_reference_has_the_papers_87k_parameters() -> None:
    """Table 2's last row has "87 K" parameters (Sec. 4); EigenWorms: 6 channels, 5 classes. The
    CDE form of the same settings (rde_fwp_delta) is smaller."""
    def size(family: str) -> int:
        _, model_kwargs = split_config(load_space(SPACES / f"{family}.yaml").reference)
        return MODELS[family](input_channels=6, output_size=5, **model_kwargs).num_parameters()

    assert size("rde_node_fwp_delta") == 86_925  # 86,869 + initial_network Linear(7, 7)
    assert size("rde_fwp_delta") == 71_381


@pytest.mark.parametrize("cls", [RoughDeltaNODEFWP, RoughDeltaFWP])
def test_rough_fwps_take_no_static_initial_state(cls: type) -> None:
    assert not {"static_channels", "interpolation"} & set(model_arguments(cls))
    with pytest.raises(ValueError, match="static_channels"):
        cls(input_channels=2, output_size=1, static_channels=1)


# --- Static initial state (Sec. 4, Sepsis; the reference's InitialValueNetwork) ---


def with_statics(x: torch.Tensor, mask: torch.Tensor, statics: torch.Tensor) -> torch.Tensor:
    """x (N, L, C) -> (N, L, C + S): statics (N, S) as the last channels at the observed steps, NaN
    at padding (pipeline/data/contract.py)."""
    repeated = statics[:, None, :].expand(-1, x.shape[1], -1).clone()
    repeated[~mask] = float("nan")
    return torch.cat([x, repeated], dim=-1)


def static_state_by_hand(model: torch.nn.Module, statics: torch.Tensor) -> torch.Tensor:
    """W(0) = sigma(b) tanh(v) softmax(k)^T, [k, v, b] = W_2 ReLU(W_1 z + b_1) + b_2, per head (H=2, d=2)."""
    encoder = model.static_init
    kvb = linear(encoder.kvb_net, linear(encoder.hidden[0], statics).relu()).view(len(statics), 2, 5)
    return torch.einsum("bh,bhi,bhj->bhij", kvb[..., -1].sigmoid(), kvb[..., 2:4].tanh(), kvb[..., :2].softmax(-1))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_static_initial_state_is_the_encoders_outer_product(name: str) -> None:
    """One observation per row, so W(T) = W(0) from the statics; y = W(0) q read out, with q from X(0)
    less the static channels (W(0)^T q for the CDE Hebb/Oja)."""
    cls = FAMILIES[name]
    torch.manual_seed(0)
    model = cls(input_channels=4, output_size=3, static_channels=2, **SMALL).double().eval()
    assert model.static_init.hidden[0].out_features == STATIC_HIDDEN == 256
    assert model.rule.input_proj.in_features == model.control_channels == 3  # [t, x_1, x_2]
    x, t, mask = make_split([1, 1], length=1, seed=9)
    statics = torch.randn(2, 2, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    x, t = with_statics(x.double(), mask, statics), t.double()
    inputs = cls.prepare_inputs(x, t, mask)
    path, grid = model._path(**inputs)
    start, slope = path.evaluate(grid[0]), path.derivative(grid[0])  # (2, 5)
    torch.testing.assert_close(start[:, -2:], statics)
    w0 = static_state_by_hand(model, statics)
    w0 = w0.transpose(-1, -2) if name in ("cde_fwp_hebb", "cde_fwp_oja") else w0
    query = linear(model.query_net, model.rule.key_features(start[:, :3], slope[:, :3])).view(2, 2, 2).softmax(-1)
    expected = model.readout(model.feed_forward(linear(model.out_proj, torch.einsum("bhij,bhj->bhi", w0, query).flatten(1))))
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs), expected)


@pytest.mark.parametrize("name", ["node_fwp_oja", "cde_fwp_delta"])
def test_statics_reach_the_model_only_through_w0(name: str) -> None:
    """The static channels leave the path: their values after the first step change nothing, new
    statics change W(0) and so the output; a model without static_channels reads them along the path."""
    cls = FAMILIES[name]
    torch.manual_seed(0)
    model = cls(input_channels=4, output_size=3, static_channels=2, **SMALL).double().eval()
    plain = cls(input_channels=4, output_size=3, **SMALL).double().eval()
    x, t, mask = make_split([6, 3, 2], length=6, seed=11)
    statics = torch.randn(3, 2, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    x, t = with_statics(x.double(), mask, statics), t.double()
    later, first = x.clone(), x.clone()
    later[:, 1:, -2:] += 5.0  # NaN padding stays NaN
    first[:, :, -2:] += 1.0
    with torch.no_grad():
        out = model(**cls.prepare_inputs(x, t, mask))
        torch.testing.assert_close(model(**cls.prepare_inputs(later, t, mask)), out)
        assert not torch.allclose(model(**cls.prepare_inputs(first, t, mask)), out)
        assert not torch.allclose(plain(**cls.prepare_inputs(later, t, mask)), plain(**cls.prepare_inputs(x, t, mask)))


@pytest.mark.parametrize("value", [-1, 5, True])
def test_static_channels_must_name_last_channels_of_x(value: object) -> None:
    with pytest.raises(ValueError, match=r"static_channels must be in \[0, input_channels=4\]"):
        OjaCDEFWP(input_channels=4, output_size=1, static_channels=value)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_sepsis_spaces_ask_for_the_static_initial_state(name: str) -> None:
    """The paper's Sepsis behaviour is the default on sepsis (5 statics) and sepsis_intensity (7),
    as many as the dataset's static channels; other datasets keep W(0) = the rule's write at s = 0."""
    from pipeline.data.kinds.sepsis import channel_names

    space = load_space(SPACES / f"{name}.yaml")
    assert "static_channels" not in space.fixed
    for dataset, intensity in (("sepsis", False), ("sepsis_intensity", True)):
        assert space.for_dataset(dataset).fixed["static_channels"] == len(channel_names(intensity)[1])
