"""Data-parallel search trials: a Tune trial that needs several workers drives a Ray Train run.

The Tune trial (pipeline.sweep.trial.run_trial, when `workers > 1`) only drives: it starts a Ray Train
V2 TorchTrainer whose workers each hold the same Trainer (same data, seed and state) and train
their share of every batch through DistributedDataParallel (Trainer.distribute). Rank 0 logs each
epoch to the trial's MLflow run and reports a checkpoint; TuneReportCallback forwards its metrics
to Tune, so ASHA and Optuna see the keys a single-process trial reports, plus `world_size` and
the `checkpoint_path` of that epoch's state.

Resources: each worker asks for {"CPU": cpus, "GPU": gpus} in a placement group of its own. The
Tune trial only drives, so it asks for DRIVER_RESOURCES: no CPU or GPU (even a CPU share would
keep `workers` x `cpus` from filling a node), but a little memory, as Ray refuses an all-zero
request. Backend: NCCL when each worker holds whole GPUs, else gloo (NCCL refuses two ranks on
one GPU).

Restarts: the Train run is named after the Tune trial and kept in the Tune experiment's storage,
so when Tune restarts the trial (its process or node died) Ray Train finds the run's checkpoints
and every worker resumes from the last one (ray.train.get_checkpoint).

Stopping: when Tune stops a trial (ASHA, or its last epoch) it ends the trial's process, and with
it the Train controller, before the controller can release its workers' placement group. Ray
Train's PlacementGroupCleaner then releases it, but it learns of the controller's death only
through Ray's State API (the dashboard). Without one, every stopped trial would keep its workers'
CPUs and GPUs until the search ends and later trials would wait for them forever, so a trial
refuses to start when the State API cannot see it (check_state_api).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from pipeline.stores import tracking
from pipeline.data.contract import Dataset, load_dataset
from pipeline.errors import ConfigError, CtsweepError
from pipeline.runtime.collector import freeze_survivors
from pipeline.spaces import split_config
from pipeline.sweep.context import STATE_FILE, TrialContext, local_dataset
from pipeline.sweep.run_lookup import logged_epochs
from pipeline.training.loop import TimeLimitReached, Trainer, TrainSettings

# What a data-parallel Tune trial asks for (tune.with_resources): 1 MiB of the node's memory.
DRIVER_RESOURCES = {"cpu": 0, "gpu": 0, "memory": 2**20}


def scaling_config(workers: int, cpus: float, gpus: float) -> ScalingConfig:
    """`workers` Ray Train workers, each with `cpus` CPUs and `gpus` GPUs (a share when < 1)."""
    per_worker = {"CPU": cpus, **({"GPU": gpus} if gpus > 0 else {})}
    return ScalingConfig(num_workers=workers, use_gpu=gpus > 0, resources_per_worker=per_worker)


def backend_for(gpus: float) -> str:
    """NCCL when every worker holds whole GPUs; gloo on CPU and for GPU shares (NCCL would see
    two ranks on one device)."""
    return "nccl" if gpus >= 1 else "gloo"


def train_run_name(trial_id: str) -> str:
    """Stable across restarts of the trial: Ray Train resumes a run found under the same name."""
    return f"train-trial_id={trial_id}"


def run_data_parallel(config: dict[str, Any], ctx: TrialContext, run_id: str, data: Dataset | None = None) -> None:
    """Train one search trial over `ctx.workers` Ray Train workers; call from inside a Tune trial.

    Rank 0 logs every epoch to MLflow run `run_id` and reports it to Tune with a checkpoint.
    `data` is the dataset the trial received (shipped to the workers through the object store);
    without it each worker reads ctx.dataset_dir. A worker's exception (TrialFailedError for a
    NaN loss or a solver failure) is raised here as itself; closing the MLflow run as FAILED is
    the caller's, as for a single-process trial. A run stopped by ctx.time_limit_s after at least
    one epoch ends normally, its MLflow run closed FINISHED and tagged time_limited and
    `outcome: stopped_early`.
    """
    check_state_api()
    storage = tune.get_context().get_storage()
    data_ref = ray.put(data) if data is not None else None
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"config": config, "ctx": ctx, "run_id": run_id, "data": data_ref},
        scaling_config=scaling_config(ctx.workers, ctx.cpus, ctx.gpus),
        torch_config=TorchConfig(backend=backend_for(ctx.gpus)),
        run_config=RunConfig(
            name=train_run_name(tune.get_context().get_trial_id()),
            storage_path=storage.experiment_fs_path, storage_filesystem=storage.storage_filesystem,
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            # A NaN loss or a solver failure would only repeat: no retry inside the run. A dead
            # process or node is retried by Tune (search.max_failures), resuming this run.
            failure_config=FailureConfig(max_failures=0),
            callbacks=[TuneReportCallback()],
        ),
    )
    try:
        trainer.fit()
    except ray.train.TrainingFailedError as exc:
        error = worker_error(exc)
        if error is exc:
            raise
        raise error from exc  # the Train error's text keeps every rank's traceback


def check_state_api(timeout_s: float = 10.0) -> None:
    """Raise ConfigError unless Ray's State API, asked from the head node, reports this process's
    own actor as alive. Call it in a Ray actor (a Tune trial).

    Ray Train's PlacementGroupCleaner runs on the head node and asks the State API whether a run's
    controller still lives (see the module docstring), so the question is asked there too. The API
    is found as the cleaner finds it: RAY_API_SERVER_ADDRESS or RAY_ADDRESS, else the latest
    `ray start` cluster on that machine, which may be another cluster than this one; asking for
    our own actor catches that too.
    """
    actor_id = ray.get_runtime_context().get_actor_id()
    problem = ray.get(_state_api_problem.remote(actor_id, timeout_s))
    if problem is not None:
        raise ConfigError(
            "data-parallel trials (workers > 1) need Ray's State API, through which Ray Train releases "
            f"the workers of a trial Tune stops, but the head node cannot use it: {problem}. Start Ray with its "
            "dashboard (`ray start --head` without --include-dashboard=false; ray.init(include_dashboard=True)) "
            "and, where several Ray instances share a machine, set RAY_API_SERVER_ADDRESS=http://<head>:<dashboard "
            "port> for the cluster's processes.")


# "node:__internal_head__": the head node's own resource, which Ray Train's cleaner asks for too;
# scheduling_strategy="DEFAULT": out of the Tune trial's placement group, which holds no such thing.
@ray.remote(num_cpus=0, resources={"node:__internal_head__": 0.001}, scheduling_strategy="DEFAULT", max_retries=0)
def _state_api_problem(actor_id: str, timeout_s: float) -> str | None:
    """Why the State API cannot tell that actor `actor_id` is alive, or None when it can."""
    from ray.util.state import get_actor

    try:
        found = get_actor(actor_id, timeout=int(timeout_s))
    except Exception as exc:  # no dashboard, another cluster's address, a timeout: all mean the same here
        lines = str(exc).splitlines()
        return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"
    if found is None or found.state != "ALIVE":
        return f"it does not know the trial's actor {actor_id} (it answered for another Ray cluster)"
    return None


def worker_error(error: Exception) -> BaseException:
    """The exception a worker itself raised, out of Ray Train's wrappers: the project's own errors
    first (a failing rank takes the others down with collective errors), lowest rank first; else
    the controller's failure, else `error` itself."""
    failures = getattr(error, "worker_failures", None) or {}
    raised = [_unwrap(failures[rank]) for rank in sorted(failures)]
    for candidate in raised:
        if isinstance(candidate, CtsweepError):
            return candidate
    return raised[0] if raised else getattr(error, "controller_failure", None) or error


