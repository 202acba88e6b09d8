"""One search trial, as Ray Tune runs it: train, log to MLflow and report every epoch, and save a
checkpoint at the end of an epoch once `search.checkpoint_every_s` seconds have passed since the
last one (0: every epoch).

A trial may run more than once: Ray restarts it from its last checkpoint when its process or
its node dies (`search.max_failures`), and `Tuner.restore` restarts the trials a killed driver
left running; what it trained since that checkpoint (at most `checkpoint_every_s` and an epoch)
it trains again. Each start finds the trial's MLflow run by its Ray trial id and carries on
logging into it, so a trial has one run however many processes it took. A trial that failed
for a reason that would only repeat (a NaN loss, a solver failure, no epoch within the time
limit) is tagged `final_failure` and fails again at once if Ray retries it.

A trial's run is named for what tells it apart from its siblings first: `trial-<n>/search/<family>`,
n its number in the family's Optuna study (as optuna-dashboard shows it; tag `optuna_trial_number`);
a trial of repeat r > 0 of the search (`search.repeats`) is `trial-<n>/repeat-<r>/search/<family>`
(tag `search_repeat`).
"""

from __future__ import annotations

# First: a Ray worker imports this module to run a trial or a seed, and its imports (torch, MLflow,
# Ray Tune) start here; the start-up tags count from this stamp (standard library only).
from pipeline.runtime import startup

startup.mark_imports_started()

import dataclasses
import os
import socket
import tempfile
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

import ray
import torch
from ray import tune

from pipeline.stores import tracking
from pipeline.data.contract import Dataset
from pipeline.errors import TrialFailedError
from pipeline.runtime import machine
from pipeline.runtime.collector import freeze_survivors
from pipeline.stores.schema import DATA_PROVENANCE
from pipeline.spaces import split_config
from pipeline.sweep.context import STATE_FILE, TrialContext, local_dataset
from pipeline.sweep.trial_keys import REPEAT_KEY, TRIAL_NUMBER_KEY, family_of, repeat_of, trial_number_of, without_family
from pipeline.sweep.run_lookup import find_child_run, logged_epochs
from pipeline.training.loop import TimeLimitReached, Trainer, TrainSettings, device_for

FINAL_FAILURE_TAG = "final_failure"
startup.mark_imports_done()


def trial_run_name(ctx: TrialContext, trial_id: str) -> str:
    """`trial-<Optuna trial number>/search/<family>`: MLflow's runs table cuts long names, so the
    part that differs between a search's trials comes first. A trial of an experiment started
    before the number was kept falls back to its Ray trial id."""
    repeat = f"repeat-{ctx.repeat}/" if ctx.repeat else ""
    return f"trial-{trial_id if ctx.trial_number is None else ctx.trial_number}/{repeat}search/{ctx.family}"


def trial_run(client: tracking.MlflowClient, ctx: TrialContext, trial_id: str, config: dict[str, Any],
              tags: dict[str, Any] | None = None) -> str:
    """The trial's MLflow run: the one an earlier attempt of this trial created, else a new one;
    `tags` (the machine's: pipeline.runtime.machine) are set on it in the same write.

    Raises TrialFailedError at once when an earlier attempt failed for a reason that repeats.
    """
    return _trial_run(client, ctx, trial_id, config, tags or {})[0]


def _trial_run(client: tracking.MlflowClient, ctx: TrialContext, trial_id: str, config: dict[str, Any],
               tags: dict[str, Any]) -> tuple[str, bool]:
    """trial_run's (run id, whether this attempt created the run). A trial's set-up writes to the
    store a handful of times; each is a transaction on SQLite (3-4 ms measured) and a round trip to
    a tracking server, so what can share a write does."""
    found = find_child_run(client, ctx.experiment_id, ctx.parent_run_id, "ray_trial_id", trial_id)
    place = {"host": socket.gethostname(), "pid": os.getpid(), "ray_node_id": ray.get_runtime_context().get_node_id()}
    if found is None:
        number = {} if ctx.trial_number is None else {TRIAL_NUMBER_KEY: ctx.trial_number}
        provenance = {DATA_PROVENANCE: ctx.data_provenance} if ctx.data_provenance else {}
        run_id = tracking.start_run(
            client, ctx.experiment_id, trial_run_name(ctx, trial_id),
            {"dataset": ctx.dataset, "family": ctx.family, "stage": "search", "seed": ctx.seed,
             "ray_trial_id": trial_id, REPEAT_KEY: ctx.repeat, **number, **provenance, **place, **tags},
            parent_run_id=ctx.parent_run_id)
        tracking.log_params(client, run_id, config)
        return run_id, True
    if found.data.tags.get(FINAL_FAILURE_TAG) == "true":
        raise TrialFailedError(found.data.tags.get("error", "failed in an earlier attempt"))
    attempts = int(found.data.tags.get("attempts", "1")) + 1
    client.update_run(found.info.run_id, status="RUNNING")
    tracking.set_tags(client, found.info.run_id,
                      {"attempts": attempts, tracking.RUN_LEVEL_TAG: tracking.CHILD_LEVEL, **place, **tags})
    if "interrupted" in found.data.tags:  # a stage interrupt closed it KILLED; it runs again now
        client.delete_tag(found.info.run_id, "interrupted")
    return found.info.run_id, False


