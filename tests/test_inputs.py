"""Model inputs built once: precomputed by prepare, cached by the first trial, equal to a fresh build."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.config import XorParams
from pipeline.data.contract import load_dataset, save_dataset
from pipeline.data.inputs import build_inputs, cache_dir, input_key, load_inputs, precompute
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError
from pipeline.models import get_model_class
from pipeline.training.loop import Trainer, TrainSettings

NRDE = {"hidden_size": 8, "vf_units": 8, "vf_layers": 1, "logsig_depth": 2, "logsig_step": 4, "method": "rk4"}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "data" / "processed" / "x"
    save_dataset(out, build_xor("x", XorParams(kind="xor", n_train=60, n_test=20, seed=2)))
    return out


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_precomputed_log_signatures_equal_a_fresh_build_and_are_used(folder: Path) -> None:
    data = load_dataset(folder)
    key = precompute(folder, data.splits, "nrde", {"logsig_depth": 2, "logsig_step": 4})
    assert key == "logsig-logsig_depth=2-logsig_step=4"
    cls = get_model_class("nrde")
    for name, split in data.splits.items():
        stored = torch.load(folder / "inputs" / key / f"{name}.pt", weights_only=True)
        assert _equal(stored, build_inputs(cls, split, NRDE))
    Trainer("nrde", NRDE, TrainSettings(lr=1e-3, batch_size=16), data, seed=0)
    assert not cache_dir(folder).exists()  # read from what prepare wrote, nothing rebuilt
    # Another step size is not what was precomputed: built once, then cached.
    other = {**NRDE, "logsig_step": 2}
    Trainer("nrde", other, TrainSettings(lr=1e-3, batch_size=16), data, seed=0)
    cached = cache_dir(folder) / input_key(cls, other) / "train.pt"
    assert _equal(torch.load(cached, weights_only=True), build_inputs(cls, data.splits["train"], other))


def test_cache_is_shared_by_families_with_the_same_inputs_and_invalidated_by_new_data(folder: Path) -> None:
    data = load_dataset(folder)
    ncde, cde_fwp = get_model_class("ncde"), get_model_class("cde_fwp_delta")
    first = load_inputs(ncde, "val", data.splits["val"], {}, folder)
    path = cache_dir(folder) / input_key(ncde, {}) / "val.pt"
    assert path.exists() and input_key(cde_fwp, {}) == input_key(ncde, {})
    assert _equal(load_inputs(cde_fwp, "val", data.splits["val"], {"hidden_size": 4}, folder), first)
    save_dataset(folder, build_xor("x", XorParams(kind="xor", n_train=60, n_test=20, seed=3)))
    assert not (cache_dir(folder) / input_key(ncde, {}) / "val.pt").exists()  # new fingerprint


def test_precompute_refuses_arguments_that_do_not_shape_the_inputs(folder: Path) -> None:
    splits = load_dataset(folder).splits
    with pytest.raises(ConfigError, match=r"hidden_size.*allowed: \['logsig_depth', 'logsig_step'\]"):
        precompute(folder, splits, "nrde", {"hidden_size": 8})
    with pytest.raises(ConfigError, match="cfc.*raw"):
        precompute(folder, splits, "cfc", {})
