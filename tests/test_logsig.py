"""Log-signature window inputs, the NRDE and the rough-path FWP, checked against hand computations."""

from __future__ import annotations

from pathlib import Path

import pytest
import signatory
import torch
import torchdiffeq
import yaml
from torch import nn

from pipeline.models.blocks.logsig import logsig_knots
from pipeline.models.neural_de.nrde import NeuralRDE
from pipeline.models.fast_weights.rde import RoughDeltaFWP, RoughHebbFWP, RoughOjaFWP

NAN = float("nan")


def levy_area(points: list[tuple[float, float]]) -> float:
    """A = 1/2 (S^{12} - S^{21}) of the piecewise linear path through `points`.

    S^{12} = int (X^1 - X^1_0) dX^2; on a straight segment from p_k with increment d this is
    ((p_k - p_0)^1 + d^1 / 2) d^2, and the d^1 d^2 / 2 terms cancel in the difference.
    """
    x0, y0 = points[0]
    area = 0.0
    for (x, y), (x_next, y_next) in zip(points[:-1], points[1:]):
        area += (x - x0) * (y_next - y) - (y - y0) * (x_next - x)
    return area / 2


def test_signatory_depth2_logsignature_is_increment_and_levy_area() -> None:
    # signatory's default mode "words" gives the coefficients of the Lyndon words 1, 2, 12. At depth
    # 2 the log-signature is d1 e1 + d2 e2 + 1/2 (S^{12} - S^{21}) (e1 e2 - e2 e1): the antisymmetric
    # part of the second level, so the coefficient of the word 12 (equally of the bracket [e1, e2]
    # of the Lyndon basis) is the Levy area.
    points = [(0.0, 0.0), (1.0, 0.0), (1.0, 2.0), (-0.5, 1.5)]
    path = torch.tensor([points], dtype=torch.float64)  # (1, 4, 2)
    logsig = signatory.logsignature(path, depth=2)[0]
    expected = [points[-1][0] - points[0][0], points[-1][1] - points[0][1], levy_area(points)]
    assert signatory.logsignature_channels(2, 2) == 3
    torch.testing.assert_close(logsig, torch.tensor(expected, dtype=torch.float64))
    # per segment: (0*0 - 0*1) / 2, (1*2 - 0*0) / 2, (1*(-0.5) - 2*(-1.5)) / 2
    assert expected[2] == pytest.approx(0.0 + 1.0 + 1.25)


def split(lengths: list[int], length: int, channels: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), length, channels, generator=gen, dtype=torch.float64)
    t = torch.cumsum(0.5 + torch.rand(len(lengths), length, generator=gen, dtype=torch.float64), dim=1)
    mask = torch.arange(length) < torch.tensor(lengths)[:, None]
    x[~mask] = NAN
    t = torch.where(mask, t, t.gather(1, torch.tensor(lengths)[:, None] - 1))
    return x, t, mask


def test_depth1_knots_are_the_path_at_window_boundaries() -> None:
    x, t, mask = split([7], length=7)
    knots, last = logsig_knots(x, t, mask, depth=1, step=3)
    path = torch.cat([t.unsqueeze(-1), x], dim=-1)[0]  # (7, 3)
    # windows [0, 3] and [3, 6]; at depth 1 a window's log-signature is its increment.
    assert knots.shape == (1, 3, 3) and last.tolist() == [2]
    torch.testing.assert_close(knots[0], path[[0, 3, 6]])
    torch.testing.assert_close(knots[0, 1:] - knots[0, :-1], path[[3, 6]] - path[[0, 3]])


def test_depth2_window_is_signatory_of_the_window_and_knot0_is_the_start() -> None:
    x, t, mask = split([6], length=6, seed=1)
    knots, last = logsig_knots(x, t, mask, depth=2, step=2)
    path = torch.cat([t.unsqueeze(-1), x], dim=-1)  # (1, 6, 3)
    assert knots.shape == (1, 4, 6) and last.tolist() == [3]  # windows [0,2], [2,4], [4,5] (partial)
    torch.testing.assert_close(knots[0, 0], torch.cat([path[0, 0], torch.zeros(3, dtype=path.dtype)]))
    for k, (start, end) in enumerate([(0, 2), (2, 4), (4, 5)]):
        window = signatory.logsignature(path[:, start : end + 1], depth=2)[0]
        torch.testing.assert_close(knots[0, k + 1] - knots[0, k], window)


