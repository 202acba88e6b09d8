"""Searches on a real multi-node Ray cluster on this machine (`ray start` head and worker nodes
with token authentication, an `mlflow server` over the project's PostgreSQL, the Optuna studies
there too: the multi-node recipe of docs/how-to/cluster.md): the stores a cluster cannot share are refused,
requests no node can meet fail at once, a killed worker node's trial is rescheduled, and a
killed driver's search resumes with Tuner.restore when the stage runs again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
from mlflow.tracking import MlflowClient

from pipeline.stores import postgres, tracking
from pipeline.sweep import run_lookup
from pipeline.config import AshaParams, Resources, ResourceOverride, SearchParams, XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError, ResourceError
from pipeline.stores.paths import processed_dir
from pipeline.sweep.search import search
from tests.clusters import RayCluster, fresh_database, mlflow_server, store_client, watch
from tests.conftest import default_params, write_params

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # minutes here: docs/development/tests.md
EPOCHS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A head node with one CPU; tests add (and kill) worker nodes."""
    c = RayCluster(head_cpus=1, log_dir=tmp_path_factory.mktemp("ray-logs"))
    try:
        c.wait_for(1)
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, postgres_session: postgres.Server) -> Iterator[str]:
    """The multi-node recipe's tracking server (docs/how-to/cluster.md): `mlflow server`
    over the project's own PostgreSQL, artifacts proxied; its database is the module's own (the
    tests' `postgres_server` renews mlflow and optuna for each test)."""
    backend = fresh_database(postgres_session, "mlflow_cluster")
    with mlflow_server(tmp_path_factory.mktemp("mlflow"), backend=backend) as url:
        yield url


@pytest.fixture
def worker(cluster: RayCluster) -> Iterator[subprocess.Popen]:
    """A second node with one CPU, killed (if still alive) after the test."""
    proc = cluster.add_node(cpus=1)
    yield proc
    if proc.poll() is None:
        cluster.kill_node(proc)
    cluster.wait_for(1)


@pytest.fixture
def root(project: Path, cluster: RayCluster, server: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=1600, n_test=50, seed=3)))
    return project


@pytest.fixture
def params(postgres_server: postgres.Server) -> Callable[..., SearchParams]:
    """The searches' settings: the recipe's Optuna storage (the project's PostgreSQL, which the
    driver on the head writes) and shared trial storage; `params(root, **change)`."""
    def make(root: Path, **change) -> SearchParams:
        base = dict(num_samples=2, max_concurrent=2, epochs=EPOCHS, n_startup_trials=1, max_failures=2,
                    asha=AshaParams(grace_period=EPOCHS), storage_path=str(root / "shared" / "ray_results"),
                    checkpoint_every_s=0,  # a checkpoint every epoch: the killed trials resume from one
                    optuna_storage=postgres_server.url("optuna"))
        return SearchParams(**{**base, **change})

    return make


def _children(uri: str, parent: str) -> list:
    client = MlflowClient(uri)
    return run_lookup.children(client, client.get_run(parent).info.experiment_id, parent)


def _search_parents(uri: str) -> list:
    client = store_client(uri)
    exp = client.get_experiment_by_name("ctsweep/xor")
    return [r for r in client.search_runs([exp.experiment_id], filter_string="tags.stage = 'search'")
            if tracking.PARENT_TAG not in r.data.tags] if exp else []


def _epochs(run) -> float:
    return run.data.metrics.get("epoch", 0)


def _watch(uri: str, condition: Callable[[list], object], action: Callable[[object], None]) -> threading.Thread:
    """Act once on the children of the newest search parent run when `condition` finds what it waits for."""
    def runs() -> list:
        parents = sorted(_search_parents(uri), key=lambda r: r.info.start_time)
        return _children(uri, parents[-1].info.run_id)

    return watch(runs, condition, action, every_s=0.3)


