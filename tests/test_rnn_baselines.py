"""The recurrent baselines of the CfC paper, checked against their equations by hand.

Each expected value is computed here from the module's own weights with the paper's equation
(written out with plain tensor ops), on two or three steps of a tiny batch.
"""

from __future__ import annotations

import pytest
import torch
import torchdiffeq

from pipeline.models import get_model_class
from pipeline.models.neural_de.ct_rnn import CTRNN
from pipeline.models.discrete.gru_d import GRUD
from pipeline.models.discrete.lstm_dt import AugmentedLSTM
from pipeline.models.neural_de.ode_lstm import ODELSTM

C, H, O = 2, 3, 2


def raw_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Two rows of 3 steps; the second row's last step is padding."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, C, generator=gen)
    dt = 0.3 + torch.rand(2, 3, generator=gen)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    x[1, 2], dt[1, 2] = 0.0, 0.0
    return {"x": x, "dt": dt, "mask": mask}


def lstm_step(x, h, c, w_ih, w_hh, bias):
    """Hochreiter & Schmidhuber's LSTM in PyTorch's gate order i, f, g, o."""
    i, f, g, o = (x @ w_ih.T + h @ w_hh.T + bias).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


# --- CT-RNN -------------------------------------------------------------------------------


def test_ct_rnn_vector_field_is_the_reference_equation() -> None:
    torch.manual_seed(0)
    model = CTRNN(input_channels=C, output_size=O, hidden_size=H, leak=0.7)
    with torch.no_grad():
        model.scale.copy_(torch.tensor([0.5, 1.0, 2.0]))
    x, h = torch.randn(4, C), torch.randn(4, H)
    w_in, b, w_rec = model.input_map.weight, model.input_map.bias, model.recurrent.weight
    expected = model.scale * torch.tanh(x @ w_in.T + b + h @ w_rec.T) - 0.7 * h
    torch.testing.assert_close(model.vector_field(model.input_map(x), h), expected)


def test_ct_rnn_euler_steps_hold_each_input_over_its_interval() -> None:
    """One Euler step per interval: h_k = h_{k-1} + dt_k * f(h_{k-1}, x_k); padding holds h."""
    torch.manual_seed(0)
    model = CTRNN(input_channels=C, output_size=O, per_step=True, hidden_size=H, method="euler", solver_steps=1)
    batch = raw_batch()
    f = lambda x, h: model.scale * torch.tanh(model.input_map(x) + model.recurrent(h)) - h
    h = torch.zeros(2, H)
    expected = []
    for k in range(3):
        h_new = h + batch["dt"][:, k, None] * f(batch["x"][:, k], h)
        h = torch.where(batch["mask"][:, k, None], h_new, h)
        expected.append(model.readout(h))
    torch.testing.assert_close(model(**batch), torch.stack(expected, dim=1))


def test_ct_rnn_one_solve_equals_a_solve_per_interval() -> None:
    """rk4 with 3 steps: the whole-sequence solve takes the steps of L separate solves."""
    torch.manual_seed(0)
    model = CTRNN(input_channels=C, output_size=O, per_step=True, hidden_size=H)
    batch = raw_batch(seed=1)
    h, expected = torch.zeros(2, H), []
    for k in range(3):
        drive, dt = model.input_map(batch["x"][:, k]), batch["dt"][:, k, None]
        field = lambda s, y: dt * model.vector_field(drive, y)
        unit = torch.tensor([0.0, 1.0])
        h = torchdiffeq.odeint(field, h, unit, method="rk4", options={"step_size": 1 / 3})[-1]
        expected.append(model.readout(h))
    torch.testing.assert_close(model(**batch), torch.stack(expected, dim=1))


def test_ct_rnn_dopri5_agrees_with_fine_rk4() -> None:
    torch.manual_seed(0)
    rk4 = CTRNN(input_channels=C, output_size=O, hidden_size=H, solver_steps=8)
    dopri5 = CTRNN(input_channels=C, output_size=O, hidden_size=H, method="dopri5", rtol=1e-5, atol=1e-6)
    dopri5.load_state_dict(rk4.state_dict())
    batch = raw_batch(seed=2)
    torch.testing.assert_close(dopri5(**batch), rk4(**batch), rtol=1e-3, atol=1e-4)