def test_missing_value_is_filled_linearly_within_the_prefix() -> None:
    x, t, mask = split([4], length=4, seed=2)
    x[0, 1, 0] = NAN  # interior gap: the mean of its neighbours (linear in the index)
    x[0, 3, 1] = NAN  # trailing gap of one channel: held at its last observation
    knots, _ = logsig_knots(x, t, mask, depth=1, step=1)
    assert knots[0, 1, 1] == pytest.approx(float(x[0, 0, 0] + x[0, 2, 0]) / 2)
    assert knots[0, 3, 2] == pytest.approx(float(x[0, 2, 1]))
    assert not knots.isnan().any()


def test_padding_changes_neither_windows_nor_last() -> None:
    x, t, mask = split([7, 5, 3, 1], length=7, seed=3)
    x[1, 2, 0] = NAN
    knots, last = logsig_knots(x, t, mask, depth=2, step=2)
    assert last.tolist() == [3, 2, 1, 0]  # ceil(T / 2) with T = 6, 4, 2, 0
    for row, length in enumerate([7, 5, 3, 1]):
        rows = slice(row, row + 1)
        alone, alone_last = logsig_knots(x[rows, :length], t[rows, :length], mask[rows, :length], 2, 2)
        n = alone.shape[1]
        torch.testing.assert_close(knots[row, :n], alone[0])
        # after the row's last window the path is constant: no further log-signature
        assert torch.equal(knots[row, int(last[row]) :], knots[row, int(last[row])].expand(4 - int(last[row]), -1))
        assert alone_last.tolist() == [int(last[row])]


def constant_field_nrde(per_step: bool, method: str = "rk4") -> NeuralRDE:
    """NRDE whose vector field is the constant matrix tanh(b): then dz/ds = tanh(b) logsig_k exactly."""
    torch.manual_seed(0)
    model = NeuralRDE(input_channels=2, output_size=2, per_step=per_step, hidden_size=3, vf_units=4,
                      vf_layers=1, logsig_depth=2, logsig_step=2, method=method)
    last_layer = model.field.net[-1]
    nn.init.zeros_(last_layer.weight)
    return model.double()


@pytest.mark.parametrize("method", ["rk4", "euler", "dopri5"])
def test_nrde_follows_its_equation_window_by_window(method: str) -> None:
    """z(k) = zeta(Y_0) + tanh(B) (Y_k - Y_0): each solver step reads its own window only."""
    model = constant_field_nrde(per_step=True, method=method)
    x, t, mask = split([6, 3], length=6, seed=4)
    inputs = NeuralRDE.prepare_inputs(x, t, mask, logsig_depth=2, logsig_step=2)
    knots = inputs["coeffs"]  # (2, 4, 6)
    matrix = model.field.net[-1].bias.detach().view(3, 6).tanh()  # (H, D)
    z = model.initial(knots[:, :1]) + (knots - knots[:, :1]) @ matrix.T  # (2, 4, H) at every knot
    # j < T: floor(j / 2); j >= T: ceil(T / 2), with T = 5 and T = 2
    knot_of_step = torch.tensor([[0, 0, 1, 1, 2, 3], [0, 0, 1, 1, 1, 1]])
    expected = model.readout(z[torch.arange(2)[:, None], knot_of_step])  # (2, 6, O)
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs), expected)


def test_per_step_mapping_is_causal_and_ends_at_the_sequence_output() -> None:
    model = NeuralRDE(input_channels=2, output_size=1, hidden_size=4, vf_units=4, vf_layers=1, logsig_step=3)
    states = torch.arange(4.0).view(1, 4, 1)  # the state at knot k is k
    mask = torch.arange(9) < 5  # T = 4
    steps = model._to_steps(states, mask.unsqueeze(0))[0, :, 0]
    # j < T: knot floor(j / 3); j >= T: knot ceil(4 / 3) = 2, the state at T (the path is constant after it)
    assert steps.tolist() == [0, 0, 0, 1, 2, 2, 2, 2, 2]

    x, t, mask = split([5, 7], length=7, seed=5)
    torch.manual_seed(0)
    sizes = {"input_channels": 2, "output_size": 2, "hidden_size": 4, "vf_units": 4, "logsig_step": 3}
    per_step = NeuralRDE(per_step=True, **sizes).double()
    per_seq = NeuralRDE(**sizes).double()
    per_seq.load_state_dict(per_step.state_dict())
    inputs = NeuralRDE.prepare_inputs(x, t, mask, logsig_step=3)
    with torch.no_grad():
        torch.testing.assert_close(per_step(**inputs)[[0, 1], [4, 6]], per_seq(**inputs))


