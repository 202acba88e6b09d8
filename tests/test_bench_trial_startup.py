"""benchmarks/cluster/trial_startup.py: a trial process's imports timed in fresh interpreters, and a
real MLflow store's start-up tags summed up per stage (first trial of a process apart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.cluster import trial_startup


def _store(path: Path) -> str:
    uri = f"sqlite:///{path}"
    client = MlflowClient(uri)
    exp = client.create_experiment("ctsweep/xor")
    runs = [("search", {"startup_trial_in_process": 1, "startup_worker_s": 3.0, "startup_imports_s": 4.0,
                        "startup_to_trial_s": 0.5, "startup_setup_s": 2.0}),
            ("search", {"startup_trial_in_process": 2, "startup_setup_s": 0.1}),
            ("search", {"startup_trial_in_process": 3, "startup_setup_s": 0.3}),
            ("search", {}),  # a run from before the tags: left out
            ("final", {"startup_trial_in_process": 1, "startup_imports_s": 5.0, "startup_setup_s": 1.0})]
    for stage, tags in runs:
        client.create_run(exp, tags={"stage": stage, **{k: str(v) for k, v in tags.items()}})
    return uri


def test_a_store_s_tags_are_summed_up_per_stage(tmp_path: Path) -> None:
    found = trial_startup.from_store(_store(tmp_path / "mlflow.db"))
    search, final = found["search"], found["final"]
    assert (search["runs"], search["processes"]) == (3, 1)
    assert search["first_median_s"] == {"startup_worker_s": 3.0, "startup_imports_s": 4.0,
                                        "startup_to_trial_s": 0.5, "startup_setup_s": 2.0}
    assert search["first_to_batch_median_s"] == pytest.approx(9.5)
    assert search["later_setup_median_s"] == pytest.approx(0.2)
    assert final["first_median_s"] == {"startup_imports_s": 5.0, "startup_setup_s": 1.0}  # no worker figure: "-"
    assert final["later_setup_median_s"] is None


def test_the_import_probe_runs_and_writes_both_outputs(tmp_path: Path) -> None:
    store = _store(tmp_path / "mlflow.db")
    report = trial_startup.main(["--out", str(tmp_path / "out"), "--repeats", "1", "--store", store])
    assert json.loads((tmp_path / "out" / "trial_startup.json").read_text())["imports"] == report["imports"]
    for probe in report["imports"]:
        assert set(probe["median_s"]) == set(trial_startup.STEPS) and all(v > 0 for v in probe["median_s"].values())
        assert probe["imports_optuna"] is False  # a trial or seed process imports no Optuna
    text = (tmp_path / "out" / "trial_startup.md").read_text()
    assert "`pipeline.sweep.trial`" in text and "| search | 3 | 1 | 3.00 | 4.00 | 0.50 | 2.00 | 9.50 | 0.20 |" in text
    assert "| final | 1 | 1 | - | 5.00 | - | 1.00 | 6.00 | - |" in text