def test_stores_a_cluster_cannot_share_and_impossible_requests_are_refused_at_once(
        root: Path, server: str, worker: subprocess.Popen, params: Callable[..., SearchParams],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the default: SQLite on the head's disk
    with pytest.raises(ConfigError, match="2 nodes but the MLflow tracking store is local.*mlflow-server"):
        search(root, "xor", "cfc", params(root))
    assert not ray.is_initialized()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    with pytest.raises(ConfigError, match="`search.storage_path` is 'ray_results', a folder on this machine"):
        search(root, "xor", "cfc", params(root, storage_path="ray_results"))
    start = time.monotonic()
    with pytest.raises(ResourceError, match=r"`search.resources` asks for cpu=1, gpu=1.*GPU=0"):
        search(root, "xor", "cfc", params(root, resources=Resources(gpu=1)))
    with pytest.raises(ResourceError, match=r"`search.family_resources.cfc` asks for cpu=1, gpu=0 for each of 3"):
        search(root, "xor", "cfc", params(root, family_resources={"cfc": ResourceOverride(workers=3)}))
    assert time.monotonic() - start < 60  # told at once, not PENDING forever
    assert not _search_parents(server)  # nothing started


def test_a_killed_worker_node_s_trial_is_rescheduled_and_the_search_completes(
        root: Path, cluster: RayCluster, worker: subprocess.Popen, params: Callable[..., SearchParams]) -> None:
    uri = os.environ["MLFLOW_TRACKING_URI"]
    killed: dict[str, object] = {}

    def on_the_worker_mid_training(runs: list):
        # Epoch 2 logged, not 1: a trial logs an epoch to MLflow before it reports it, and Tune registers
        # the reported checkpoint in a second call to the trial (`save`). A kill between the two loses that
        # checkpoint (Ray restarts from the one before: none after epoch 1; CI saw it). Epoch 1's checkpoint
        # has had a whole epoch to register once epoch 2 is logged.
        head = {n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"]}
        return next((r for r in runs if r.data.tags.get("ray_node_id") not in head and 2 <= _epochs(r) < EPOCHS), None)

    def kill(run) -> None:
        killed.update(run_id=run.info.run_id, epoch=_epochs(run), node=run.data.tags["ray_node_id"])
        cluster.kill_node(worker)

    watcher = _watch(uri, on_the_worker_mid_training, kill)
    record = search(root, "xor", "cfc", params(root))
    watcher.join(timeout=5)
    assert killed, "no trial was caught on the worker node"
    assert record["n_trials"] == 2 and record["n_failed"] == 0
    assert all(t["status"] == "ok" and t["epochs"] == EPOCHS for t in record["trials"])
    run = MlflowClient(uri).get_run(killed["run_id"])
    assert int(run.data.tags["attempts"]) >= 2
    assert run.data.tags["ray_node_id"] != killed["node"]  # it finished on the node that was left
    assert int(run.data.tags.get("resumed_from_epoch", 0)) >= 1  # from the checkpoint on shared storage


def _tune_snapshot(uri: str, earlier: set[str]) -> dict[str, str]:
    """Trial id -> status in the last experiment state Tune wrote before the driver died."""
    [parent] = [r for r in _search_parents(uri) if r.info.run_id not in earlier]
    files = sorted(Path(parent.data.tags["ray_experiment_path"]).glob("experiment_state-*.json"),
                   key=lambda f: f.stat().st_mtime)
    assert files, f"Tune wrote no experiment state under {parent.data.tags['ray_experiment_path']}"
    trials = [json.loads(state) for state, _ in json.loads(files[-1].read_text())["trial_data"]]
    return {t["trial_id"]: t["status"] for t in trials}


def _driver(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen(["ctsweep", "search", "xor", "cfc"], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_a_killed_driver_s_search_resumes_where_it_stopped(
        root: Path, worker: subprocess.Popen, params: Callable[..., SearchParams]) -> None:
    uri = os.environ["MLFLOW_TRACKING_URI"]
    raw = default_params()
    raw.update(datasets=["xor"], families=["cfc"], prepare={"xor": {"kind": "xor", "n_train": 1600, "n_test": 50}})
    raw["search"] = params(root, num_samples=4, asha=AshaParams(grace_period=2)).model_dump()
    write_params(root, raw)
    earlier = {r.info.run_id for r in _search_parents(uri)}  # the module's other tests share the server
    first = _driver(root)
    before: dict[str, float] = {}

    def one_done_another_running(runs: list):
        done = [r for r in runs if _epochs(r) >= EPOCHS]
        return runs if done and len(runs) > len(done) else None

    def kill(runs: list) -> None:
        before.update({r.data.tags["ray_trial_id"]: _epochs(r) for r in runs})
        os.kill(first.pid, signal.SIGKILL)  # the driver only: its trials die with it, as on a crash

    _watch(uri, one_done_another_running, kill).join(timeout=600)
    first.wait(timeout=60)
    assert before, f"the driver was not caught mid-search:\n{first.stdout.read()[-3000:]}"
    snapshot = _tune_snapshot(uri, earlier)
    second = _driver(root)
    out, _ = second.communicate(timeout=900)
    assert second.returncode == 0, out[-5000:]
    assert "(resumed)" in out
    [parent] = [r for r in _search_parents(uri) if r.info.run_id not in earlier]  # the same one, reopened
    assert parent.info.status == "FINISHED" and parent.data.tags["attempts"] == "2"
    record = json.loads((root / "results" / "xor" / "search" / "cfc.json").read_text())
    trial_ids = {t["trial_id"] for t in record["trials"]}
    assert len(trial_ids) == record["n_trials"] == 4
    runs = _children(uri, parent.info.run_id)
    kept = [r for r in runs if r.data.tags["ray_trial_id"] in trial_ids]
    assert {r.data.tags["ray_trial_id"] for r in kept} == trial_ids and len(kept) == 4  # one run per trial
    for run in runs:  # a trial started just before the kill, never snapshotted by Tune, is closed as such
        assert run in kept or (run.data.tags.get("orphaned") == "true" and run.info.status == "KILLED")
    client = MlflowClient(uri)
    epochs_of = {t["trial_id"]: t["epochs"] for t in record["trials"]}
    assert any(before.get(tid, 0) >= EPOCHS for tid in trial_ids)  # the kill came after a trial finished
    for run in kept:
        tid = run.data.tags["ray_trial_id"]
        history = client.get_metric_history(run.info.run_id, "epoch")
        if snapshot.get(tid) == "TERMINATED":  # finished (or stopped by ASHA) in Tune's last snapshot: not rerun
            steps = [m.step for m in sorted(history, key=lambda m: m.timestamp)]
            assert steps == list(range(1, len(steps) + 1)) and "attempts" not in run.data.tags, (tid, steps)
            assert len(steps) in (2, EPOCHS) and len(steps) == epochs_of[tid], (tid, steps, epochs_of[tid])
        elif "attempts" in run.data.tags:  # rerun from its last snapshotted checkpoint, not from the start
            # Tune snapshots its experiment at least 10 s apart: a trial can log epochs (even its last) after
            # the snapshot that is restored. The rerun trains again the epochs after the checkpoint that
            # snapshot held, and logs only those the first attempt had not: each epoch once, in order.
            resumed = int(run.data.tags.get("resumed_from_epoch", 0))
            steps = [m.step for m in sorted(history, key=lambda m: m.timestamp)]
            assert steps == list(range(1, len(steps) + 1)) and steps[-1] == epochs_of[tid], (tid, resumed, steps)
            assert resumed <= len(steps) and len(steps) >= before.get(tid, 0), (tid, resumed, steps)
    assert record["resumed"]
    assert record["ray_experiment_path"] == parent.data.tags["ray_experiment_path"]
    # ASHA's rung at epoch 2 knows every trial that reached it, the first attempt's included
    reached = sum(t["epochs"] >= 2 for t in record["trials"])
    assert record["asha_rungs"]["2"] == reached
