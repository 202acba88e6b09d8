"""Data-parallel trials: two gloo workers on CPU train exactly what one process trains.

The Trainer's sharding is checked against a single process with plain torch.distributed (two
spawned processes); the Ray path (a Tune trial driving a Ray Train TorchTrainer) is checked for
what Tune and MLflow receive, for resuming from its checkpoint, and for failing loudly.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mlflow.tracking import MlflowClient
from ray import cloudpickle, tune
from ray.tune.schedulers import ASHAScheduler
from torch.nn.parallel import DistributedDataParallel

from pipeline.stores import tracking
from pipeline.config import XorParams
from pipeline.data.contract import Dataset, Split, load_dataset, save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.sweep.distributed import DRIVER_RESOURCES, STATE_FILE, check_state_api, run_data_parallel
from pipeline.errors import ConfigError, TrialFailedError
from pipeline.spaces import split_config
from pipeline.training.loop import TimeLimitReached, Trainer, TrainSettings
from pipeline.sweep.context import TrialContext

CFC = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1, "backbone_dropout": 0.0}
XOR = XorParams(kind="xor", n_train=120, n_test=40)  # 108 train, 12 validation sequences


def _per_step(data: Dataset) -> Dataset:
    """XOR's sequences relabelled per step (2 classes) with a random mask of 1-32 observed steps
    per sequence: ranks then hold different numbers of loss terms."""
    rng = np.random.default_rng(0)
    splits = {}
    for name, s in data.splits.items():
        n, length = s.y.shape[0], s.x.shape[1]
        mask = np.arange(length)[None, :] < rng.integers(1, length + 1, size=(n, 1))
        splits[name] = Split(s.x, s.t, mask, rng.integers(0, 2, size=(n, length)))
    meta = dataclasses.replace(data.meta, task="classification", per_step=True, output_size=2)
    return Dataset(meta, splits)


CASES = [  # (name, batch size): 108 = 4 x 25 + 8 splits 13/12; 108 = 107 + 1 leaves rank 1 nothing
    ("xor", 25), ("xor", 107), ("per_step", 36),
]


def _dataset(name: str) -> Dataset:
    data = build_xor("x", XOR)
    return _per_step(data) if name == "per_step" else data


def _train(data: Dataset, batch_size: int, epochs: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    trainer = Trainer("cfc", CFC, TrainSettings(lr=1e-2, batch_size=batch_size, grad_clip=1.0), data, 7)
    if dist.is_initialized():
        trainer.distribute(DistributedDataParallel, dist.get_rank(), dist.get_world_size())
    losses = [trainer.train_epoch() for _ in range(epochs)]
    return losses, trainer.weights()


def _stop_together(rank: int) -> tuple[str, int]:
    """Only rank 1 is past its deadline; every rank must stop after the same batch (one rank
    leaving alone would leave the other waiting in a collective forever)."""
    trainer = Trainer("cfc", CFC, TrainSettings(lr=1e-2, batch_size=25), _dataset("xor"), 7)
    trainer.distribute(DistributedDataParallel, rank, dist.get_world_size())
    deadline = time.monotonic() + (3600 if rank == 0 else -1)
    try:
        trainer.train_epoch(deadline)
    except TimeLimitReached as exc:
        return str(exc), trainer.epoch
    return "finished", trainer.epoch


def _ddp_worker(rank: int, world: int, rendezvous: str, out: str) -> None:
    """One of `world` spawned processes: every case's losses and weights, saved by rank 0."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    try:
        results: dict[Any, Any] = {case: _train(_dataset(case[0]), case[1], epochs=2) for case in CASES}
        results["time_limit"] = _stop_together(rank)
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_train_what_one_process_trains(tmp_path: Path) -> None:
    out = tmp_path / "ddp.pt"
    mp.spawn(_ddp_worker, args=(2, f"file://{tmp_path / 'rendezvous'}", str(out)), nprocs=2, join=True)
    parallel = torch.load(out)
    assert parallel.pop("time_limit") == ("time limit reached during epoch 1", 0)
    for case in CASES:
        losses, weights = parallel[case]
        ref_losses, ref_weights = _train(_dataset(case[0]), case[1], epochs=2)
        assert losses == pytest.approx(ref_losses, rel=1e-5), case
        for key, value in ref_weights.items():
            torch.testing.assert_close(weights[key], value, rtol=1e-4, atol=1e-5, msg=f"{case}: {key}")


