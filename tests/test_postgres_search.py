"""A real search through the cluster's stores on PostgreSQL (issue 33): 8 trial processes at once
on a local Ray, every trial logging through `mlflow server` whose backend is the project's own
PostgreSQL (tests/clusters.py `postgres_server`), the Optuna study kept in PostgreSQL too. The
tracking server is killed (SIGKILL, its whole process group) while all 8 trials run and started
again on the same port a few seconds later.

What a trial does about it: nothing of its own. MLflow's HTTP client retries a failed request
(MLFLOW_HTTP_REQUEST_MAX_RETRIES, 7 by default, with exponential back-off from
MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR 2: about 4 minutes in all before it gives up), the write
blocks meanwhile, and a retried write cannot add a point twice (pipeline/stores/tracking.py: the
same Metric entity logged twice is stored once). So what a trial had logged before the kill was
acknowledged by the server, hence in PostgreSQL, and what it logs during the outage waits and
lands after the restart: every epoch of every trial is there exactly once.

The Optuna URL is given with its password typed in (docs/how-to/postgres.md advises the passfile URL): the
search opens the study with it but writes it nowhere (record, MLflow params and tags: `***`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from pipeline.config import AshaParams, Resources, SearchParams, XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.stores import postgres, tracking
from pipeline.stores.paths import processed_dir, search_result_path
from pipeline.stores.tracking_server import TrackingServer
from pipeline.sweep import run_lookup
from pipeline.sweep.search import search, search_many
from tests.clusters import watch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # minutes here: docs/development/tests.md
TRIALS = 8  # trial processes at once: a local Ray of 2 CPUs, a quarter of a CPU each
EPOCHS = 3  # the kill comes at epoch 0 or 1 of every trial: epochs remain to log after it
DOWN_S = 5  # the tracking server's outage
# How long the restart may take to open its store: on 2 cores beside the 8 trials and the suite's
# other test processes its two workers took 149 s after uvicorn was up (a run beside
# test_determinism and test_distributed), where TrackingServer.start gives up at 90 s. The
# trials' writes wait out MLflow's retries, about 4 minutes, so a restart inside 200 s is one they
# must outlast; the test checks that nothing is lost or doubled, not how fast a server starts.
RESTART_S = 200


def _children(client: MlflowClient) -> list:
    """The child runs of the newest search parent of ctsweep/xor (raises before it exists)."""
    exp = client.get_experiment_by_name("ctsweep/xor")
    parents = [r for r in client.search_runs([exp.experiment_id], filter_string="tags.stage = 'search'",
                                             order_by=["attributes.start_time DESC"])
               if tracking.PARENT_TAG not in r.data.tags]
    return run_lookup.children(client, exp.experiment_id, parents[0].info.run_id)


def test_eight_trials_log_every_epoch_through_a_tracking_server_on_postgres_killed_mid_search(
        project: Path, postgres_server: postgres.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        local_ray: None) -> None:
    xor = build_xor("xor", XorParams(kind="xor", n_train=1600, n_test=50, seed=3))
    save_dataset(processed_dir(project, "xor"), xor)
    server = TrackingServer(tmp_path / "mlflow", backend=postgres_server.url("mlflow"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.start())
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # the shared local Ray of 2 CPUs (tests/conftest.py)
    outage: dict[str, object] = {}

    def all_running_one_epoch_in(runs: list) -> list | None:
        running = [r for r in runs if r.info.status == "RUNNING"]
        return running if len(running) == TRIALS and any(r.data.metrics.get("epoch", 0) >= 1 for r in running) else None

    def kill_and_restart(running: list) -> None:
        outage["epochs_logged"] = sorted(int(r.data.metrics.get("epoch", 0)) for r in running)
        began = time.monotonic()
        server.kill()
        time.sleep(DOWN_S)
        server.start(timeout_s=RESTART_S)
        outage["down_s"] = time.monotonic() - began

    # The Optuna URL with the password typed into it (docs/how-to/postgres.md advises the passfile URL instead):
    # the search must still keep it out of its record, its MLflow tags and the logs.
    password = postgres._passwords(postgres_server.data)["ctsweep"]
    optuna_url = f"postgresql://ctsweep:{password}@127.0.0.1:{postgres_server.port}/optuna"
    client = MlflowClient(server.url)
    watcher = watch(lambda: _children(client), all_running_one_epoch_in, kill_and_restart, every_s=0.5)
    params = SearchParams(num_samples=TRIALS, max_concurrent=TRIALS, round_size=TRIALS, n_startup_trials=TRIALS,
                          epochs=EPOCHS, asha=AshaParams(grace_period=EPOCHS), resources=Resources(cpu=1 / 4),
                          max_failures=0, trial_time_limit_s=None, optuna_storage=optuna_url,
                          storage_path=str(project / "ray_results"))
    try:
        record = search(project, "xor", "cfc", params)
        watcher.join(timeout=120)  # the restart, had the search ended while the server came back
        server.stop()
        server.start()  # read back after a clean restart: what PostgreSQL holds
        assert outage.get("down_s"), "the tracking server was not killed while all trials ran"
        assert any(e < EPOCHS for e in outage["epochs_logged"])  # mid-search: epochs still to log
        assert (record["n_trials"], record["n_failed"]) == (TRIALS, 0)
        assert all(t["status"] == "ok" and t["epochs"] == EPOCHS for t in record["trials"])
        runs = _children(client)
        assert len(runs) == TRIALS and all(r.info.status == "FINISHED" for r in runs)
        for run in runs:  # every epoch of every trial, each once: nothing lost, nothing doubled
            for key in ("epoch", "val_metric", "train_loss"):
                steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
                assert sorted(steps) == list(range(1, EPOCHS + 1)), (run.info.run_name, key, steps)
        assert record["optuna_storage"] == f"postgresql://ctsweep:***@127.0.0.1:{postgres_server.port}/optuna"
        study = optuna.load_study(study_name=record["optuna_study"], storage=postgres_server.url("optuna"))
        assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * TRIALS
        assert {t.user_attrs["mlflow_run_id"] for t in study.trials} == {r.info.run_id for r in runs}
        log = server.log.read_text()
        assert "database is locked" not in log and "deadlock detected" not in log
        secrets = postgres._passwords(postgres_server.data).values()
        parent = client.get_run(record["mlflow_parent_run_id"])
        written = [search_result_path(project, "xor", "cfc").read_text(), log,
                   *(str((r.data.tags, r.data.params)) for r in [parent, *runs])]
        assert not any(p in text for p in secrets for text in written)  # not in anything the search wrote
    finally:
        server.stop()


KEPT = ("status", "best_config", "best_val", "best_val_loss", "best_trial", "n_trials", "n_failed", "optuna_states",
        "asha_rungs", "importance")
TRIAL_KEPT = ("number", "config", "best_val", "best_val_loss", "best_epoch", "epochs", "steps", "status", "error")


def _comparable(record: dict) -> dict:
    """What a record says of its search, without the ids and places of this run's stores."""
    return {**{k: record.get(k) for k in KEPT}, "trials": [{k: t.get(k) for k in TRIAL_KEPT} for t in record["trials"]]}


