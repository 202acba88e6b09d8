"""The worked example (docs/how-to/worked-example.md), run as written with the real stack and a tiny budget:
its script writes the CSV, its commands make and check the family, its params.yaml lines define
the sweep, `dvc repro` runs it in a temporary project, and the user's family, promoted, predicts
through `models:/ctsweep-my_data@champion` in a fresh process outside the project."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, WORKED_EXAMPLE, doc_blocks, params_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # minutes here: docs/development/tests.md

SECTION = "## Bring your own data and model"
FAMILY, DATASET = "my_gru", "my_data"


def _blocks(language: str) -> list[str]:
    return doc_blocks(SECTION, language, WORKED_EXAMPLE)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # ctsweep and dvc of this venv
    return env


def _run(root: Path, *cmd: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=root, env=env or _env(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def _tiny(params: dict) -> dict:
    """The worked example's sweep with a budget a test can afford (the example's run uses the defaults)."""
    # min_steps 1: the default's step floors would make each of these few epochs many passes
    params["search"].update(num_samples=2, epochs=3, n_startup_trials=1, min_steps=1)
    params["search"]["asha"]["grace_period"] = 3
    params["final"].update(seeds=[0, 1], epochs=3, patience=2, lr_factors=[], min_steps=1)
    params["promote"]["seeds_required"] = 2
    return params


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("byo")
    for folder in ("search_spaces", "pipeline"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "references.yaml", "params.yaml"):
        shutil.copy(REPO / name, root / name)
    (root / "data").mkdir()
    _run(root, "git", "init", "-q")
    _run(root, "dvc", "init", "-q")
    [script] = _blocks("python")[:1]
    _run(root, sys.executable, "-c", script)
    out = ""
    for line in _blocks("bash")[0].splitlines():  # ctsweep new-family, ctsweep check-family
        out += _run(root, *shlex.split(line.split("#")[0]))
    # a fixed budget: two trials cannot hold a saturating search's first rounds (params_for_tests)
    params = yaml.safe_load(params_for_tests((root / "params.yaml").read_text()))
    params.update(yaml.safe_load(_blocks("yaml")[0]))  # datasets, families, prepare
    (root / "params.yaml").write_text(yaml.safe_dump(_tiny(params), sort_keys=False))
    for line in _blocks("bash")[1].splitlines():  # dvc repro, ctsweep predict
        if line.startswith("ctsweep predict"):
            # The champion is the user's family, whatever the rule made of a budget this small (by hand,
            # as docs/getting-started/status-promote-predict.md shows), so the rest checks its model.
            out += _run(root, "ctsweep", "promote", "--dataset", DATASET, "--family", FAMILY, "--force")
        out += _run(root, *shlex.split(line.split("#")[0]))
    return root, out


def test_the_worked_example_runs_the_user_s_family_beside_the_built_in_ones(example: tuple[Path, str]) -> None:
    root, out = example
    assert f"{FAMILY}: 8 of 8 checks passed" in out
    assert (root / "data" / "raw" / DATASET / "my_data.csv").read_bytes() == (root / "data" / "my_data.csv").read_bytes()
    lock = json.loads((root / "data" / "raw.lock").read_text())
    assert any(k.startswith(f"local:{DATASET}/") for k in lock)
    metrics = json.loads((root / "reports" / "metrics.json").read_text())[DATASET]
    families = yaml.safe_load(_blocks("yaml")[0])["families"]
    assert FAMILY in families and set(metrics) == set(families)
    assert metrics[FAMILY]["status"] == "ok" and metrics[FAMILY]["n_seeds"] == 2 and metrics[FAMILY]["n_parameters"] > 0
    searched = json.loads((root / "results" / DATASET / "search" / f"{FAMILY}.json").read_text())
    assert searched["reference"] == {"lr": 0.005, "hidden_size": 32}  # the template's space, tried first
    assert FAMILY in (root / "reports" / "results.md").read_text()


def test_the_user_s_champion_predicts_through_the_registry_outside_the_project(
        example: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = example
    predicted = list(csv.DictReader((root / "predictions.csv").open()))
    assert [r["series"] for r in predicted] == [f"s{i}" for i in range(300, 320)]
    assert {r["prediction"] for r in predicted} <= {"down", "up"}
    # A fresh interpreter elsewhere: no project on sys.path, no CTSWEEP_USER_FAMILIES, only the registry.
    code = textwrap.dedent(f"""
        import json, mlflow, pandas as pd
        from mlflow import MlflowClient
        mlflow.set_tracking_uri("sqlite:///{root / 'mlflow.db'}")
        version = MlflowClient().get_model_version_by_alias("ctsweep-{DATASET}", "champion")
        model = mlflow.pyfunc.load_model("models:/ctsweep-{DATASET}@champion")
        frame = pd.read_csv("{root / 'data' / 'new_series.csv'}")
        print(json.dumps({{"family": version.tags.get("family"), "p": model.predict(frame).tolist()}}))
    """)
    env = {k: v for k, v in _env().items() if k not in ("CTSWEEP_USER_FAMILIES", "PYTHONPATH")}
    done = json.loads(_run(tmp_path, sys.executable, "-c", code, env=env).splitlines()[-1])
    assert done["family"] == FAMILY
    classes = [c.removeprefix("p_") for c in predicted[0] if c.startswith("p_")]
    assert classes == ["down", "up"]
    expected = [[float(r[f"p_{c}"]) for c in classes] for r in predicted]
    assert max(abs(a - b) for got, want in zip(done["p"], expected) for a, b in zip(got, want)) < 1e-5
