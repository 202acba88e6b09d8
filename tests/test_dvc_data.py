"""Raw downloads under the real `dvc repro`: fetched once from a mirror, never again while the
files are there, re-verified in place (not re-downloaded) when the dataset's params change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import test_data_person_activity as person
from tests.conftest import REPO, default_params, write_params

pytestmark = pytest.mark.slow
STAGE = "prepare@person_activity"


def _run(root: Path, source: str, *cmd: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["CTSWEEP_DATA_SOURCE"] = source  # a cluster without internet points at its mirror
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _downloads(server) -> int:
    return sum(1 for path, _ in server.requests if path.endswith("ConfLongDemo_JSI.txt"))


def test_dvc_repro_fetches_once_and_reverifies_on_param_change(tmp_path: Path, http_server) -> None:
    lines, _ = person.person_lines()
    person.write_person(http_server.root, lines)
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO / "search_spaces", root / "search_spaces")
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    params = default_params()
    params["datasets"] = ["person_activity"]
    write_params(root, params)
    _run(root, http_server.url, "git", "init", "-q")
    _run(root, http_server.url, "dvc", "init", "-q")

    _run(root, http_server.url, "dvc", "repro", STAGE)
    assert _downloads(http_server) == 1
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    assert [o["path"] for o in lock["fetch@person_activity"]["outs"]] == ["data/raw/person_activity"]
    recorded = json.loads((root / "data" / "raw.lock").read_text())
    assert list(recorded) == ["https://archive.ics.uci.edu/ml/machine-learning-databases/00196/ConfLongDemo_JSI.txt"]

    out = _run(root, http_server.url, "dvc", "repro", STAGE)
    assert "didn't change" in out and _downloads(http_server) == 1

    params["prepare"]["person_activity"]["stride"] = 8  # a preprocessing change ...
    write_params(root, params)
    _run(root, http_server.url, "dvc", "repro", STAGE)
    assert _downloads(http_server) == 1  # ... reruns prepare; the raw file is only re-verified
    meta = json.loads((root / "data" / "processed" / "person_activity" / "meta.json").read_text())
    assert sum(meta["sizes"].values()) > 0
    assert _run(root, http_server.url, "dvc", "status", STAGE).strip() == "Data and pipelines are up to date."
