"""Faults a long search meets on one machine, each really caused: a trial process SIGKILLed
mid-training, a full disk and a read-only output path. (A NaN loss or a solver underflow:
tests/test_search.py; nodes and drivers killed on a Ray cluster: tests/test_cluster.py.)"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.sweep import run_lookup
from pipeline.config import AshaParams, SearchParams, XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import OutputError
from pipeline.stores.files import check_writable, write_json
from pipeline.stores.paths import processed_dir, search_result_path
from pipeline.sweep.search import search
from tests.clusters import store_client, watch

EPOCHS = 5


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # About a second per cfc epoch on one core: long enough to be caught mid-training.
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=1600, n_test=50, seed=3)))
    return project


def _params(**change) -> SearchParams:
    base = dict(num_samples=1, max_concurrent=1, epochs=EPOCHS, n_startup_trials=1, max_failures=1,
                asha=AshaParams(grace_period=EPOCHS), checkpoint_every_s=0)  # a checkpoint every epoch to resume from
    return SearchParams(**{**base, **change})


def _children(root: Path, dataset: str) -> list:
    client = store_client(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name(f"ctsweep/{dataset}")
    return [r for r in client.search_runs([exp.experiment_id]) if tracking.PARENT_TAG in r.data.tags]


def _when(root: Path, condition: Callable[[list], object], action: Callable[[object], None]) -> threading.Thread:
    """Act once on the search's child runs when `condition` finds what it waits for."""
    return watch(lambda: _children(root, "xor"), condition, action, timeout_s=300)


def _epochs(run) -> float:
    return run.data.metrics.get("epoch", 0)


@pytest.mark.slow
@pytest.mark.parametrize("every_s", [0, 3600], ids=["checkpoint-every-epoch", "no-checkpoint-yet"])
def test_a_sigkilled_trial_is_retried_from_its_last_checkpoint(root: Path, every_s: float) -> None:
    """`search.checkpoint_every_s` 0: the retry starts from the epoch last checkpointed; 3600 (no
    checkpoint within the trial's seconds): it trains again from the start, into the same run."""
    killed: dict[str, object] = {}

    def mid_training(runs: list):
        # From epoch 2: a trial logs an epoch to MLflow just before it reports that epoch's checkpoint
        # to Tune, so at epoch 1 in MLflow there may be no checkpoint yet to resume from.
        return next((r for r in runs if 2 <= _epochs(r) < EPOCHS - 1), None)

    def kill(run) -> None:
        killed.update(pid=int(run.data.tags["pid"]), epoch=_epochs(run), run_id=run.info.run_id)
        os.kill(killed["pid"], signal.SIGKILL)

    watcher = _when(root, mid_training, kill)
    record = search(root, "xor", "cfc", _params(checkpoint_every_s=every_s))
    watcher.join(timeout=5)
    assert killed, "the trial finished before it could be killed"
    trial = record["trials"][0]
    assert record["n_failed"] == 0 and trial["status"] == "ok" and trial["epochs"] == EPOCHS
    client = MlflowClient(tracking.tracking_uri(root))
    run = client.get_run(killed["run_id"])
    assert run.data.tags["attempts"] == "2"
    assert int(run.data.tags["pid"]) != killed["pid"]  # a new process ...
    if every_s == 0:
        resumed = int(run.data.tags["resumed_from_epoch"])
        assert 1 <= resumed <= killed["epoch"] + 1  # ... that started from a checkpoint, not from scratch
    else:
        assert "resumed_from_epoch" not in run.data.tags  # ... that had no checkpoint: from scratch
    # One MLflow run holds the whole curve, each epoch once: the epochs the killed attempt had logged
    # and the retry trained again (all of them from scratch) are not logged twice.
    steps = [m.step for m in client.get_metric_history(killed["run_id"], "val_metric")]
    assert sorted(steps) == list(range(1, EPOCHS + 1)), steps
    assert len(_children(root, "xor")) == 1


# --- disk full and read-only outputs: a real tmpfs (this suite runs as root, as CI does) ---------

def _mount(folder: Path, options: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], check=True, capture_output=True)


def _fill(folder: Path) -> None:
    """Write until the filesystem has no byte left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "small"
    _mount(folder, "size=2m")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_keeps_the_old_output_whole_and_leaves_no_partial_file(small_disk: Path) -> None:
    out = small_disk / "results" / "search.json"
    write_json(out, {"best_val": 0.5})
    _fill(small_disk)
    with pytest.raises(OutputError, match=f"cannot write {out}: no space left on the device"):
        write_json(out, {"best_val": 0.9, "trials": ["x" * 1000] * 1000})
    assert out.read_text() == '{\n  "best_val": 0.5\n}\n'
    assert sorted(p.name for p in out.parent.iterdir()) == ["search.json"]  # no temporary left behind


def test_a_read_only_output_path_is_refused_before_anything_starts(root: Path) -> None:
    results = root / "results"
    _mount(results, "ro,size=1m")
    try:
        with pytest.raises(OutputError, match=r"cannot write to .*results/xor/search|read-only filesystem"):
            search(root, "xor", "cfc", _params())
        assert not ray.is_initialized()
        assert not (root / "mlflow.db").exists()
    finally:
        subprocess.run(["umount", "-l", str(results)], check=False)


def test_a_full_disk_is_refused_before_anything_starts(root: Path) -> None:
    results = root / "results"
    _mount(results, "size=512k")
    try:
        _fill(results)
        with pytest.raises(OutputError, match="no space left on the device"):
            check_writable(results / "xor" / "search")
        with pytest.raises(OutputError, match="no space left on the device"):
            search(root, "xor", "cfc", _params())
        assert not ray.is_initialized()
    finally:
        subprocess.run(["umount", "-l", str(results)], check=False)


@pytest.mark.slow
def test_a_disk_that_fills_during_the_search_loses_nothing_and_a_rerun_resumes(root: Path) -> None:
    results = root / "results"
    _mount(results, "size=4m")
    try:
        def any_epoch(runs: list):
            return next((r for r in runs if _epochs(r) >= 1), None)

        watcher = _when(root, any_epoch, lambda _: _fill(results))  # the disk fills while trials train
        with pytest.raises(OutputError, match="no space left on the device"):
            search(root, "xor", "cfc", _params(num_samples=2, max_concurrent=2, epochs=3,
                                                   asha=AshaParams(grace_period=3)))
        watcher.join(timeout=5)
        out = search_result_path(root, "xor", "cfc")
        assert not out.exists() and not list(out.parent.glob(".*"))  # nothing half-written
        trained = {r.info.run_id: _epochs(r) for r in _children(root, "xor")}
        assert len(trained) == 2 and set(trained.values()) == {3}
        (results / "filler").unlink()  # the user frees space and runs the stage again
        record = search(root, "xor", "cfc", _params(num_samples=2, max_concurrent=2, epochs=3,
                                                        asha=AshaParams(grace_period=3)))
        assert record["resumed"] and record["n_trials"] == 2 and out.exists()
        # the resumed search trained nothing again: the same two runs, each with its 3 epochs once
        assert {r.info.run_id for r in _children(root, "xor")} == set(trained)
        client = MlflowClient(tracking.tracking_uri(root))
        for run_id in trained:
            assert len(client.get_metric_history(run_id, "epoch")) == 3
    finally:
        subprocess.run(["umount", "-l", str(results)], check=False)
