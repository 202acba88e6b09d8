"""CDR-NDE and CDR-NDE-heat against the paper's equations (Anumasa et al., Eqs. 9-15), stepped by
hand with explicit Euler on tiny sizes; stencils, solver choices, padding, per-step outputs and
argument checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeline.models.base import elapsed_times
from pipeline.models.cdr_nde.cdr_nde import (
    CDRNDE,
    CDRNDEHeat,
    _DepthField,
    _TimeField,
    gap_weights,
    second_difference,
    uniform_weights,
)


def raw_batch(lengths: list[int], length: int, channels: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), length, channels, generator=gen)
    t = torch.cumsum(0.2 + torch.rand(len(lengths), length, generator=gen), dim=1)
    mask = torch.arange(length) < torch.tensor(lengths)[:, None]
    t = torch.where(mask, t, t.gather(1, torch.tensor(lengths)[:, None] - 1))
    x = torch.where(mask[..., None], x, torch.full_like(x, float("nan")))
    return CDRNDE.prepare_inputs(x, t, mask)


def double(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


def pad(value: torch.Tensor, extra: int) -> torch.Tensor:
    """Append `extra` padding steps along dim 1: zeros for x and dt, False for the mask."""
    tail = value.new_zeros(value.shape[0], extra, *value.shape[2:])
    return torch.cat([value, tail], dim=1)


def by_hand_gru(cell: nn.GRUCell, u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Eq. 2 / Eq. 11 written out from the cell's weights (torch's gate order r, z, g, reset gate
    applied after U_g): r = s(W_r u + b_r + U_r h + c_r), z = s(W_z u + b_z + U_z h + c_z),
    g = tanh(W_g u + b_g + r * (U_g h + c_g)); output z * h + (1 - z) * g."""
    w_r, w_z, w_g = cell.weight_ih.chunk(3)
    u_r, u_z, u_g = cell.weight_hh.chunk(3)
    b_r, b_z, b_g = cell.bias_ih.chunk(3)
    c_r, c_z, c_g = cell.bias_hh.chunk(3)
    r = torch.sigmoid(u @ w_r.T + b_r + h @ u_r.T + c_r)
    z = torch.sigmoid(u @ w_z.T + b_z + h @ u_z.T + c_z)
    g = torch.tanh(u @ w_g.T + b_g + r * (h @ u_g.T + c_g))
    return z * h + (1 - z) * g