def _restore(trainer: Trainer, client: tracking.MlflowClient, run_id: str) -> None:
    """Resume from the trial's last checkpoint when Ray retries it."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            trainer.load_state(torch.load(Path(folder) / STATE_FILE, weights_only=False))
        tracking.set_tags(client, run_id, {"resumed_from_epoch": trainer.epoch})


def _report(trainer: Trainer, metrics: dict[str, float], run_id: str, checkpoint: bool = True) -> None:
    """Report the epoch to Tune, with the trainer's state as a checkpoint when `checkpoint`."""
    if not checkpoint:
        tune.report({**metrics, "mlflow_run_id": run_id})
        return
    with tempfile.TemporaryDirectory() as folder:
        torch.save(trainer.state(), Path(folder) / STATE_FILE)
        tune.report({**metrics, "mlflow_run_id": run_id}, checkpoint=tune.Checkpoint.from_directory(folder))


def _fail(client: tracking.MlflowClient, run_id: str, error: BaseException) -> None:
    """Close the run as FAILED; a failure that would repeat is marked so a retry does not rerun it."""
    if isinstance(error, TrialFailedError):
        tracking.set_tags(client, run_id, {FINAL_FAILURE_TAG: "true"})
    tracking.finish(client, run_id, error, outcome=tracking.FAILED_OUTCOME)


def run_trial(config: dict[str, Any], ctx: TrialContext, data: Dataset) -> None:
    """The Ray Tune trainable: train, report and log each epoch until max epochs or ASHA stops it."""
    entered = time.time()
    torch.set_num_threads(max(1, int(ctx.cpus)))  # concurrent trials must not fight over cores
    client = tracking.MlflowClient(ctx.tracking_uri)
    # the machine and threads it trains with, on its run: the search record and report carry them
    run_id, created = _trial_run(client, ctx, tune.get_context().get_trial_id(), config,
                                 machine.run_tags(device_for(ctx.gpus), max(1, int(ctx.cpus))))
    if ctx.workers > 1:
        from pipeline.sweep.distributed import run_data_parallel  # Ray Train: only for data-parallel trials

        try:
            run_data_parallel(config, ctx, run_id, data)
        except ray.exceptions.RayActorError:
            # The Train controller died: Tune removed this trial's placement group because it stopped
            # the trial (its last epoch, or ASHA), or a node died. Tune's outcome decides how the run
            # ends (search._close_runs); closing it FAILED here could land after that and stick.
            raise
        except Exception as exc:
            _fail(client, run_id, exc)
            raise
        return
    trainer = None
    try:
        freeze_survivors()  # before the set-up and after it: pipeline/runtime/collector.py
        train_cfg, model_cfg = split_config(config)
        trainer = Trainer(ctx.family, model_cfg, TrainSettings(**train_cfg), local_dataset(data), ctx.seed,
                          device_for(ctx.gpus), ctx.epochs, ctx.min_steps)
        _restore(trainer, client, run_id)
        freeze_survivors()
        tracking.log_params_and_tags(client, run_id, {"num_params": trainer.model.num_parameters()},
                                     startup.tags(entered, time.time()))
        deadline = time.monotonic() + ctx.time_limit_s if ctx.time_limit_s else None
        logged = 0 if created else logged_epochs(client, run_id)  # a run made just now has logged nothing
        saved = time.monotonic()  # the last checkpoint (or the start): `search.checkpoint_every_s` counts from it
        while trainer.epoch < ctx.epochs:
            metrics = trainer.run_epoch(deadline)
            # An epoch an earlier attempt logged is not logged again, so a run's history holds each
            # epoch once; training is deterministic on the same kind of machine
            # (docs/explanation/reproducibility.md), so there the values Tune gets now are the ones
            # logged then (a retry on another CPU model may differ in the last bits).
            if trainer.epoch > logged:
                tracking.log_metrics(client, run_id, metrics, step=trainer.epoch)
            if trainer.stopped_early:  # tagged first: Tune may end this process at the report
                tracking.set_tags(client, run_id, {"patience_stopped": "true"})
            # A checkpoint costs a torch.save, Tune's copy into its storage and, every `num_to_keep`
            # of them, a snapshot of the experiment: a large share of a short epoch (docs/benchmarks/cluster.md).
            due = time.monotonic() - saved >= ctx.checkpoint_every_s
            _report(trainer, metrics, run_id, due)  # Tune may end this process here; the driver closes the run
            if due:
                saved = time.monotonic()
            if trainer.stopped_early:  # `patience` epochs without progress: the trial ends as ASHA would end it
                break
    except TimeLimitReached as exc:
        if trainer is None or trainer.epoch == 0:  # nothing to judge the configuration by: a failed trial
            error = ctx.first_epoch_too_slow()
            _fail(client, run_id, error)
            raise error from exc
        # Otherwise the trial ends here with what it reported, like an early stop: FINISHED, not failed.
        tracking.set_tags(client, run_id, {"time_limited": "true", "early_stopped": "true"})
        tracking.finish(client, run_id, outcome=tracking.STOPPED_EARLY)
    except Exception as exc:
        _fail(client, run_id, exc)
        raise


def run_family_trial(config: dict[str, Any], contexts: dict[str, TrialContext], data: Dataset | Mapping[str, Dataset],
                     trial_fn: Callable[[dict[str, Any], TrialContext, Dataset], None] = run_trial) -> None:
    """The trainable of a multi-family search (pipeline.sweep.families): the trial's family (or
    "<dataset>/<family>" when datasets share the run) picks its context, to which the trial's
    Optuna number and repeat are added (repeat r trains with the family's trial seed + r); the
    trial itself sees only its own family's configuration and its own dataset (`data` is
    {dataset: Dataset} when several share the run)."""
    base, repeat = contexts[family_of(config)], repeat_of(config)
    ctx = dataclasses.replace(base, trial_number=trial_number_of(config), repeat=repeat, seed=base.seed + repeat)
    trial_fn(without_family(config), ctx, data[ctx.dataset] if isinstance(data, Mapping) else data)