def test_shards_weight_each_rank_by_its_loss_terms() -> None:
    data = _per_step(build_xor("x", XorParams(kind="xor", n_train=20, n_test=10)))
    trainer = Trainer("cfc", CFC, TrainSettings(lr=1e-2, batch_size=4), data, 0)
    mask = torch.zeros_like(trainer.masks["train"])
    mask[0, :3], mask[1, :1], mask[2, :5] = True, True, True  # sample 3 has no observed step
    trainer.masks["train"] = mask
    trainer.world = 2
    trainer.rank = 0  # samples 0, 2: 8 of the batch's 9 terms
    local, weight = trainer._shard(torch.tensor([0, 1, 2, 3]))
    assert local.tolist() == [0, 2] and weight == pytest.approx(2 * 8 / 9)
    trainer.rank = 1  # samples 1, 3: 1 term
    local, weight = trainer._shard(torch.tensor([0, 1, 2, 3]))
    assert local.tolist() == [1, 3] and weight == pytest.approx(2 * 1 / 9)
    local, weight = trainer._shard(torch.tensor([1, 3]))  # rank 1 holds sample 3 only: no terms
    assert local.tolist() == [1] and weight == 0.0


# ---- the Ray path: a Tune trial driving a Ray Train run -------------------------------------------

CONFIG = {"lr": 1e-2, "batch_size": 25, "grad_clip": 1.0, **CFC}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray instance of this module's own, with the dashboard whose State API Ray Train needs to
    release the workers of a trial Tune stopped (pipeline.sweep.distributed). address="local": never
    another process's `ray start` cluster on this machine, and RAY_API_SERVER_ADDRESS tells the
    cluster's processes which State API is theirs."""
    from tests.shared_ray import held_ray

    with held_ray():  # this process's shared Ray (tests/shared_ray.py) stopped first, if an earlier test started it
        port = _free_port()
        # Ray's worker processes cannot import this test module: ship its functions by value.
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_port=port, log_to_driver=False,
                 configure_logging=False,
                 runtime_env={"env_vars": {"RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{port}"}})
        try:
            yield
        finally:
            ray.shutdown()
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[MlflowClient, str, str]:
    """A fresh SQLite MLflow store in tmp_path: (client, experiment id, parent run id)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client, exp_id = tracking.experiment_id(tmp_path, "x")
    return client, exp_id, tracking.start_run(client, exp_id, "search/ddp", {"stage": "search"})


def _context(tmp_path: Path, store: tuple[MlflowClient, str, str], data: Dataset, family: str) -> TrialContext:
    folder = tmp_path / "processed" / "x"
    save_dataset(folder, data)
    return TrialContext("x", family, str(folder.resolve()), epochs=2, seed=7, cpus=1.0,
                        tracking_uri=tracking.tracking_uri(tmp_path), experiment_id=store[1],
                        parent_run_id=store[2], workers=2)


def _trial(config: dict[str, Any], ctx: TrialContext, data: Dataset | None, stages: tuple[int, ...]) -> None:
    """A Tune trainable shaped like pipeline.sweep.trial.run_trial's data-parallel branch."""
    client = MlflowClient(ctx.tracking_uri)
    run_id = tracking.start_run(client, ctx.experiment_id, "search/ddp/trial",
                                {"ray_trial_id": tune.get_context().get_trial_id()}, parent_run_id=ctx.parent_run_id)
    try:
        for epochs in stages:  # a later stage starts the Train run again, as a retried trial does
            run_data_parallel(config, dataclasses.replace(ctx, epochs=epochs), run_id, data)
    except Exception as exc:
        tracking.finish(client, run_id, exc)
        raise


def _tune(tmp_path: Path, ctx: TrialContext, config: dict[str, Any], data: Dataset | None,
          stages: tuple[int, ...]) -> tune.ResultGrid:
    trainable = tune.with_parameters(_trial, ctx=ctx, data=data, stages=stages)
    tuner = tune.Tuner(
        # The trial only drives: no CPU of its own, the two workers take both of this cluster's.
        tune.with_resources(trainable, DRIVER_RESOURCES),
        param_space=config,
        tune_config=tune.TuneConfig(metric="val_metric", mode="max", num_samples=1,
                                    scheduler=ASHAScheduler(max_t=ctx.epochs, grace_period=ctx.epochs)),
        run_config=tune.RunConfig(name="ddp", storage_path=str(tmp_path / "ray_results"), verbose=0),
    )
    return tuner.fit()