def by_hand_uniform_laplacian(h: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Eq. 14's h(t-1) - 2 h(t) + h(t+1) (Δt = 1) per row, mirror nodes h_{-1} = h_1 and h_n = h_{n-2}
    at the first and last observed step (zero flux), 0 on padding and on a lone step."""
    lap = torch.zeros_like(h)
    for b, n in enumerate(lengths):
        for i in range(n if n > 1 else 0):
            left = h[b, i - 1] if i > 0 else h[b, 1]
            right = h[b, i + 1] if i < n - 1 else h[b, n - 2]
            lap[b, i] = left - 2 * h[b, i] + right
    return lap


def by_hand_depth0(model: CDRNDE, x: torch.Tensor, dt: torch.Tensor, steps: int) -> torch.Tensor:
    """h(t_i, 0) (B, L, H): `steps` Euler steps of dt_i / steps on each interval of
    Eq. 9 at t' = 0, dh/dt = GRU(x_i, h) - h + E x_i (CDR-NDE), or Eq. 15 without E x_i (heat)."""
    h, out = x.new_zeros(x.shape[0], model.hidden_size), []
    for i in range(x.shape[1]):
        for _ in range(steps):
            rate = by_hand_gru(model.time_cell, x[:, i], h) - h
            if model.skip is not None:
                rate = rate + x[:, i] @ model.skip.weight.T
            h = h + dt[:, i, None] / steps * rate
        out.append(h)
    return torch.stack(out, dim=1)


def by_hand_depth(model: CDRNDE, h: torch.Tensor, lengths: list[int], steps: int, heat: bool) -> torch.Tensor:
    """h(t_i, T') (B, L, H): `steps` Euler steps of T' / steps on Eq. 11 (CDR-NDE) or Eq. 14 (heat),
    h(t_{i-1}, t') = 0 before the first step; padded steps do not move."""
    mask = (torch.arange(h.shape[1]) < torch.tensor(lengths)[:, None]).unsqueeze(-1)
    for _ in range(steps):
        rate = torch.stack(
            [by_hand_gru(model.depth_cell, h[:, i], h[:, i - 1] if i > 0 else torch.zeros_like(h[:, 0]))
             for i in range(h.shape[1])],
            dim=1,
        )
        if heat:
            rate = rate + model.diffusivity * by_hand_uniform_laplacian(h, lengths)
        h = h + model.depth / steps * torch.where(mask, rate, torch.zeros_like(rate))
    return h


def repeat_last(h: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    h = h.clone()
    for b, n in enumerate(lengths):
        h[b, n:] = h[b, n - 1]
    return h


def test_torch_gru_cell_is_the_papers_gru_with_the_hidden_argument_carried() -> None:
    torch.manual_seed(0)
    cell = nn.GRUCell(3, 2)
    u, h = torch.randn(4, 3), torch.randn(4, 2)
    torch.testing.assert_close(cell(u, h), by_hand_gru(cell, u, h))


@pytest.mark.parametrize("lengths", [[3, 2], [1, 3]])
def test_cdr_nde_forward_is_euler_on_eq9_then_eq11(lengths: list[int]) -> None:
    """Euler, 2 steps (Table 1): depth 0 by Eq. 9 with the input as the state below, then
    dh/dt' = GRUCell(h(t, t'), h(t-1, t')) with no -h term (Eqs. 10-11); y = o_h(h(t, T'))."""
    torch.manual_seed(1)
    model = CDRNDE(input_channels=2, output_size=2, hidden_size=3, per_step=True, depth=0.8).double()
    inputs = double(raw_batch(lengths, length=3, seed=1))
    with torch.no_grad():
        h = by_hand_depth0(model, inputs["x"], inputs["dt"], steps=2)
        h = repeat_last(by_hand_depth(model, h, lengths, steps=2, heat=False), lengths)
        torch.testing.assert_close(model(**inputs), model.readout(h))


@pytest.mark.parametrize("lengths", [[4, 2], [3, 1]])
def test_heat_forward_is_euler_on_eq15_then_eq14(lengths: list[int]) -> None:
    """Depth 0 by the GRU-ODE of Eq. 15; depth by Eq. 14: the uniform second difference
    (coefficient `diffusivity`, 1 in the paper) plus f = GRUCell(h(t, t'), h(t-1, t'))."""
    torch.manual_seed(2)
    model = CDRNDEHeat(input_channels=2, output_size=2, hidden_size=3, per_step=True,
                       method="euler", diffusivity=0.7).double()
    assert model.skip is None  # Eq. 15 has no vertical skip
    inputs = double(raw_batch(lengths, length=4, seed=2))
    with torch.no_grad():
        h = by_hand_depth0(model, inputs["x"], inputs["dt"], steps=2)
        h = repeat_last(by_hand_depth(model, h, lengths, steps=2, heat=True), lengths)
        torch.testing.assert_close(model(**inputs), model.readout(h))


def test_depth_field_feeds_the_current_state_as_input_and_the_previous_as_hidden() -> None:
    torch.manual_seed(3)
    cell = nn.GRUCell(2, 2)
    mask = torch.tensor([[True, True, True, False]])
    h = torch.randn(1, 4, 2)
    previous = torch.cat([torch.zeros(1, 1, 2), h[:, :-1]], dim=1)  # h(t_{-1}, t') = 0
    rate = _DepthField(cell, mask)(torch.tensor(0.0), h)
    expected = by_hand_gru(cell, h, previous)
    torch.testing.assert_close(rate[:, :3], expected[:, :3])
    torch.testing.assert_close(rate[:, 3], torch.zeros(1, 2))  # padding does not move
    # The roles matter and there is no -h term: the other readings give other rates.
    assert not torch.allclose(rate[:, :3], by_hand_gru(cell, previous, h)[:, :3], atol=1e-3)
    assert not torch.allclose(rate[:, :3], (expected - h)[:, :3], atol=1e-3)


def test_heat_depth_field_is_diffusion_plus_the_gru_source() -> None:
    torch.manual_seed(4)
    cell = nn.GRUCell(2, 2)
    dt = torch.tensor([[0.3, 0.4, 0.8, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    h = torch.randn(1, 4, 2)
    previous = torch.cat([torch.zeros(1, 1, 2), h[:, :-1]], dim=1)
    for weights in (uniform_weights(mask, h.dtype), gap_weights(dt, mask, 0.1)):
        rate = _DepthField(cell, mask, 0.7, weights)(torch.tensor(0.0), h)
        expected = 0.7 * second_difference(h, *weights) + by_hand_gru(cell, h, previous)
        expected[:, 3] = 0.0
        torch.testing.assert_close(rate, expected)


def test_time_field_eq9_is_eq15_plus_the_embedded_input() -> None:
    torch.manual_seed(5)
    model = CDRNDE(input_channels=2, output_size=1, hidden_size=3)
    x, dt, h = torch.randn(2, 3, 2), torch.tensor([[0.5, 1.5, 0.2], [2.0, 0.0, 0.0]]), torch.randn(2, 3)
    below = model.skip(x)
    s = torch.tensor(1.0)  # interval (1, 2]: step 1
    with_skip = _TimeField(model.time_cell, x, dt, below)(s, h)
    without = _TimeField(model.time_cell, x, dt, None)(s, h)
    gru_ode = dt[:, 1, None] * (by_hand_gru(model.time_cell, x[:, 1], h) - h)  # Eq. 15: (1 - z)(g - h)
    torch.testing.assert_close(without, gru_ode)
    torch.testing.assert_close(with_skip, gru_ode + dt[:, 1, None] * below[:, 1])
    torch.testing.assert_close(with_skip[1], torch.zeros(3))  # padding: dt = 0, the state holds


def test_uniform_stencil_is_the_papers_with_zero_flux_ends() -> None:
    t = torch.tensor([[0.5, 1.0, 2.0, 2.5, 2.5], [1.0, 1.0, 1.0, 1.0, 1.0]])  # gaps do not enter
    mask = torch.tensor([[True, True, True, True, False], [True, False, False, False, False]])
    h = torch.tensor([[1.0, 3.0, 2.0, 5.0, 9.0], [7.0, 0.0, 0.0, 0.0, 0.0]]).unsqueeze(-1)
    lap = second_difference(h, *uniform_weights(mask, h.dtype))
    # h_{i-1} - 2 h_i + h_{i+1}, mirror ends 2 (neighbour - h_i); padding and a lone step: 0.
    torch.testing.assert_close(lap[0].flatten(), torch.tensor([4.0, -3.0, 4.0, -6.0, 0.0]))
    torch.testing.assert_close(lap[1].flatten(), torch.zeros(5))
    torch.testing.assert_close(lap, by_hand_uniform_laplacian(h, [4, 1]))


def test_second_difference_is_the_irregular_three_point_formula() -> None:
    t = torch.tensor([[0.5, 1.0, 2.0, 2.5, 2.5]])  # last step is padding
    mask = torch.tensor([[True, True, True, True, False]])
    h = torch.tensor([1.0, 3.0, 2.0, 5.0, 9.0]).view(1, 5, 1)
    lap = second_difference(h, *gap_weights(elapsed_times(t, mask), mask, min_gap=0.1))
    # Gaps 0.5, 1.0, 0.5 over their mean 2/3: a = 0.75, b = 1.5, c = 0.75; zero flux at both ends.
    a, b, c = 0.75, 1.5, 0.75
    expected = [
        2 / a * ((3 - 1) / a),
        2 / (a + b) * ((2 - 3) / b - (3 - 1) / a),
        2 / (b + c) * ((5 - 2) / c - (2 - 3) / b),
        2 / c * (0 - (5 - 2) / c),
        0.0,  # padding: no neighbours, and step 3 does not see it
    ]
    torch.testing.assert_close(lap.flatten(), torch.tensor(expected))


def test_irregular_stencil_on_regular_rows_is_the_uniform_one() -> None:
    t = torch.tensor([[2.0, 4.0, 6.0], [1.0, 1.0, 1.0]])  # row 2: one observation, then padding
    mask = torch.tensor([[True, True, True], [True, False, False]])
    h = torch.tensor([[1.0, 4.0, 2.0], [7.0, 0.0, 0.0]]).unsqueeze(-1)
    irregular = second_difference(h, *gap_weights(elapsed_times(t, mask), mask, min_gap=0.1))
    torch.testing.assert_close(irregular[0].flatten(), torch.tensor([6.0, -5.0, 4.0]))
    torch.testing.assert_close(irregular, second_difference(h, *uniform_weights(mask, h.dtype)))


def test_repeated_timestamps_use_the_gap_floor_instead_of_dividing_by_zero() -> None:
    t = torch.tensor([[0.0, 1.0, 1.0, 2.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    h = torch.tensor([0.0, 2.0, 1.0, 1.0]).view(1, 4, 1)
    lap = second_difference(h, *gap_weights(elapsed_times(t, mask), mask, min_gap=0.25))
    a, b = 1.5, 0.25  # gaps 1, 0, 1 over their mean 2/3; the 0 floored at 0.25
    expected = [2 / a * (2 / a), 2 / (a + b) * (-1 / b - 2 / a), 2 / (b + a) * (0 / a + 1 / b), 2 / a * (0 - 0 / a)]
    torch.testing.assert_close(lap.flatten(), torch.tensor(expected))


@pytest.mark.parametrize("steps", [1, 2])
def test_heat_dopri5_solves_depth_0_with_euler_at_time_method(steps: int) -> None:
    """Table 1 names Dopri5 for the depth system only: the default time pass stays Euler."""
    torch.manual_seed(6)
    model = CDRNDEHeat(input_channels=2, output_size=1, hidden_size=3, solver_steps=steps, depth=1e-9)
    assert (model.method, model.time_method) == ("dopri5", "euler")
    inputs = raw_batch([4, 2], length=4)
    with torch.no_grad():  # depth 1e-9: h(t, T') = h(t, 0) to float precision
        expected = repeat_last(by_hand_depth0(model, inputs["x"], inputs["dt"], steps), [4, 2])
        torch.testing.assert_close(model.states(**inputs), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [CDRNDE, CDRNDEHeat])
def test_euler_rk4_and_dopri5_run_and_converge_to_the_same_solution(cls: type[CDRNDE]) -> None:
    inputs = raw_batch([5, 3], length=5)
    outs = {}
    for method, steps in (("euler", 2), ("rk4", 4), ("dopri5", 1)):
        torch.manual_seed(3)
        model = cls(input_channels=2, output_size=2, hidden_size=6, method=method, time_method=method,
                    solver_steps=steps, rtol=1e-3, atol=1e-3, **({"diffusivity": 0.2} if cls is CDRNDEHeat else {}))
        out = model(**inputs)
        out.sum().backward()
        assert torch.isfinite(out).all()
        assert all(p.grad is not None for p in model.parameters())
        outs[method] = out.detach()
    torch.testing.assert_close(outs["dopri5"], outs["rk4"], rtol=0, atol=5e-3)
    assert (outs["euler"] - outs["rk4"]).abs().max() > 1e-5  # two Euler steps are not exact


def test_dopri5_padding_changes_outputs_only_within_tolerance() -> None:
    torch.manual_seed(4)
    model = CDRNDEHeat(input_channels=2, output_size=2, hidden_size=6, method="dopri5", time_method="dopri5")
    alone = raw_batch([3], length=3, seed=5)
    longer = raw_batch([6], length=6, seed=6)
    padded = {key: torch.cat([pad(value, 3), longer[key]]) for key, value in alone.items()}
    with torch.no_grad():
        torch.testing.assert_close(model(**padded)[0], model(**alone)[0], rtol=0, atol=2e-3)


@pytest.mark.parametrize("cls", [CDRNDE, CDRNDEHeat])
def test_per_step_outputs_read_each_step_and_repeat_the_last_over_padding(cls: type[CDRNDE]) -> None:
    torch.manual_seed(5)
    kwargs = {"input_channels": 2, "output_size": 3, "hidden_size": 4, "method": "euler"}
    inputs = raw_batch([5, 2], length=5)
    steps = cls(per_step=True, **kwargs)
    torch.manual_seed(5)
    final = cls(**kwargs)
    with torch.no_grad():
        per_step, per_sequence = steps(**inputs), final(**inputs)
    assert per_step.shape == (2, 5, 3)
    torch.testing.assert_close(per_step[[0, 1], [4, 1]], per_sequence)
    torch.testing.assert_close(per_step[1, 2:], per_step[1, 1:2].expand(3, 3))
    assert not torch.allclose(per_step[0, 0], per_step[0, 4])


def test_heat_couples_later_steps_backwards_and_cdr_nde_does_not() -> None:
    inputs = raw_batch([5], length=5)
    changed = {**inputs, "x": inputs["x"].clone()}
    changed["x"][0, 4] += 1.0
    for cls, coupled in ((CDRNDE, False), (CDRNDEHeat, True)):
        torch.manual_seed(6)
        model = cls(input_channels=2, output_size=1, hidden_size=4, per_step=True, method="euler")
        with torch.no_grad():
            moved = (model(**changed)[0, :4] - model(**inputs)[0, :4]).abs().max()
        assert (moved > 1e-6) == coupled


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (CDRNDE, {"method": "midpoint"}, "method.*dopri5"),
        (CDRNDE, {"time_method": "midpoint"}, "time_method.*dopri5"),
        (CDRNDE, {"solver_steps": 0}, "solver_steps"),
        (CDRNDE, {"depth": 0.0}, "depth"),
        (CDRNDE, {"hidden_size": 0}, "hidden_size"),
        (CDRNDEHeat, {"diffusivity": -1.0}, "diffusivity"),
        (CDRNDEHeat, {"min_gap": 0.0}, "min_gap"),
        (CDRNDEHeat, {"laplacian": "spectral"}, "laplacian.*irregular.*uniform"),
    ],
)
def test_bad_arguments_are_rejected_by_name(cls: type[CDRNDE], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(input_channels=2, output_size=1, **kwargs)
