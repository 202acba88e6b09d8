"""benchmarks/papers/learning_curves.py on fixture data shaped like PhysioNet 2012: the reference is
the final stage's configuration and seed, a variant changes only what it names, the encoding spread
is read from the latent models' encoder. A check of the script, not a measurement."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.papers import learning_curves
from pipeline import profiles
from pipeline.data.contract import save_dataset
from tests.test_profiles import fixture_dataset

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "tw-physionet2012-cpu"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(ROOT / "search_spaces", root / "search_spaces")
    _, params = profiles.load(PROFILE, root / "params.yaml")
    save_dataset(root / "data" / "processed" / "physionet2012",
                 fixture_dataset("physionet2012", params.prepare["physionet2012"]))
    return root


def _main(root: Path, *args: str) -> dict:
    return learning_curves.main(["--root", str(root), "--profile", PROFILE, "--dataset", "physionet2012", *args])


def test_a_variant_changes_only_what_it_names(project: Path, tmp_path: Path) -> None:
    report = _main(project, "--family", "latent_ode_tw", "--epochs", "2",
                   "--variant", "same=sample_z0:true",  # the reference's own value: the same numbers
                   "--variant", "fast=lr:0.5,sample_z0:false", "--out", str(tmp_path))
    ref, same, fast = (report["curves"][k] for k in ("reference", "same", "fast"))
    assert ref["config"]["sample_z0"] is True and ref["final_epochs"] == 31  # the profile's epochs for the schedule
    def numbers(c: dict) -> list[dict]:
        return [{k: v for k, v in e.items() if k != "seconds"} for e in c["epochs"]]
    assert numbers(same) == numbers(ref)  # the same seed and configuration: the same numbers
    assert {k: v for k, v in fast["config"].items() if ref["config"][k] != v} == {"lr": 0.5, "sample_z0": False}
    assert [e["train_loss"] for e in fast["epochs"][1:]] != [e["train_loss"] for e in ref["epochs"][1:]]
    assert [e["epoch"] for e in ref["epochs"]] == [0, 1, 2]
    assert all(e["encoding_spread"] > 0 for e in ref["epochs"])
    assert ref["parameters"] == fast["parameters"] > 0
    saved = json.loads((tmp_path / "learning_curves.json").read_text())
    assert saved["curves"]["fast"]["changes"] == {"lr": 0.5, "sample_z0": False}
    assert "| fast | lr: 0.5, sample_z0: False |" in (tmp_path / "learning_curves.md").read_text()


def test_bad_variants_are_refused_before_training(project: Path, capsys: pytest.CaptureFixture) -> None:
    for bad in ("nochanges", "x=lr", "=lr:0.1"):
        with pytest.raises(SystemExit):
            _main(project, "--family", "latent_ode_tw", "--variant", bad)
        assert "--variant" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main(project, "--family", "latent_ode_tw", "--epochs", "0")
