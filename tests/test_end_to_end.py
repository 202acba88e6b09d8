"""The real stack end to end: `dvc repro` runs prepare -> search (Ray Tune + Optuna) -> final
(Ray) -> report -> promote (MLflow registry) on a tiny profile in a temporary project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from pipeline.data.contract import load_dataset
from tests.conftest import REPO, default_params, write_params

pytestmark = pytest.mark.slow

DATASET = "japanese_vowels_drop30"
FAMILIES = ["cfc", "ncde"]
TRIALS, SEEDS = 3, [0, 1, 2]


def _tiny_params() -> dict:
    raw = default_params()
    raw.update(datasets=[DATASET], families=FAMILIES)
    raw["search"].update(num_samples=TRIALS, epochs=2, n_startup_trials=1)
    raw["search"]["asha"]["grace_period"] = 1
    raw["final"].update(seeds=SEEDS, epochs=2)
    raw["promote"]["seeds_required"] = len(SEEDS)
    return raw


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # ctsweep and dvc of this venv
    return env


def _run(root: Path, *cmd: str) -> str:
    done = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def repro(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(REPO / "search_spaces", root / "search_spaces")
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    write_params(root, _tiny_params())
    _run(root, "git", "init", "-q")
    _run(root, "dvc", "init", "-q")
    return root, _run(root, "dvc", "repro")


def _runs(client: MlflowClient, stage: str, child: bool) -> list:
    exp = client.get_experiment_by_name(f"ctsweep/{DATASET}")
    runs = client.search_runs([exp.experiment_id], f"tags.stage = '{stage}'", max_results=1000)
    return [r for r in runs if ("mlflow.parentRunId" in r.data.tags) == child]


def test_outputs_and_tables(repro: tuple[Path, str]) -> None:
    root, _ = repro
    metrics = json.loads((root / "reports" / "metrics.json").read_text())
    assert set(metrics[DATASET]) == set(FAMILIES)
    for family, m in metrics[DATASET].items():
        assert m["n_seeds"] == len(SEEDS) and m["n_trials"] == TRIALS and 0 <= m["test_mean"] <= 1
        assert m["params"] > 0 and m["seconds_per_epoch"] > 0
        searched = json.loads((root / "results" / DATASET / "search" / f"{family}.json").read_text())
        assert searched["optuna_states"].get("RUNNING", 0) == 0
        assert sum(searched["optuna_states"].values()) == TRIALS
        reference = searched["reference"]  # the paper's configuration was among the trials
        assert any(all(t["config"].get(k) == v for k, v in reference.items()) for t in searched["trials"])
    table = (root / "reports" / "results.md").read_text()
    assert all(f in table for f in FAMILIES) and "±" in table
    for kind in ("curves", "lr"):
        assert (root / "reports" / "plots" / f"{DATASET}_{kind}.png").stat().st_size > 1000


def test_mlflow_has_every_trial_and_seed(repro: tuple[Path, str]) -> None:
    root, _ = repro
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    trials = _runs(client, "search", child=True)
    assert len(trials) == TRIALS * len(FAMILIES)
    assert {r.info.status for r in trials} <= {"FINISHED", "KILLED"}  # KILLED: stopped early by ASHA
    assert all(r.data.tags["seed"] == "1000" and "val_metric" in r.data.metrics for r in trials)
    seeds = _runs(client, "final", child=True)
    assert sorted((r.data.tags["family"], int(r.data.tags["seed"])) for r in seeds) == sorted(
        (f, s) for f in FAMILIES for s in SEEDS)
    assert all(r.info.status == "FINISHED" and "final_test" in r.data.metrics for r in seeds)
    assert len(_runs(client, "search", child=False)) == len(FAMILIES)
    assert len(_runs(client, "final", child=False)) == len(FAMILIES)


def test_champion_loads_and_predicts(repro: tuple[Path, str]) -> None:
    root, _ = repro
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    version = MlflowClient().get_model_version_by_alias(f"ctsweep-{DATASET}", "champion")
    assert version.tags["family"] in FAMILIES and int(version.tags["n_seeds"]) == len(SEEDS)
    model = mlflow.pyfunc.load_model(f"models:/ctsweep-{DATASET}@champion")
    test = load_dataset(root / "data" / "processed" / DATASET)
    meta, split = test.meta, test.splits["test"]
    # the pyfunc model takes series in original units: undo the stored standardisation
    raw_x = split.x[:16] * np.asarray(meta.norm_std, np.float32) + np.asarray(meta.norm_mean, np.float32)
    probs = model.predict({"x": raw_x, "t": split.t[:16], "mask": split.mask[:16]})
    assert probs.shape == (16, 9) and np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    promotion = json.loads((root / "reports" / "promotion.json").read_text())
    assert promotion[0]["alias_moved"] and promotion[0]["champion_version"] == int(version.version)


def test_second_repro_does_nothing_and_one_space_reruns_one_family(repro: tuple[Path, str]) -> None:
    root, first = repro
    assert "Running stage" in first
    again = _run(root, "dvc", "repro")
    assert "Running stage" not in again
    space = root / "search_spaces" / "ncde.yaml"
    space.write_text(space.read_text().replace("high: 128, step: 16}", "high: 112, step: 16}", 1))
    rerun = _run(root, "dvc", "repro")
    for stage in (f"search@{DATASET}-ncde", f"final@{DATASET}-ncde", "report", "promote"):
        assert f"Running stage '{stage}'" in rerun
    for stage in (f"prepare@{DATASET}", f"search@{DATASET}-cfc", f"final@{DATASET}-cfc"):
        assert f"Running stage '{stage}'" not in rerun
