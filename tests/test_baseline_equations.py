"""ODE-RNN and Neural CDE against their equations, stepped by hand with explicit Euler."""

from __future__ import annotations

import torch

from pipeline.models.neural_de.ncde import NeuralCDE
from pipeline.models.neural_de.ode_rnn import ODERNN

from test_models import make_split


def test_ode_rnn_is_euler_on_the_field_then_a_gru_update() -> None:
    """h <- GRUCell(x_k, h + sum of `steps` Euler steps of dt_k / steps * f(h)), y = l(h_T)."""
    torch.manual_seed(0)
    steps = 2
    model = ODERNN(input_channels=3, output_size=2, hidden_size=4, vf_units=5, method="euler", solver_steps=steps)
    x = torch.randn(1, 3, 3)
    dt = torch.tensor([[0.0, 0.7, 1.9]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    h = torch.zeros(1, 4)
    with torch.no_grad():
        for k in range(3):
            for _ in range(steps):
                h = h + dt[:, k, None] / steps * model.field(h)
            h = model.cell(x[:, k], h)
        torch.testing.assert_close(model(x=x, dt=dt, mask=mask), model.readout(h))


def test_ncde_is_euler_on_f_of_z_times_the_path_derivative() -> None:
    """z(0) = zeta(X(0)), z_{k+1} = z_k + tanh(MLP(z_k)) X'(k) with unit steps, y = l(z(T))."""
    torch.manual_seed(0)
    model = NeuralCDE(
        input_channels=2, output_size=3, hidden_size=4, vf_units=6, vf_layers=2,
        interpolation="hermite", method="euler", step_fraction=1.0,
    ).double()
    x, t, mask = make_split([5, 3], length=5, seed=3)
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in model.prepare_inputs(x, t, mask).items()}
    with torch.no_grad():
        path, grid = model._path(inputs["coeffs"], inputs["last"], inputs["mask"])
        z = model.initial(path.evaluate(grid[0]))  # (B, H)
        states = [z]
        for s in grid[:-1]:
            field = model.field.net(z).view(2, 4, 3).tanh()  # (B, H, C + 1)
            z = z + (field @ path.derivative(s).unsqueeze(-1)).squeeze(-1)
            states.append(z)
        expected = model.readout(torch.stack(states, dim=1)[torch.arange(2), inputs["last"]])
        torch.testing.assert_close(model(**inputs), expected)