def _wait_for_free_cpus(timeout_s: float = 30.0) -> None:
    """The Train run's workers and placement group are gone once the trial ended."""
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) < ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, f"resources still held: {ray.available_resources()}"
        time.sleep(0.5)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_a_tune_trial_trains_on_two_workers_like_one_process(ray_cluster, tmp_path: Path, store) -> None:
    data = build_xor("x", XOR)
    ctx = _context(tmp_path, store, data, "cfc")
    grid = _tune(tmp_path, ctx, CONFIG, load_dataset(Path(ctx.dataset_dir)), stages=(1, 2))
    result = grid[0]
    assert result.error is None, result.error
    history = result.metrics_dataframe
    assert history["epoch"].tolist() == [1, 2] and set(history["world_size"]) == {2}
    run_id = history["mlflow_run_id"].iloc[-1]

    train_cfg, model_cfg = split_config(CONFIG)
    reference = Trainer("cfc", model_cfg, TrainSettings(**train_cfg), load_dataset(Path(ctx.dataset_dir)), ctx.seed)
    expected = [reference.run_epoch() for _ in range(2)]
    assert history["train_loss"].tolist() == pytest.approx([m["train_loss"] for m in expected], rel=1e-5)
    assert history["val_metric"].tolist() == [m["val_metric"] for m in expected]
    assert all(math.isfinite(v) for v in history["val_metric"])
    # The second Train run resumed from the first one's checkpoint and continued to epoch 2:
    # its last checkpoint holds the weights one process reaches after two epochs.
    state = torch.load(Path(history["checkpoint_path"].iloc[-1]) / STATE_FILE, weights_only=False)
    assert state["epoch"] == 2
    for key, value in reference.model.state_dict().items():
        torch.testing.assert_close(state["model"][key], value, rtol=1e-4, atol=1e-5, msg=key)

    client = store[0]
    run = client.get_run(run_id)
    assert run.data.params["world_size"] == "2" and run.data.tags["resumed_from_epoch"] == "1"
    for key in ("train_loss", "val_metric", "epoch_seconds"):
        assert [m.step for m in client.get_metric_history(run_id, key)] == [1, 2], key
    _wait_for_free_cpus()


@pytest.mark.slow
def test_a_nan_loss_on_the_workers_fails_the_tune_trial(ray_cluster, tmp_path: Path, store) -> None:
    data = build_xor("x", XorParams(kind="xor", n_train=40, n_test=10, seed=3))
    train = data.splits["train"]
    x = train.x.copy()
    x[:, 0, 0] = np.inf  # the CDE path's spline coefficients, and so the loss, turn NaN
    poisoned = Dataset(data.meta, {**data.splits, "train": Split(x, train.t, train.mask, train.y)})
    ctx = _context(tmp_path, store, poisoned, "ncde")
    config = {"lr": 1e-2, "batch_size": 16, "hidden_size": 8, "vf_units": 8, "vf_layers": 1}
    grid = _tune(tmp_path, ctx, config, None, stages=(2,))  # the workers read ctx.dataset_dir
    error = grid[0].error
    cause = getattr(error, "cause", error)
    assert isinstance(cause, TrialFailedError) and "non-finite training loss" in str(cause), error
    runs = store[0].search_runs([store[1]], "tags.ray_trial_id != ''")
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert runs[0].data.tags["error"].startswith("TrialFailedError: non-finite training loss")
    _wait_for_free_cpus()


class _Probe:
    def check(self) -> None:
        check_state_api(timeout_s=5)


@pytest.mark.slow
def test_a_trial_refuses_to_start_where_the_state_api_is_missing(ray_cluster) -> None:
    ray.get(ray.remote(num_cpus=0)(_Probe).remote().check.remote())  # this cluster's own: fine
    nowhere = {"env_vars": {"RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{_free_port()}"}}
    probe = ray.remote(num_cpus=0)(_Probe).options(runtime_env=nowhere).remote()
    with pytest.raises(ConfigError, match="need Ray's State API"):
        ray.get(probe.check.remote())


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_a_search_trains_every_trial_on_two_workers(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search stage end to end with `workers: 2` for one family: each trial drives a Ray Train
    run of two gloo workers (a local Ray with its dashboard, which Ray Train needs to free the
    workers of a stopped trial), and Tune, Optuna and MLflow see it like any trial."""
    from pipeline.config import AshaParams, ResourceOverride, SearchParams
    from pipeline.stores.paths import processed_dir
    from pipeline.sweep.search import search

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=200, n_test=40, seed=3)))
    p = SearchParams(num_samples=2, max_concurrent=1, epochs=2, n_startup_trials=1, asha=AshaParams(grace_period=2),
                     family_resources={"lstm_dt": ResourceOverride(workers=2)})
    record = search(project, "xor", "lstm_dt", p)
    assert record["n_trials"] == 2 and record["n_failed"] == 0, [t["error"] for t in record["trials"]]
    assert all(t["epochs"] == 2 for t in record["trials"])
    client = MlflowClient(tracking.tracking_uri(project))
    for trial in record["trials"]:
        run = client.get_run(trial["mlflow_run_id"])
        assert run.data.params["world_size"] == "2" and run.info.status == "FINISHED", run.data.tags.get("error")