def _unwrap(failure: BaseException) -> BaseException:
    # Ray Train hands a worker's exception over as is, inside a UserExceptionWithTraceback
    # (`_base_exc`, Ray 2.60, no public accessor) or inside a RayTaskError (`cause`).
    failure = getattr(failure, "_base_exc", None) or failure
    cause = getattr(failure, "cause", None)
    return cause if isinstance(cause, BaseException) else failure


def train_worker(loop: dict[str, Any]) -> None:
    """One Ray Train worker: the trial's Trainer on its share of each batch, epochs to ctx.epochs.

    `loop`: {"config": the sampled config, "ctx": TrialContext, "run_id": MLflow run id,
    "data": ObjectRef of the Dataset, or None to read ctx.dataset_dir}.
    """
    config, ctx, run_id = loop["config"], loop["ctx"], loop["run_id"]
    torch.set_num_threads(max(1, int(ctx.cpus)))  # workers sharing a node must not fight over cores
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    freeze_survivors()  # before the set-up and after it: pipeline/runtime/collector.py
    train_cfg, model_cfg = split_config(config)
    trainer = Trainer(ctx.family, model_cfg, TrainSettings(**train_cfg), _dataset(loop["data"], ctx), ctx.seed,
                      str(ray.train.torch.get_device()), ctx.epochs, ctx.min_steps)
    resumed = _restore(trainer)
    trainer.distribute(ray.train.torch.prepare_model, rank, world)
    freeze_survivors()
    client = tracking.MlflowClient(ctx.tracking_uri) if rank == 0 else None
    if client is not None:
        tracking.log_params(client, run_id, {"num_params": trainer.model.num_parameters(), "world_size": world})
        if resumed:
            tracking.set_tags(client, run_id, {"resumed_from_epoch": trainer.epoch})
    deadline = time.monotonic() + ctx.time_limit_s if ctx.time_limit_s else None
    logged = logged_epochs(client, run_id) if client is not None else 0  # each epoch logged once (trial.py)
    try:
        while trainer.epoch < ctx.epochs:
            metrics = trainer.run_epoch(deadline)  # every rank scores validation: same value, no wait
            if client is not None and trainer.epoch > logged:
                tracking.log_metrics(client, run_id, metrics, step=trainer.epoch)
            if client is not None and trainer.stopped_early:
                tracking.set_tags(client, run_id, {"patience_stopped": "true"})
            _report(trainer, {**metrics, "world_size": world, "mlflow_run_id": run_id}, rank)
            if trainer.stopped_early:  # every rank scored the same validation: they stop together
                break
    except TimeLimitReached as exc:  # every rank gets here together (Trainer agrees on the deadline)
        if trainer.epoch == 0:  # nothing to judge the configuration by: a failed trial
            raise ctx.first_epoch_too_slow() from exc
        if client is not None:  # the trial ends with what it reported, like an early stop
            tracking.set_tags(client, run_id, {"time_limited": "true", "early_stopped": "true"})
            tracking.finish(client, run_id, outcome=tracking.STOPPED_EARLY)


def _dataset(ref: Any, ctx: TrialContext) -> Dataset:
    if ref is None:
        return load_dataset(Path(ctx.dataset_dir))
    return local_dataset(ray.get(ref))  # drops a folder this node cannot see (input caches)


def _restore(trainer: Trainer) -> bool:
    """Load the run's last checkpoint, when Ray Train restarted it; returns whether it did."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return False
    with checkpoint.as_directory() as folder:
        trainer.load_state(torch.load(Path(folder) / STATE_FILE, weights_only=False))
    return True


def _report(trainer: Trainer, metrics: dict[str, Any], rank: int) -> None:
    """Every rank reports (Ray Train waits for all); rank 0's metrics and checkpoint are kept."""
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        torch.save(trainer.state(), Path(folder) / STATE_FILE)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
