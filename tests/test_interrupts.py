"""Ctrl-C and `kill` during a real `ctsweep search` (a subprocess driving a local Ray, an SQLite
MLflow store): the stage exits non-zero, the previous result file stays byte for byte, no MLflow
run is left RUNNING, the search stays resumable, and running the command again resumes it,
keeping the trials that had finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.config import XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.stores.paths import processed_dir, search_result_path
from pipeline.sweep.parents import COMPLETE_TAG
from tests.clusters import store_client, watch
from tests.conftest import default_params, write_params

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # minutes here: docs/development/tests.md
EPOCHS = 3
TRIALS = 3
N_TRAIN = 400  # epochs of a fraction of a second: the watch (every 0.2 s) still sees a trial mid-way


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=N_TRAIN, n_test=50, seed=3)))
    raw = default_params()
    raw.update(datasets=["xor"], families=["cfc"], prepare={"xor": {"kind": "xor", "n_train": N_TRAIN, "n_test": 50}})
    # One trial at a time, no early stops: a finished trial and a running one are easy to catch.
    raw["search"] = {"num_samples": TRIALS, "max_concurrent": 1, "epochs": EPOCHS, "n_startup_trials": 1,
                     "asha": {"grace_period": EPOCHS}}
    write_params(project, raw)
    return project


def _driver(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    # A session of its own: the process-group case signals the driver's whole group, as a terminal does.
    return subprocess.Popen(["ctsweep", "search", "xor", "cfc", "--root", str(root)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _runs(root: Path) -> list:
    client = store_client(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name("ctsweep/xor")
    return list(client.search_runs([exp.experiment_id], max_results=1000)) if exp else []


def _children(runs: list) -> list:
    return [r for r in runs if tracking.PARENT_TAG in r.data.tags]


def _epochs(run) -> float:
    return run.data.metrics.get("epoch", 0)


def _one_finished_one_training(runs: list):
    children = _children(runs)
    finished = [r for r in children if _epochs(r) >= EPOCHS]
    training = [r for r in children if 1 <= _epochs(r) < EPOCHS]
    return children if finished and training else None


def _first_trial_started(runs: list):
    children = _children(runs)
    return children if children and all(_epochs(r) == 0 for r in children) else None


# (signal, to the process group, when to send it, resume afterwards). Every case checks what the
# interruption leaves: the old result, no RUNNING run, a parent that is KILLED and not complete.
# Those states are the same whatever the signal, so the rerun that resumes from them is run for
# the two states that differ (a trial finished or none had); the other cases stop at the check.
CASES = {
    "SIGINT": (signal.SIGINT, False, _one_finished_one_training, True),
    "SIGTERM": (signal.SIGTERM, False, _one_finished_one_training, False),
    "SIGINT-twice": (signal.SIGINT, False, _one_finished_one_training, False),
    "SIGINT-to-the-process-group": (signal.SIGINT, True, _one_finished_one_training, False),
    "SIGINT-before-the-first-epoch": (signal.SIGINT, False, _first_trial_started, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_interrupted_search_keeps_the_old_result_and_resumes(root: Path, case: str) -> None:
    sig, group, condition, resume = CASES[case]
    out = search_result_path(root, "xor", "cfc")
    out.parent.mkdir(parents=True)
    out.write_text('{"an earlier search": "its complete result"}\n')
    previous = out.read_bytes()
    driver = _driver(root)
    seen: dict[str, float] = {}

    def interrupt(children: list) -> None:
        seen.update({r.data.tags["ray_trial_id"]: _epochs(r) for r in children})
        for _ in range(2 if case.endswith("twice") else 1):
            if group:
                os.killpg(driver.pid, sig)
            else:
                os.kill(driver.pid, sig)

    watch(lambda: _runs(root), condition, interrupt, timeout_s=300).join(timeout=320)
    _, err = driver.communicate(timeout=300)
    assert seen, f"the driver was not caught mid-search:\n{err[-3000:]}"
    assert driver.returncode == 128 + sig, err[-3000:]
    assert f"interrupted by {signal.Signals(sig).name}" in err.strip().splitlines()[-1]
    assert out.read_bytes() == previous  # the earlier result, byte for byte
    assert not [p for p in out.parent.iterdir() if p.name != out.name]  # no temporary file left
    runs = _runs(root)
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    [parent] = [r for r in runs if tracking.PARENT_TAG not in r.data.tags]
    assert parent.info.status == "KILLED" and COMPLETE_TAG not in parent.data.tags  # resumable
    interrupted = [r for r in _children(runs) if "interrupted" in r.data.tags]
    assert all(r.info.status == "KILLED" for r in interrupted)
    # Finished when the signal was sent (one trial at a time: the next had started, so Tune had seen
    # it end). A trial still training then may log its last epochs before the driver stops, and
    # train again on resume: Tune had not seen its last report.
    ended_before = {r.info.run_id for r in _children(runs) if seen.get(r.data.tags["ray_trial_id"], 0) >= EPOCHS}
    if not resume:
        return

    again = _driver(root)
    stdout, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    assert "(resumed)" in stdout
    record = json.loads(out.read_text())
    assert record["resumed"] and record["n_trials"] == TRIALS and record["n_failed"] == 0
    runs = _runs(root)
    [parent_again] = [r for r in runs if tracking.PARENT_TAG not in r.data.tags]  # the same parent, reopened
    assert parent_again.info.run_id == parent.info.run_id and parent_again.info.status == "FINISHED"
    assert "interrupted" not in parent_again.data.tags
    assert not [r for r in runs if r.info.status == "RUNNING"]
    client = MlflowClient(tracking.tracking_uri(root))
    for run_id in ended_before:  # kept, not trained again
        assert "attempts" not in client.get_run(run_id).data.tags
    for run in _children(runs):  # each epoch once in every trial's history, kept or trained again
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "epoch"))
        assert steps == list(range(1, EPOCHS + 1)), (run.info.run_name, steps)


def test_an_interrupted_final_stage_keeps_the_old_result_and_resumes_its_finished_seeds(
        root: Path, local_ray: None) -> None:
    # The search before the interrupted stage runs here, on the process's shared Ray (local_ray);
    # the `ctsweep final` under test starts a Ray of its own, as a user's command does.
    from pipeline.config import load_params
    from pipeline.final.resume import COMPLETE_TAG as FINAL_COMPLETE
    from pipeline.stores.paths import final_result_path
    from pipeline.sweep.search import search

    raw = default_params()
    raw.update(datasets=["xor"], families=["cfc"], prepare={"xor": {"kind": "xor", "n_train": N_TRAIN, "n_test": 50}})
    raw["search"] = {"num_samples": 1, "max_concurrent": 1, "epochs": 1, "n_startup_trials": 1,
                     "asha": {"grace_period": 1}}
    # Two CPUs a seed on this 2-core machine: one seed at a time, so one finishes before the other.
    raw["final"] = {"seeds": [1, 2], "epochs": EPOCHS, "lr_factors": [], "resources": {"cpu": 2}}
    raw["promote"] = {**raw.get("promote", {}), "seeds_required": 2}
    write_params(root, raw)
    search(root, "xor", "cfc", load_params(root / "params.yaml").search)
    out = final_result_path(root, "xor", "cfc")
    out.parent.mkdir(parents=True)
    out.write_text('{"an earlier final": "its complete result"}\n')
    previous = out.read_bytes()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = ["ctsweep", "final", "xor", "cfc", "--root", str(root)]
    driver = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)

    def seeds(runs: list) -> list:
        return [r for r in runs if r.data.tags.get("stage") == "final" and tracking.PARENT_TAG in r.data.tags]

    def one_seed_done_another_training(runs: list):
        done = [r for r in seeds(runs) if r.info.status == "FINISHED"]
        training = [r for r in seeds(runs) if r.info.status == "RUNNING" and _epochs(r) >= 1]
        return done if done and training else None

    caught: list = []
    watch(lambda: _runs(root), one_seed_done_another_training,
          lambda found: (caught.extend(found), os.kill(driver.pid, signal.SIGTERM)), timeout_s=300).join(timeout=320)
    _, err = driver.communicate(timeout=300)
    assert caught, err[-3000:]
    assert driver.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "interrupted by SIGTERM" in err.strip().splitlines()[-1]
    assert out.read_bytes() == previous and [p.name for p in out.parent.iterdir()] == [out.name]
    runs = [r for r in _runs(root) if r.data.tags.get("stage") == "final"]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    [parent] = [r for r in runs if tracking.PARENT_TAG not in r.data.tags]
    assert parent.info.status == "KILLED" and parent.data.tags["interrupted"] == "interrupted by SIGTERM"
    assert FINAL_COMPLETE not in parent.data.tags

    again = subprocess.run(command, env=env, text=True, capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["resumed"] and record["reused_seeds"] == 1 and record["n_seeds"] == 2
    assert record["mlflow_parent_run_id"] == parent.info.run_id
    assert caught[0].info.run_id in {s["mlflow_run_id"] for s in record["seeds"]}  # kept, not retrained
    runs = [r for r in _runs(root) if r.data.tags.get("stage") == "final"]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    [parent] = [r for r in runs if tracking.PARENT_TAG not in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.data.tags[FINAL_COMPLETE] == "true"
    assert record["model_uri"]  # the best seed's model was logged, from kept weights or fresh ones


def test_an_interrupted_sweep_of_two_families_resumes_both_in_one_tune_run(root: Path) -> None:
    # `ctsweep search xor` (no family: what `dvc repro` runs) searches both families in one Ray
    # Tune run; interrupted while both have trials, the rerun resumes that run with both studies.
    raw = json.loads(json.dumps(default_params()))
    raw.update(datasets=["xor"], families=["cfc", "ode_rnn"],
               prepare={"xor": {"kind": "xor", "n_train": N_TRAIN, "n_test": 50}})
    raw["search"] = {"num_samples": TRIALS, "max_concurrent": 1, "epochs": EPOCHS, "n_startup_trials": 1,
                     "asha": {"grace_period": EPOCHS}}
    write_params(root, raw)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = ["ctsweep", "search", "xor", "--root", str(root)]

    def both_training(runs: list):
        families = {r.data.tags["family"] for r in _children(runs) if _epochs(r) >= 1}
        return runs if families == {"cfc", "ode_rnn"} else None

    driver = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)
    watch(lambda: _runs(root), both_training, lambda _: os.kill(driver.pid, signal.SIGTERM),
          timeout_s=300).join(timeout=320)
    _, err = driver.communicate(timeout=300)
    assert driver.returncode == 128 + signal.SIGTERM, err[-3000:]
    parents = {r.data.tags["family"]: r for r in _runs(root) if tracking.PARENT_TAG not in r.data.tags}
    assert {f: p.info.status for f, p in parents.items()} == {"cfc": "KILLED", "ode_rnn": "KILLED"}
    path = {p.data.tags["ray_experiment_path"] for p in parents.values()}
    assert len(path) == 1  # one Tune run held both

    again = subprocess.run(command, env=env, text=True, capture_output=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("(resumed)") == 2, again.stdout
    for family, parent in parents.items():
        record = json.loads(search_result_path(root, "xor", family).read_text())
        assert record["resumed"] and record["n_trials"] == TRIALS and record["ray_experiment_path"] in path
        assert record["mlflow_parent_run_id"] == parent.info.run_id  # the same parent, reopened
        assert sum(record["optuna_states"].values()) == TRIALS and record["optuna_states"].get("RUNNING", 0) == 0
    assert not [r for r in _runs(root) if r.info.status == "RUNNING"]
