"""No future on per-step tasks (issue 30): the causal path, what each family declares, the space a
per-step search runs, the refusals of the trainer and the final stage, and `ctsweep check-family`'s
causality check on every built-in family. (The report's mark: tests/test_marks.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import torchcde
from torch import nn

from pipeline.data.contract import Dataset, Meta, Split
from pipeline.errors import ConfigError
from pipeline.families.check import _Contract, later_step_change, synthetic_batch
from pipeline.final.plans import _check_causal
from pipeline.final.stage import reads_later_steps
from pipeline.models import MODELS
from pipeline.models.base import SequenceModel, causal_variant, gather_steps, last_valid_index
from pipeline.models.blocks.causal_path import carried_forward, hermite_causal_coeffs
from pipeline.spaces import causal_space, load_space, space_path
from pipeline.sweep.plans import search_fingerprint
from pipeline.training.loop import Trainer, TrainSettings

REPO = Path(__file__).resolve().parents[1]
# Families whose published form reads later steps and has no causal variant: run as they are, marked.
NOT_CAUSAL = {"cdr_nde_heat", "latent_ode", "latent_ode_tw", "nrde", "rde_fwp_delta", "rde_fwp_hebb", "rde_fwp_oja",
              "rde_node_fwp_delta", "rde_node_fwp_hebb", "rde_node_fwp_oja"}
SPLINE = ["ncde", "ncde_tw", "gru_ode", "gru_ode_tw", "cde_fwp_delta", "cde_fwp_hebb", "cde_fwp_oja",
          "node_fwp_delta", "node_fwp_hebb", "node_fwp_oja"]


# ------------------------------------------------------------------------------------ the causal path


def test_values_are_carried_forward_and_zero_before_the_first_observation() -> None:
    nan = float("nan")
    path = torch.tensor([[[nan, 1.0], [2.0, nan], [nan, nan], [5.0, 3.0]]], dtype=torch.float64)
    assert carried_forward(path).tolist() == [[[0.0, 1.0], [2.0, 1.0], [2.0, 1.0], [5.0, 3.0]]]


def test_the_causal_hermite_is_torchcde_s_but_for_the_first_slope_and_reads_no_later_knot() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 7, 2, dtype=torch.float64)
    ours, theirs = hermite_causal_coeffs(x), torchcde.hermite_cubic_coefficients_with_backward_differences(x)
    assert torch.allclose(ours[:, 1:], theirs[:, 1:], atol=1e-12)  # every segment after the first
    spline = torchcde.CubicSpline(ours)
    knots = torch.arange(7, dtype=torch.float64)
    assert torch.allclose(spline.evaluate(knots), x, atol=1e-12)  # it interpolates the knots
    assert spline.derivative(knots[0]).abs().max() == 0  # X'(0) = 0: step 0 reads x_0 only
    later = x.clone()
    later[:, 4:] += 1.0  # inputs after step 3 move; the path up to knot 3 must not
    moved = torchcde.CubicSpline(hermite_causal_coeffs(later))
    s = torch.linspace(0.0, 3.0, 31, dtype=torch.float64)
    assert torch.equal(spline.evaluate(s), moved.evaluate(s)) and torch.equal(spline.derivative(s), moved.derivative(s))


# ------------------------------------------------------------------------- what the families declare


def test_each_family_declares_whether_it_reads_later_steps() -> None:
    for name, cls in MODELS.items():
        kwargs = _reference(name)
        variant = causal_variant(cls, kwargs)
        assert (variant is None) == (name in NOT_CAUSAL), name
        if name in SPLINE:  # the reference's natural cubic spline reads later steps; the variant does not
            assert "cubic" in cls.reads_later_steps(kwargs) and variant["interpolation"] == "hermite_causal"
            assert cls.reads_later_steps({**kwargs, "interpolation": "hermite"}) is not None  # torchcde's fill
    assert not MODELS["cdr_nde_heat"].causal and MODELS["cdr_nde"].causal
    for laplacian in ("uniform", "irregular"):  # whatever the arguments
        assert "Eq. 14" in MODELS["cdr_nde_heat"].reads_later_steps({"laplacian": laplacian, "method": "euler"})
    assert causal_variant(MODELS["cdr_nde"], {"method": "dopri5"}) == {"method": "euler"}


@pytest.mark.parametrize("family", sorted(MODELS))
def test_every_built_in_family_passes_the_causality_check(family: str) -> None:
    """`ctsweep check-family`'s causality check on the per-step synthetic batch (6 series, 3 channels,
    NaN gaps): causal families leave every earlier output unchanged, the others say so."""
    contract = _Contract(REPO, family)
    contract.space()
    detail = contract.causality()  # raises AssertionError when a family claiming causality is not
    assert detail.startswith("declared: reads later steps") == (family in NOT_CAUSAL), detail
    if family in SPLINE:
        assert detail.endswith("(as per-step tasks train it: interpolation hermite_causal)"), detail


class _Peeking(SequenceModel):
    """Per step: a running sum read backwards, so step i sees every later input."""

    def __init__(self, *, input_channels: int, output_size: int, per_step: bool = False) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        self.head = nn.Linear(input_channels, output_size)

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.head((x * mask.unsqueeze(-1)).flip(1).cumsum(1).flip(1))
        return out if self.per_step else gather_steps(out, last_valid_index(mask))


def test_the_check_fails_a_family_that_reads_later_steps_unless_it_says_so() -> None:
    contract = _Contract(REPO, "cfc")
    contract.cls, contract.kwargs = _Peeking, {}
    with pytest.raises(AssertionError, match=r"moves by .* when the inputs after step \d+ change.*causal = False"):
        contract.causality()
    contract.cls = type("Declared", (_Peeking,), {"causal": False})
    assert contract.causality().startswith("declared: reads later steps (Declared declares causal = False)")
    _, gap = later_step_change(MODELS["ncde"], {"interpolation": "cubic"}, *synthetic_batch())
    assert gap > 1e-3  # the natural cubic spline, as the review measured (N1)


# ------------------------------------------------------------------------------- a per-step search


def _reference(family: str, dataset: str = "any") -> dict:
    space = load_space(space_path(REPO, family), family).for_dataset(dataset)
    return {k: v for k, v in {**space.fixed, **space.reference}.items() if k in _model_keys(family)}


def _model_keys(family: str) -> set[str]:
    from pipeline.models.base import model_arguments

    return set(model_arguments(MODELS[family]))


def test_a_per_step_search_offers_no_interpolation_that_reads_later_steps() -> None:
    space = load_space(space_path(REPO, "gru_ode"), "gru_ode").for_dataset("walker2d")
    causal, note = causal_space(space, "walker2d")
    assert note == ("gru_ode: interpolation cubic, hermite read later steps on per-step dataset walker2d: "
                    "trained as interpolation hermite_causal")
    assert causal.params["interpolation"].choices == ("hermite_causal",)
    assert causal.reference["interpolation"] == "hermite_causal"
    assert {k: v for k, v in causal.reference.items() if k != "interpolation"} == \
        {k: v for k, v in space.reference.items() if k != "interpolation"}
    assert causal.params["method"] == space.params["method"] and causal.fixed == space.fixed
    cdr, note = causal_space(load_space(space_path(REPO, "cdr_nde"), "cdr_nde").for_dataset("walker2d"), "walker2d")
    assert cdr.params["method"].choices == ("euler",) and "method dopri5 read later steps" in note
    heat = load_space(space_path(REPO, "cdr_nde_heat"), "cdr_nde_heat").for_dataset("walker2d")
    same, note = causal_space(heat, "walker2d")
    assert same is heat and note.endswith("runs as published, marked in the report")
    cfc = load_space(space_path(REPO, "cfc"), "cfc").for_dataset("walker2d")
    assert causal_space(cfc, "walker2d") == (cfc, None)


def test_a_space_that_leaves_the_interpolation_to_the_default_gets_the_causal_one_fixed() -> None:
    space = load_space(space_path(REPO, "ncde"), "ncde").for_dataset("walker2d")
    bare = dataclasses.replace(space, params={k: v for k, v in space.params.items() if k != "interpolation"},
                               reference={k: v for k, v in space.reference.items() if k != "interpolation"})
    causal, note = causal_space(bare, "walker2d")
    assert causal.fixed["interpolation"] == "hermite_causal" and "interpolation its default" in note


def test_only_a_changed_per_step_space_changes_the_search_fingerprint(tmp_path: Path) -> None:
    from pipeline.config import SearchParams

    data = tmp_path / "data"
    data.mkdir()
    for name in ("meta.json", "train.npz", "val.npz", "test.npz"):  # what the data fingerprint reads
        (data / name).write_text("{}")
    p, path = SearchParams(), space_path(REPO, "ncde")
    space = load_space(path, "ncde").for_dataset("walker2d")
    plain = search_fingerprint("walker2d", "ncde", p, path, data)
    assert search_fingerprint("walker2d", "ncde", p, path, data, None) == plain  # every other dataset as before
    assert search_fingerprint("walker2d", "ncde", p, path, data, causal_space(space, "walker2d")[0]) != plain


# ------------------------------------------------------------------------------ trainer and final


def _per_step_data() -> Dataset:
    rng = np.random.default_rng(0)
    n, length, channels = 6, 5, 2
    x = rng.normal(size=(n, length, channels)).astype(np.float32)
    t = np.cumsum(rng.uniform(0.5, 1.0, size=(n, length)), axis=1).astype(np.float32)
    mask = np.ones((n, length), dtype=bool)
    y = rng.normal(size=(n, length, channels)).astype(np.float32)
    meta = Meta(name="steps", task="regression", per_step=True, output_size=channels, metric="mse",
                channels=["a", "b"], source="test_causal")
    return Dataset(meta, {s: Split(x, t, mask, y) for s in ("train", "val", "test")})


def test_the_trainer_refuses_a_per_step_run_that_reads_later_steps_when_a_causal_variant_exists() -> None:
    data, settings = _per_step_data(), TrainSettings(lr=1e-2, batch_size=6)
    with pytest.raises(ConfigError, match=r"^ncde on per-step dataset steps: interpolation cubic: .*its causal "
                                          r"variant has interpolation hermite_causal; allowed: that variant$"):
        Trainer("ncde", {"hidden_size": 4, "vf_units": 4}, settings, data, seed=0)
    Trainer("ncde", {"hidden_size": 4, "vf_units": 4, "interpolation": "hermite_causal"}, settings, data, seed=0)
    Trainer("latent_ode", {"latent_size": 3, "rec_size": 4, "units": 4, "classifier_units": 4}, settings, data,
            seed=0)  # no causal variant: runs as published (and is marked)
    per_sequence = dataclasses.replace(data, meta=dataclasses.replace(data.meta, per_step=False))
    per_sequence = Dataset(per_sequence.meta, {k: Split(s.x, s.t, s.mask, s.y[:, -1]) for k, s in data.splits.items()})
    Trainer("ncde", {"hidden_size": 4, "vf_units": 4}, settings, per_sequence, seed=0)  # untouched off per-step


def test_the_final_stage_refuses_an_old_search_and_records_a_family_that_reads_later_steps() -> None:
    meta = _per_step_data().meta
    with pytest.raises(ConfigError, match=r"results/walker2d/search/gru_ode.json: best_config reads later steps on "
                                          r"per-step dataset walker2d .*rerun `ctsweep search walker2d gru_ode`"):
        _check_causal({"lr": 1e-3, "interpolation": "cubic"}, meta, "walker2d", "gru_ode")
    _check_causal({"lr": 1e-3, "interpolation": "hermite_causal"}, meta, "walker2d", "gru_ode")
    _check_causal({"lr": 1e-3, "interpolation": "cubic"}, dataclasses.replace(meta, per_step=False), "x", "gru_ode")
    assert "Eq. 14" in reads_later_steps("cdr_nde_heat", [{"lr": 1e-3}], per_step=True)
    assert reads_later_steps("cdr_nde_heat", [{"lr": 1e-3}], per_step=False) is None
    assert reads_later_steps("gru_ode", [{"interpolation": "hermite_causal"}], per_step=True) is None
