"""`ctsweep optuna-dashboard` (`make optuna-dashboard`) serves the studies of the store that
params.yaml's `search.optuna_storage` names, SQLite or PostgreSQL, and refuses one it cannot open
in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, params_for_tests


def _project(root: Path, storage: str) -> Path:
    params = yaml.safe_load(params_for_tests((REPO / "params.yaml").read_text()))
    params["search"]["optuna_storage"] = storage
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def _ctsweep(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "ctsweep"), *args]


@pytest.mark.parametrize(("storage", "words"), [
    ("optuna.db", "no study store at"),
    ("params.yaml", "is not an SQLite database"),
])
def test_a_store_it_cannot_serve_is_one_line(tmp_path: Path, storage: str, words: str) -> None:
    root = _project(tmp_path, storage)
    done = subprocess.run(_ctsweep("optuna-dashboard", "--root", str(root)), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_dashboard_serves_a_study_kept_on_postgresql(tmp_path: Path, postgres_server) -> None:
    import optuna

    url = postgres_server.url("optuna")
    study = optuna.create_study(study_name="japanese_vowels/cfc/abc", storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.9))
    root = _project(tmp_path, url)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    server = subprocess.Popen(_ctsweep("optuna-dashboard", "--port", str(port), "--root", str(root)), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, studies = time.monotonic() + 120, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as answer:
                    studies = json.loads(answer.read())
                break
            except OSError:
                time.sleep(0.5)
        assert studies is not None, f"the dashboard did not answer (exit status {server.poll()})"
        assert [s["study_name"] for s in studies["study_summaries"]] == ["japanese_vowels/cfc/abc"], studies
    finally:
        server.terminate()
        server.wait(timeout=30)
