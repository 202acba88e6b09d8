"""Every registered model family, built once, on tiny padded batches; plus the search spaces."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from pipeline.models import MODELS, SequenceModel, get_model_class
from pipeline.models.blocks.cde import path_coefficients
from pipeline.models.base import model_arguments

SEARCH_SPACES = Path(__file__).resolve().parents[1] / "search_spaces"
from pipeline.config.protocol import TRAINING_KEYS
TRAINER_SUPPLIED = {"input_channels", "output_size", "per_step"}
CHANNELS, OUTPUTS = 2, 3

# Small versions of each family so the whole file runs in seconds.
SMALL: dict[str, dict] = {
    "cde_fwp_hebb": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16},
    "cde_fwp_oja": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16},
    "node_fwp_hebb": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16},
    "node_fwp_oja": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16},
    "node_fwp_delta": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16},
    "cfc_no_gate": {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 2, "backbone_dropout": 0.1},
    "cf_s": {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 2, "time_scale": 0.5},
    "cfc_mmrnn": {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 2},
    "ltc": {"hidden_size": 8, "ode_unfolds": 3},
    "cdr_nde": {"hidden_size": 8},
    "cdr_nde_heat": {"hidden_size": 8, "method": "euler", "diffusivity": 0.1},
    "ode_rnn_tw": {"hidden_size": 8, "vf_units": 8, "tw_units": 4, "tw_block": 4},
    "gru_ode": {"hidden_size": 8},
    "gru_ode_tw": {"hidden_size": 8, "tw_scope": "block", "tw_units": 4, "tw_block": 4},
    "ncde_tw": {"hidden_size": 8, "vf_units": 8, "vf_layers": 2, "tw_units": 4, "tw_block": 4},
    "latent_ode": {"latent_size": 4, "rec_size": 8, "units": 8, "classifier_units": 8, "rec_layers": 1, "gen_layers": 1},
    "latent_ode_tw": {"latent_size": 4, "rec_size": 8, "units": 8, "classifier_units": 8, "rec_layers": 1, "gen_layers": 1, "tw_clock": "index", "tw_units": 4, "tw_block": 4},
    "ct_rnn": {"hidden_size": 8},
    "ode_lstm": {"hidden_size": 8},
    "gru_d": {"hidden_size": 8},
    "lstm_dt": {"hidden_size": 8},
    "nrde": {"hidden_size": 8, "vf_units": 8, "vf_layers": 2, "logsig_depth": 2, "logsig_step": 2},
    "rde_fwp_delta": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16, "logsig_depth": 1, "logsig_step": 3},
    "rde_fwp_hebb": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16, "logsig_depth": 2, "logsig_step": 2},
    "rde_fwp_oja": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16, "logsig_depth": 2, "logsig_step": 3},
    "rde_node_fwp_delta": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16, "logsig_depth": 1, "logsig_step": 3},
    "rde_node_fwp_hebb": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16, "logsig_depth": 2, "logsig_step": 2},
    "rde_node_fwp_oja": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16, "logsig_depth": 2, "logsig_step": 3},
    "cfc": {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 2},
    "ncde": {"hidden_size": 8, "vf_units": 8, "vf_layers": 2},
    "cde_fwp_delta": {"hidden_size": 8, "num_heads": 2, "ff_dim": 16},
    "ode_rnn": {"hidden_size": 8, "vf_units": 8},
}


def make_split(lengths: list[int], length: int, seed: int = 0, regular: bool = False) -> tuple[torch.Tensor, ...]:
    """x (N, L, C) with NaN padding and one missing value, t (N, L) irregular (or 0, 1, 2, ...
    with `regular`), mask (N, L)."""
    gen = torch.Generator().manual_seed(seed)
    n = len(lengths)
    x = torch.randn(n, length, CHANNELS, generator=gen)
    t = torch.cumsum(0.2 + torch.rand(n, length, generator=gen), dim=1)
    if regular:
        t = torch.arange(length, dtype=x.dtype).expand(n, length).clone()
    mask = torch.arange(length) < torch.tensor(lengths)[:, None]
    x[~mask] = float("nan")
    if lengths[0] > 2:
        x[0, 1, 0] = float("nan")  # a missing value inside an observed step
    last_time = t.gather(1, torch.tensor(lengths)[:, None] - 1)
    t = torch.where(mask, t, last_time)  # padding repeats the last time
    return x, t, mask


def pad_to(x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, length: int) -> tuple[torch.Tensor, ...]:
    extra = length - x.shape[1]
    x = torch.cat([x, torch.full((x.shape[0], extra, x.shape[2]), float("nan"))], dim=1)
    t = torch.cat([t, t[:, -1:].expand(-1, extra)], dim=1)
    mask = torch.cat([mask, torch.zeros(mask.shape[0], extra, dtype=torch.bool)], dim=1)
    return x, t, mask


def build(name: str, per_step: bool) -> SequenceModel:
    torch.manual_seed(0)
    return get_model_class(name)(
        input_channels=CHANNELS, output_size=OUTPUTS, per_step=per_step, **SMALL[name]
    )


@pytest.mark.parametrize("regular", [False, True], ids=["irregular", "regular"])
@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_backward(name: str, per_step: bool, regular: bool) -> None:
    model = build(name, per_step)
    x, t, mask = make_split([6, 3, 1], length=6, regular=regular)
    out = model(**type(model).prepare_inputs(x, t, mask, **SMALL[name]))
    expected = (3, 6, OUTPUTS) if per_step else (3, OUTPUTS)
    assert out.shape == expected
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_padding_does_not_change_output(name: str, per_step: bool) -> None:
    model = build(name, per_step).eval()
    prepare = type(model).prepare_inputs
    x, t, mask = make_split([4], length=4, seed=1)
    other = make_split([7], length=7, seed=2)
    batch = [torch.cat(pair) for pair in zip(pad_to(x, t, mask, 7), other)]
    with torch.no_grad():
        alone = model(**prepare(x, t, mask, **SMALL[name]))[0]
        padded = model(**prepare(*batch, **SMALL[name]))[0]
    if per_step:
        padded = padded[:4]  # only observed steps carry meaning
    torch.testing.assert_close(padded, alone, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interpolation", ["cubic", "hermite"])
def test_cde_path_is_the_prefix_fit_then_constant(interpolation: str) -> None:
    x, t, mask = make_split([5], length=5, seed=3)
    alone, _ = path_coefficients(x, t, mask, interpolation)
    padded, last = path_coefficients(*pad_to(x, t, mask, 9), interpolation)
    assert padded.shape == (1, 8, 4 * (CHANNELS + 1)) and last.tolist() == [4]
    torch.testing.assert_close(padded[:, :4], alone)
    tail = padded[:, 4:]
    assert torch.all(tail[..., CHANNELS + 1 :] == 0)  # no slope or curvature after T
    assert torch.allclose(tail[..., : CHANNELS + 1], tail[:, :1, : CHANNELS + 1])


def test_unknown_model_name_lists_valid_names() -> None:
    with pytest.raises(KeyError) as error:
        get_model_class("transformer")
    assert all(name in str(error.value) for name in MODELS)


def test_wrong_representation_names_the_one_needed() -> None:
    x, t, mask = make_split([3, 2], length=3)
    cde_inputs = get_model_class("ncde").prepare_inputs(x, t, mask)
    with pytest.raises(ValueError, match=r"'raw' representation.*\['x', 'dt', 'mask'\].*coeffs"):
        build("cfc", per_step=False)(**cde_inputs)
    raw_inputs = get_model_class("cfc").prepare_inputs(x, t, mask)
    with pytest.raises(ValueError, match=r"'interp' representation.*coeffs"):
        build("ncde", per_step=False)(**raw_inputs)


def test_fwp_rejects_hidden_size_not_divisible_by_heads() -> None:
    with pytest.raises(ValueError, match=r"hidden_size=30.*num_heads=4"):
        get_model_class("cde_fwp_delta")(input_channels=2, output_size=1, hidden_size=30, num_heads=4)


def test_bad_solver_choice_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="dopri5"):
        get_model_class("ncde")(input_channels=2, output_size=1, method="midpoint")


def model_kwargs(name: str) -> set[str]:
    return set(model_arguments(MODELS[name])) - TRAINER_SUPPLIED


def inside(value: object, spec: dict) -> bool:
    if spec["distribution"] == "categorical":
        return value in spec["choices"]
    if not spec["low"] <= value <= spec["high"]:
        return False
    return spec["distribution"] != "int" or (value - spec["low"]) % spec.get("step", 1) == 0


def test_search_space_files_match_registry() -> None:
    assert {path.stem for path in SEARCH_SPACES.glob("*.yaml")} == set(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_search_space_keys_and_reference(name: str) -> None:
    """Every dataset's reference (the default and each named one) sets every active param inside
    its range, only known keys appear, and the reference model builds."""
    from pipeline.spaces import load_space

    space = yaml.safe_load((SEARCH_SPACES / f"{name}.yaml").read_text())
    assert {"reference", "params"} <= set(space) <= {"reference", "params", "fixed"}  # fixed is optional
    loaded = load_space(SEARCH_SPACES / f"{name}.yaml")
    allowed = TRAINING_KEYS | model_kwargs(name) | {"embed_dim"}
    assert loaded.params["lr"].distribution == "loguniform"
    for dataset in [None, *loaded.references]:
        resolved = loaded if dataset is None else loaded.for_dataset(dataset)
        reference = resolved.reference
        for section, keys in (("reference", reference), ("params", loaded.params), ("fixed", resolved.fixed)):
            assert set(keys) <= allowed, f"{dataset} {section}: {set(keys) - allowed}"
        for key, spec in loaded.params.items():
            active = all(reference.get(k) in v for k, v in spec.when.items())
            assert (key in reference) == active, f"{dataset} {key}: active={active}"
            if active:
                assert spec.contains(reference[key]), f"{dataset} reference {key}={reference[key]} outside {spec}"
        chosen = {**resolved.fixed, **reference}
        MODELS[name](input_channels=12, output_size=2,
                     **{k: v for k, v in chosen.items() if k not in TRAINING_KEYS and k != "embed_dim"})


def test_adaptive_step_cap_counts_per_output_interval() -> None:
    """torchdiffeq caps max_num_steps per output interval: outputs at every knot keep the
    per-interval cap, a call returning only the end gets it once per interval."""
    from pipeline.models.blocks.cde import solver_kwargs, stop_at_knots

    solver = solver_kwargs("dopri5", 1.0, 1e-3, 1e-4, 7)
    grid = torch.arange(5.0)
    assert stop_at_knots(solver, grid)["options"]["max_num_steps"] == 7
    assert stop_at_knots(solver, grid, outputs_at_knots=False)["options"]["max_num_steps"] == 28
    assert stop_at_knots(solver_kwargs("rk4", 0.5, 1e-3, 1e-4, 7), grid) == solver_kwargs("rk4", 0.5, 1e-3, 1e-4, 7)
