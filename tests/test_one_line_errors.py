"""One-line errors are one line in a real process (issue 14, part 6): nothing a library prints on
import or on loading a model (MLflow's "Add type hints" warning was one) comes before them.

Each test runs the installed `ctsweep` as a subprocess, since typer's in-process runner would
miss warnings already printed (and then suppressed) by an earlier import in the test session.
The `final` case (not marked slow) imports pipeline.serving.pyfunc as `predict` does, so it also guards
the pyfunc class against MLflow's import-time warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.stores.paths import processed_dir, search_result_path
from tests.test_predict import METAS, _register, _series

CTSWEEP = Path(sys.executable).with_name("ctsweep")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONWARNINGS")}
    command = [str(CTSWEEP)] if CTSWEEP.exists() else [sys.executable, "-m", "pipeline.cli.app"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_failing_final_prints_exactly_one_line(project: Path) -> None:
    processed_dir(project, "japanese_vowels").mkdir(parents=True)
    path = search_result_path(project, "japanese_vowels", "cfc")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"metric": "accuracy", "mode": "max", "best_config": {"lr": 1e-3}})[:40])
    done = _run("final", "japanese_vowels", "cfc", "--root", str(project))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"ctsweep: error: {path} is corrupt (truncated JSON at line 1); rebuild it with "
        f"`ctsweep search japanese_vowels cfc` (or `dvc repro`)"], done.stderr


@pytest.fixture
def registered(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`project` with a registered champion for dataset `toy` (a real untrained CfC)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _register(project, METAS["toy"])
    return project


@pytest.mark.slow  # ~15 s: a registered model, then a process that imports torch, MLflow and loads it
def test_a_failing_predict_prints_exactly_one_line_after_loading_the_model(registered: Path) -> None:
    s = _series()
    x = s.x.copy()
    x[1] = np.nan  # series s2: nothing observed
    path, out = registered / "s.npz", registered / "out.csv"
    np.savez(path, x=x, t=s.t, mask=s.mask, ids=np.array(s.ids))
    done = _run("predict", "toy", str(path), "--out", str(out), "--root", str(registered))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.splitlines() == [
        f"ctsweep: error: {path}: refused, nothing was predicted: no value at all (every channel missing at "
        f"every step) in 1 of 3 series ('s2')"], done.stderr


@pytest.mark.slow
def test_a_predict_warning_is_one_line_too(registered: Path) -> None:
    s = _series()
    x = s.x.copy()
    x[2, 0, 1] = 100.0  # channel b: training mean -2, std 0.5 -> about 204 std: warned, not refused (>1000)
    path, out = registered / "s.npz", registered / "out.csv"
    np.savez(path, x=x, t=s.t, mask=s.mask, ids=np.array(s.ids))
    done = _run("predict", "toy", str(path), "--out", str(out), "--root", str(registered))
    assert done.returncode == 0 and out.exists(), done.stderr
    warning, written = done.stderr.splitlines()
    assert warning.startswith(f"ctsweep: warning: {path}: 2 value(s) in 2 of 3 series ('s2', 's3')"), warning
    assert written == f"3 prediction row(s) -> {out}"