# --- ODE-LSTM -----------------------------------------------------------------------------


def test_ode_lstm_step_is_lstm_then_ode_on_the_output_state() -> None:
    """Algorithm 1 with one Euler step: (c, h') = LSTM(x, (c, h)); h = h' + dt * f(h')."""
    torch.manual_seed(0)
    model = ODELSTM(input_channels=C, output_size=O, per_step=True, hidden_size=H, method="euler", solver_steps=1)
    cell, (lin1, _, lin2) = model.cell, model.field
    batch = raw_batch()
    h, c, expected = torch.zeros(2, H), torch.zeros(2, H), []
    for k in range(3):
        h_lstm, c_new = lstm_step(batch["x"][:, k], h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih + cell.bias_hh)
        f = torch.tanh(h_lstm @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias
        h_new = h_lstm + batch["dt"][:, k, None] * f
        keep = batch["mask"][:, k, None]
        h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        expected.append(h @ model.readout.weight.T + model.readout.bias)
    torch.testing.assert_close(model(**batch), torch.stack(expected, dim=1))


def test_keras_ode_lstm_drives_its_own_ct_rnn_state_with_the_lstm_output() -> None:
    """mlech26l/ode-lstms node_cell.py ODELSTM with 4 Euler steps: (c, u) = LSTM(x, (c, z)) with the
    forget gate + 3 and zero biases; z += dt/4 * (scale * tanh(W_in u + W_rec z + b) - z), 4 times."""
    torch.manual_seed(0)
    model = ODELSTM(input_channels=C, output_size=O, per_step=True, hidden_size=H, method="euler", solver_steps=4,
                    forget_bias=3.0, code="keras")
    cell, ode = model.cell, model.field
    assert torch.count_nonzero(cell.bias_hh) == 0 and torch.count_nonzero(model.readout.bias) == 0
    assert torch.count_nonzero(cell.bias_ih) == H and torch.all(cell.bias_ih[H:2 * H] == 3.0)
    with torch.no_grad():  # away from the start (scale 1, zero bias) to see every term
        ode.scale.copy_(torch.tensor([0.5, 1.5, 2.0]))
        ode.input_map.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    batch = raw_batch()
    z, c, expected = torch.zeros(2, H), torch.zeros(2, H), []
    for k in range(3):
        u, c_new = lstm_step(batch["x"][:, k], z, c, cell.weight_ih, cell.weight_hh, cell.bias_ih + cell.bias_hh)
        z_new = z
        for _ in range(4):
            drive = u @ ode.input_map.weight.T + ode.input_map.bias + z_new @ ode.recurrent_map.weight.T
            z_new = z_new + batch["dt"][:, k, None] / 4 * (ode.scale * torch.tanh(drive) - z_new)
        keep = batch["mask"][:, k, None]
        z, c = torch.where(keep, z_new, z), torch.where(keep, c_new, c)
        expected.append(z @ model.readout.weight.T + model.readout.bias)
    torch.testing.assert_close(model(**batch), torch.stack(expected, dim=1))
    with pytest.raises(ValueError, match=r"unknown code 'tf'; valid: \['torch', 'keras'\]"):
        ODELSTM(input_channels=C, output_size=O, code="tf")


def test_ode_lstm_dopri5_runs_and_forget_bias_is_set() -> None:
    model = ODELSTM(input_channels=C, output_size=O, hidden_size=H, method="dopri5", forget_bias=3.0)
    forget = slice(H, 2 * H)
    total = model.cell.bias_ih[forget] + model.cell.bias_hh[forget]
    assert torch.all(total == 3.0)
    out = model(**raw_batch())
    assert out.shape == (2, O) and torch.isfinite(out).all()


# --- GRU-D --------------------------------------------------------------------------------


def test_gru_d_inputs_last_value_and_time_since_last_observation() -> None:
    nan = float("nan")
    x = torch.tensor([[[1.0, nan], [nan, 2.0], [nan, nan], [4.0, nan]]])  # (1, 4, 2)
    t = torch.tensor([[0.5, 1.0, 3.0, 3.5]])
    mask = torch.tensor([[True, True, True, True]])
    inputs = GRUD.prepare_inputs(x, t, mask)
    assert inputs["observed"][0].tolist() == [[1, 0], [0, 1], [0, 0], [1, 0]]
    assert inputs["x_last"][0].tolist() == [[1, 0], [1, 2], [1, 2], [4, 2]]  # 0 = mean before any
    # Che et al.: delta_1 = 0; s_k - s_{k-1} after an observation, accumulated while missing.
    assert inputs["delta"][0].tolist() == [[0, 0], [0.5, 0.5], [2.5, 2.0], [3.0, 2.5]]


def test_gru_d_padding_is_neither_observed_nor_a_value() -> None:
    x = torch.tensor([[[1.0], [float("nan")]]])
    inputs = GRUD.prepare_inputs(x, torch.tensor([[1.0, 1.0]]), torch.tensor([[True, False]]))
    assert inputs["observed"][0, :, 0].tolist() == [1, 0] and inputs["x"][0, 1, 0] == 0


def test_gru_d_input_decay_moves_the_last_value_towards_the_mean() -> None:
    model = GRUD(input_channels=2, output_size=O, hidden_size=H)
    with torch.no_grad():
        model.input_decay_weight.copy_(torch.tensor([0.5, -1.0]))
        model.input_decay_bias.copy_(torch.tensor([0.1, 0.2]))
        model.input_mean.copy_(torch.tensor([10.0, 10.0]))
    x, observed = torch.tensor([[[7.0, 7.0]]]), torch.tensor([[[0.0, 1.0]]])
    x_last, delta = torch.tensor([[[2.0, 3.0]]]), torch.tensor([[[2.0, 2.0]]])
    gamma = torch.exp(-torch.tensor(max(0.0, 0.5 * 2.0 + 0.1)))
    expected = [gamma * 2.0 + (1 - gamma) * 10.0, 7.0]  # channel 2 is observed: its value
    torch.testing.assert_close(model.impute(x, observed, x_last, delta)[0, 0], torch.stack([expected[0], torch.tensor(7.0)]))


def test_gru_d_recurrence_is_the_paper_equations() -> None:
    torch.manual_seed(0)
    model = GRUD(input_channels=C, output_size=O, per_step=True, hidden_size=H)
    nan = float("nan")
    x = torch.tensor([[[0.3, nan], [nan, -1.0], [0.8, 0.2]], [[nan, 0.5], [1.2, nan], [nan, nan]]])
    t = torch.tensor([[0.2, 1.0, 2.5], [0.4, 0.9, 0.9]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    inputs = GRUD.prepare_inputs(x, t, mask)
    m, delta = inputs["observed"], inputs["delta"]
    gamma_x = torch.exp(-torch.clamp(model.input_decay_weight * delta + model.input_decay_bias, min=0))
    x_hat = m * inputs["x"] + (1 - m) * gamma_x * inputs["x_last"]  # the mean is 0
    gamma_h = torch.exp(-torch.clamp(delta @ model.hidden_decay.weight.T + model.hidden_decay.bias, min=0))
    w, v = model.input_map.weight[:, :C], model.input_map.weight[:, C:]
    (w_z, w_r, w_n), (v_z, v_r, v_n) = w.chunk(3), v.chunk(3)
    b_z, b_r, b_n = model.input_map.bias.chunk(3)
    u_z, u_r = model.recurrent_zr.weight.chunk(2)
    u_n = model.recurrent_n.weight
    h, expected = torch.zeros(2, H), []
    for k in range(3):
        xk, mk, hd = x_hat[:, k], m[:, k], gamma_h[:, k] * h
        z = torch.sigmoid(xk @ w_z.T + hd @ u_z.T + mk @ v_z.T + b_z)
        r = torch.sigmoid(xk @ w_r.T + hd @ u_r.T + mk @ v_r.T + b_r)
        candidate = torch.tanh(xk @ w_n.T + (r * hd) @ u_n.T + mk @ v_n.T + b_n)
        h = torch.where(mask[:, k, None], (1 - z) * hd + z * candidate, h)
        expected.append(model.readout(h))
    torch.testing.assert_close(model(**inputs), torch.stack(expected, dim=1))


def test_gru_d_rejects_another_representation() -> None:
    with pytest.raises(ValueError, match="raw_per_channel"):
        GRUD(input_channels=C, output_size=O)(**raw_batch())


# --- augmented LSTM -----------------------------------------------------------------------


def test_lstm_dt_is_an_lstm_on_values_and_elapsed_time() -> None:
    torch.manual_seed(0)
    model = AugmentedLSTM(input_channels=C, output_size=O, per_step=True, hidden_size=H)
    lstm = model.lstm
    assert torch.all(lstm.bias_ih_l0[H : 2 * H] + lstm.bias_hh_l0[H : 2 * H] == 1.0)  # forget bias
    batch = raw_batch()
    h, c, expected = torch.zeros(2, H), torch.zeros(2, H), []
    for k in range(3):
        inp = torch.cat([batch["x"][:, k], batch["dt"][:, k, None]], dim=-1)
        h_new, c_new = lstm_step(inp, h, c, lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
        keep = batch["mask"][:, k, None]
        h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        expected.append(model.readout(h))
    torch.testing.assert_close(model(**batch), torch.stack(expected, dim=1))


def test_keras_lstm_dt_starts_from_the_authors_initial_weights() -> None:
    """node_cell.py LSTMCell: Glorot-uniform input kernel (limit sqrt(6 / (C + 1 + 4H))), orthogonal
    recurrent kernel, zero biases but the forget gate's +1; Keras' Dense read-out: Glorot, zero bias."""
    hidden = 16
    torch.manual_seed(0)
    model = AugmentedLSTM(input_channels=C, output_size=O, hidden_size=hidden, code="keras")
    lstm = model.lstm
    limit = (6 / (C + 1 + 4 * hidden)) ** 0.5
    assert lstm.weight_ih_l0.abs().max() <= limit and lstm.weight_ih_l0.abs().max() > 0.8 * limit
    # (4H, H) with orthonormal columns: Keras' (H, 4H) kernel with orthonormal rows, transposed
    torch.testing.assert_close(lstm.weight_hh_l0.T @ lstm.weight_hh_l0, torch.eye(hidden), atol=1e-5, rtol=0)
    bias = lstm.bias_ih_l0 + lstm.bias_hh_l0
    assert torch.all(bias[hidden:2 * hidden] == 1.0) and torch.count_nonzero(bias) == hidden
    assert torch.count_nonzero(model.readout.bias) == 0
    assert model.readout.weight.abs().max() <= (6 / (hidden + O)) ** 0.5
    torch.manual_seed(0)  # the default's weights are PyTorch's, drawn as before
    default = AugmentedLSTM(input_channels=C, output_size=O, hidden_size=hidden)
    assert torch.count_nonzero(default.lstm.bias_hh_l0) > hidden and not torch.equal(default.lstm.weight_hh_l0, lstm.weight_hh_l0)
    with pytest.raises(ValueError, match=r"unknown code 'tf'; valid: \['torch', 'keras'\]"):
        AugmentedLSTM(input_channels=C, output_size=O, code="tf")


def test_lstm_dt_rejects_a_mask_with_a_gap() -> None:
    batch = raw_batch()
    batch["mask"] = torch.tensor([[True, False, True], [True, True, False]])
    with pytest.raises(ValueError, match="prefix"):
        AugmentedLSTM(input_channels=C, output_size=O)(**batch)


# --- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ct_rnn", "ode_lstm"])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "midpoint"}, r"method 'midpoint'.*dopri5"),
        ({"solver_steps": 0}, r"solver_steps must be >= 1, got 0"),
        ({"max_steps": 0}, r"max_steps must be >= 1, got 0"),
    ],
)
def test_bad_solver_arguments_are_rejected(name: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_model_class(name)(input_channels=C, output_size=O, **kwargs)


def test_ct_rnn_rejects_a_negative_leak() -> None:
    with pytest.raises(ValueError, match=r"leak must be >= 0.*-1"):
        CTRNN(input_channels=C, output_size=O, leak=-1.0)