ROUGH_FWPS = [RoughHebbFWP, RoughOjaFWP, RoughDeltaFWP]


@pytest.mark.parametrize("cls", [NeuralRDE, *ROUGH_FWPS])
def test_padding_does_not_change_the_output(cls: type) -> None:
    x, t, mask = split([4, 7], length=7, seed=6)
    torch.manual_seed(0)
    kwargs = {"hidden_size": 8, "logsig_depth": 2, "logsig_step": 2}
    model = cls(input_channels=2, output_size=3, per_step=True, **kwargs).double().eval()
    with torch.no_grad():
        alone = model(**cls.prepare_inputs(x[:1, :4], t[:1, :4], mask[:1, :4], **kwargs))[0]
        padded = model(**cls.prepare_inputs(x, t, mask, **kwargs))[0, :4]
    torch.testing.assert_close(padded, alone)


@pytest.mark.parametrize("cls", ROUGH_FWPS)
def test_rough_fwp_step_over_window_k_reads_logsig_k(cls: type) -> None:
    """One Euler step over window 1: W(2) = W(1) + F(Y_1, logsig_1, W(1)), F the model's learning rule
    (X = Y(s), X' = dY/ds = logsig_1 on [1, 2]). Without the solver's nudge inside the window the
    step would read the slope at knot 1 from the left, logsig_0."""
    torch.manual_seed(0)
    model = cls(input_channels=1, output_size=1, hidden_size=4, num_heads=2,
                logsig_depth=2, logsig_step=2, method="euler").double()
    x, t, mask = split([5], length=5, channels=1, seed=7)
    inputs = cls.prepare_inputs(x, t, mask, logsig_depth=2, logsig_step=2)
    knots = inputs["coeffs"]  # (1, 3, 3): windows [0, 2], [2, 4]
    w1 = torch.randn(1, 2, 2, 2, dtype=torch.float64)  # (B, heads, d, d)
    with torch.no_grad():
        expected = w1 + model.rule(knots[:, 1], knots[:, 2] - knots[:, 1], w1)
        path, grid = model._path(knots, inputs["last"], inputs["mask"])

        def field(s: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
            return model.rule(path.evaluate(s), path.derivative(s), flat.view(1, 2, 2, 2)).flatten(1)

        solved = torchdiffeq.odeint(field, w1.flatten(1), grid[1:3], **model.solver)[-1]
    assert not torch.allclose(knots[:, 2] - knots[:, 1], knots[:, 1] - knots[:, 0])
    torch.testing.assert_close(solved.view(1, 2, 2, 2), expected)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"logsig_depth must be one of \[1, 2\], got 3"):
        NeuralRDE(input_channels=2, output_size=1, logsig_depth=3)
    with pytest.raises(ValueError, match=r"logsig_step must be an integer >= 1.*got 0"):
        NeuralRDE(input_channels=2, output_size=1, logsig_step=0)
    with pytest.raises(ValueError, match="interpolation"):
        NeuralRDE(input_channels=2, output_size=1, interpolation="cubic")
    for cls in ROUGH_FWPS:
        with pytest.raises(ValueError, match=r"method 'dopri5'.*rk4"):
            cls(input_channels=2, output_size=1, method="dopri5")


def test_path_channels_follow_signatory() -> None:
    for depth, expected in [(1, 3), (2, 6)]:
        model = NeuralRDE(input_channels=2, output_size=1, logsig_depth=depth)
        assert model.path_channels == signatory.logsignature_channels(3, depth) == expected
        assert model.initial.in_features == expected


def test_a_space_giving_logsig_families_an_interpolation_fails_at_load(tmp_path: Path) -> None:
    """interpolation is an argument of the spline models, not of their log-signature variants:
    a space that sets it is refused when loaded, naming the key."""
    from pipeline.errors import ConfigError
    from pipeline.spaces import load_space

    for family in ("nrde", "rde_fwp_delta"):
        space = yaml.safe_load((Path(__file__).resolve().parents[1] / "search_spaces" / f"{family}.yaml").read_text())
        space["fixed"] = {**(space.get("fixed") or {}), "interpolation": "cubic"}
        path = tmp_path / f"{family}.yaml"
        path.write_text(yaml.safe_dump(space, sort_keys=False))
        with pytest.raises(ConfigError, match=r"unknown keys \['interpolation'\]"):
            load_space(path)