def test_a_familys_record_is_built_while_the_others_run_and_is_the_record_built_at_the_end(
        project: Path, postgres_server: postgres.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, local_ray: None) -> None:
    """Both stores on servers: the record of the family that ends first (each family has one of
    the 2 slots) is built while the other's trials run, and is the record of the same search
    whose MLflow store is an SQLite file, where every record is built at the end (one writer)."""
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=400, n_test=50, seed=3)))
    server = TrackingServer(tmp_path / "mlflow", backend=postgres_server.url("mlflow"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.start())
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    params = SearchParams(num_samples=2, max_concurrent=1, round_size=1, n_startup_trials=1, epochs=2,
                          asha=AshaParams(grace_period=2), resources=Resources(cpu=1), max_failures=0,
                          trial_time_limit_s=None, optuna_storage=postgres_server.url("optuna"),
                          storage_path=str(project / "ray_results"))
    families = ["cfc", "cdr_nde"]
    try:
        with caplog.at_level(logging.INFO, logger="pipeline.sweep.early_records"):
            early = search_many(project, "xor", families, params)
    finally:
        server.stop()
    built = [r.getMessage() for r in caplog.records if r.name == "pipeline.sweep.early_records"]
    # whichever family ended first (each has a slot of its own), its record did not wait for the other's trials
    assert any(m.split(":")[0] in families and ": its 2 trials have ended" in m
               and not m.endswith("while 0 other trials run") for m in built), built
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pipeline.sweep.early_records"):
        at_end = search_many(project, "xor", families, params, fresh=True)
    assert not [r for r in caplog.records if r.name == "pipeline.sweep.early_records"]
    for family in families:
        assert early[family]["status"] == "ok" and early[family]["n_trials"] == 2
        assert _comparable(early[family]) == _comparable(at_end[family]), family
