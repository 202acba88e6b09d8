"""CDR-NDE and CDR-NDE-heat: right-hand sides against their equations on hand-sized examples,
solver choices, padding, per-step outputs and argument checks."""

from __future__ import annotations

import pytest
import torch

from pipeline.models.base import elapsed_times
from pipeline.models.cdr_nde import (
    CDRNDE,
    CDRNDEHeat,
    GRUDerivative,
    _DepthField,
    gap_weights,
    second_difference,
)


def raw_batch(lengths: list[int], length: int, channels: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), length, channels, generator=gen)
    t = torch.cumsum(0.2 + torch.rand(len(lengths), length, generator=gen), dim=1)
    mask = torch.arange(length) < torch.tensor(lengths)[:, None]
    t = torch.where(mask, t, t.gather(1, torch.tensor(lengths)[:, None] - 1))
    x = torch.where(mask[..., None], x, torch.full_like(x, float("nan")))
    return CDRNDE.prepare_inputs(x, t, mask)


def pad(value: torch.Tensor, extra: int) -> torch.Tensor:
    """Append `extra` padding steps along dim 1: zeros for x and dt, False for the mask."""
    tail = value.new_zeros(value.shape[0], extra, *value.shape[2:])
    return torch.cat([value, tail], dim=1)


def by_hand_gru_ode(cell: GRUDerivative, u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """(1 - z) (g - h), z = s(W_z u + b_z + U_z h), r = s(W_r u + b_r + U_r h),
    g = tanh(W_g u + b_g + U_g (r h)), from the module's weights one matrix at a time."""
    w_r, w_z, w_g = cell.input_map.weight.chunk(3)
    b_r, b_z, b_g = cell.input_map.bias.chunk(3)
    u_r, u_z = cell.gate_map.weight.chunk(2)
    r = torch.sigmoid(u @ w_r.T + b_r + h @ u_r.T)
    z = torch.sigmoid(u @ w_z.T + b_z + h @ u_z.T)
    g = torch.tanh(u @ w_g.T + b_g + (r * h) @ cell.candidate_map.weight.T)
    return (1 - z) * (g - h)


def test_gru_ode_right_hand_side_matches_its_equation() -> None:
    torch.manual_seed(0)
    cell = GRUDerivative(3, 2)
    u, h = torch.randn(4, 3), torch.randn(4, 2)
    torch.testing.assert_close(cell(cell.project(u), h), by_hand_gru_ode(cell, u, h))
    # It is the GRU update minus the state: zero where the candidate equals the state.
    assert not torch.allclose(cell(cell.project(u), h), torch.zeros(4, 2))


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


def test_regular_rows_get_the_plain_stencil_and_lone_steps_none() -> None:
    t = torch.tensor([[2.0, 4.0, 6.0], [1.0, 1.0, 1.0]])  # row 2: one observation, then padding
    mask = torch.tensor([[True, True, True], [True, False, False]])
    h = torch.tensor([[1.0, 4.0, 2.0], [7.0, 0.0, 0.0]]).unsqueeze(-1)
    lap = second_difference(h, *gap_weights(elapsed_times(t, mask), mask, min_gap=0.1))
    # Interior: h_{i-1} - 2 h_i + h_{i+1}; ends (half cells): 2 (neighbour - h_i).
    torch.testing.assert_close(lap[0].flatten(), torch.tensor([6.0, -5.0, 4.0]))
    torch.testing.assert_close(lap[1].flatten(), torch.zeros(3))


def test_heat_depth_field_is_diffusion_plus_gru_source_of_the_previous_step() -> None:
    torch.manual_seed(1)
    cell = GRUDerivative(2, 2)
    dt = torch.tensor([[0.3, 0.4, 0.8, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    h = torch.randn(1, 4, 2)
    weights = gap_weights(dt, mask, 0.1)
    rate = _DepthField(cell, mask, 0.7, weights)(torch.tensor(0.0), h)
    previous = torch.cat([torch.zeros(1, 1, 2), h[:, :-1]], dim=1)  # h(t_{-1}, d) = 0
    expected = 0.7 * second_difference(h, *weights) + by_hand_gru_ode(cell, previous, h)
    expected[:, 3] = 0.0  # padding does not move
    torch.testing.assert_close(rate, expected)
    plain = _DepthField(cell, mask)(torch.tensor(0.0), h)
    torch.testing.assert_close(plain[:, :3], by_hand_gru_ode(cell, previous, h)[:, :3])


@pytest.mark.parametrize("steps", [1, 2])
def test_depth_zero_pass_is_euler_on_the_gru_ode_with_real_gaps(steps: int) -> None:
    torch.manual_seed(2)
    model = CDRNDE(input_channels=2, output_size=1, hidden_size=3, solver_steps=steps, depth=1e-9)
    inputs = raw_batch([4, 2], length=4)
    field = model.time_derivative
    h, expected = torch.zeros(2, 3), []
    for i in range(4):
        for _ in range(steps):  # dt = 0 at padding: the state holds
            h = h + inputs["dt"][:, i, None] / steps * by_hand_gru_ode(field, inputs["x"][:, i], h)
        expected.append(h)
    expected = torch.stack(expected, dim=1)
    expected[1, 2:] = expected[1, 1]
    with torch.no_grad():  # depth 1e-9: h(t, D) = h(t, 0) to float precision
        torch.testing.assert_close(model.states(**inputs), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [CDRNDE, CDRNDEHeat])
def test_euler_rk4_and_dopri5_run_and_converge_to_the_same_solution(cls: type[CDRNDE]) -> None:
    inputs = raw_batch([5, 3], length=5)
    outs = {}
    for method, steps in (("euler", 2), ("rk4", 4), ("dopri5", 1)):
        torch.manual_seed(3)
        model = cls(input_channels=2, output_size=2, hidden_size=6, method=method, solver_steps=steps,
                    rtol=1e-3, atol=1e-3, **({"diffusivity": 0.2} if cls is CDRNDEHeat else {}))
        out = model(**inputs)
        out.sum().backward()
        assert torch.isfinite(out).all()
        assert all(p.grad is not None for p in model.parameters())
        outs[method] = out.detach()
    torch.testing.assert_close(outs["dopri5"], outs["rk4"], rtol=0, atol=5e-3)
    assert (outs["euler"] - outs["rk4"]).abs().max() > 1e-5  # two Euler steps are not exact


def test_dopri5_padding_changes_outputs_only_within_tolerance() -> None:
    torch.manual_seed(4)
    model = CDRNDEHeat(input_channels=2, output_size=2, hidden_size=6, method="dopri5")
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
        (CDRNDE, {"solver_steps": 0}, "solver_steps"),
        (CDRNDE, {"depth": 0.0}, "depth"),
        (CDRNDE, {"hidden_size": 0}, "hidden_size"),
        (CDRNDEHeat, {"diffusivity": -1.0}, "diffusivity"),
        (CDRNDEHeat, {"min_gap": 0.0}, "min_gap"),
    ],
)
def test_bad_arguments_are_rejected_by_name(cls: type[CDRNDE], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(input_channels=2, output_size=1, **kwargs)


def test_repeated_timestamps_use_the_gap_floor_instead_of_dividing_by_zero() -> None:
    t = torch.tensor([[0.0, 1.0, 1.0, 2.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    h = torch.tensor([0.0, 2.0, 1.0, 1.0]).view(1, 4, 1)
    lap = second_difference(h, *gap_weights(elapsed_times(t, mask), mask, min_gap=0.25))
    a, b = 1.5, 0.25  # gaps 1, 0, 1 over their mean 2/3; the 0 floored at 0.25
    expected = [2 / a * (2 / a), 2 / (a + b) * (-1 / b - 2 / a), 2 / (b + a) * (0 / a + 1 / b), 2 / a * (0 - 0 / a)]
    torch.testing.assert_close(lap.flatten(), torch.tensor(expected))
