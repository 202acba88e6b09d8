"""The `search` stage: one Ray Tune run per (dataset, family).

Optuna's seeded TPE sampler proposes configurations through OptunaSearch (the paper's reference
configuration first), ASHA stops weak trials early, every trial reports the validation metric
and a checkpoint per epoch, and logs to an MLflow child run of the search's parent run.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import torch
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from pipeline import tracking
from pipeline.cluster import ray_session
from pipeline.config import SearchParams
from pipeline.data.contract import load_dataset, load_meta
from pipeline.models import get_model_class
from pipeline.models.embedding import check_token_family
from pipeline.errors import TrialFailedError
from pipeline.paths import processed_dir, require, search_result_path
from pipeline.spaces import SearchSpace, load_space, space_path, split_config
from pipeline.train import TimeLimitReached, Trainer, TrainSettings, device_for, is_better
from pipeline.io import write_json

METRIC = "val_metric"


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial process needs besides its sampled config; all paths absolute."""

    dataset: str
    family: str
    dataset_dir: str
    epochs: int
    seed: int
    cpus: float
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    time_limit_s: float | None = None
    gpus: float = 0.0


def _restore(trainer: Trainer) -> None:
    """Resume from the trial's last checkpoint when Ray retries it."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            trainer.load_state(torch.load(Path(folder) / "state.pt", weights_only=False))


def _report(trainer: Trainer, metrics: dict[str, float], run_id: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        torch.save(trainer.state(), Path(folder) / "state.pt")
        tune.report({**metrics, "mlflow_run_id": run_id}, checkpoint=tune.Checkpoint.from_directory(folder))


def run_trial(config: dict[str, Any], ctx: TrialContext) -> None:
    """The Ray Tune trainable: train, report and log each epoch until max epochs or ASHA stops it."""
    torch.set_num_threads(max(1, int(ctx.cpus)))  # concurrent trials must not fight over cores
    client = tracking.MlflowClient(ctx.tracking_uri)
    trial_id = tune.get_context().get_trial_id()
    run_id = tracking.start_run(
        client, ctx.experiment_id, f"search/{ctx.family}/{trial_id}",
        {"dataset": ctx.dataset, "family": ctx.family, "stage": "search", "seed": ctx.seed,
         "ray_trial_id": trial_id}, parent_run_id=ctx.parent_run_id)
    tracking.log_params(client, run_id, config)
    try:
        train_cfg, model_cfg = split_config(config)
        trainer = Trainer(ctx.family, model_cfg, TrainSettings(**train_cfg), load_dataset(Path(ctx.dataset_dir)),
                          ctx.seed, device_for(ctx.gpus))
        _restore(trainer)
        tracking.log_params(client, run_id, {"num_params": trainer.model.num_parameters()})
        deadline = time.monotonic() + ctx.time_limit_s if ctx.time_limit_s else None
        while trainer.epoch < ctx.epochs:
            metrics = trainer.run_epoch(deadline)
            tracking.log_metrics(client, run_id, metrics, step=trainer.epoch)
            _report(trainer, metrics, run_id)  # Tune may end this process here; the driver closes the run
    except TimeLimitReached as exc:
        if trainer.epoch == 0:  # nothing to judge the configuration by: a failed trial
            tracking.finish(client, run_id, TrialFailedError(f"first epoch exceeded trial_time_limit_s: {exc}"))
            raise TrialFailedError(f"first epoch exceeded trial_time_limit_s={ctx.time_limit_s}") from exc
        # Otherwise the trial ends here with what it reported, like an early stop.
        tracking.set_tags(client, run_id, {"time_limited": "true", "early_stopped": "true"})
        client.set_terminated(run_id, "KILLED")
    except Exception as exc:
        tracking.finish(client, run_id, exc)
        raise


def _error_message(error: BaseException) -> str:
    """The trial's own exception, not Ray's wrapper around it (RayTaskError keeps it as cause)."""
    cause = getattr(error, "cause", None) or error
    lines = [line for line in str(cause).splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:300]


def _trial_records(grid: tune.ResultGrid, mode: str) -> list[dict[str, Any]]:
    records = []
    for result in grid:
        history = result.metrics_dataframe
        values = [] if history is None or METRIC not in history else history[METRIC].dropna().tolist()
        best = (max if mode == "max" else min)(values) if values else None
        records.append({
            "trial_id": result.metrics.get("trial_id") if result.metrics else None,
            "config": result.config, "best_val": best, "epochs": len(values),
            "status": "error" if result.error else "ok",
            "error": _error_message(result.error) if result.error else None,
            "mlflow_run_id": result.metrics.get("mlflow_run_id") if result.metrics else None,
        })
    return records


def _close_runs(client: tracking.MlflowClient, records: list[dict[str, Any]], epochs: int) -> None:
    """Close the MLflow runs Ray left RUNNING.

    Tune stops a trial's actor as soon as it reports its last epoch (max_t) or ASHA stops it,
    so the trial cannot close its own run: a run that reached `epochs` is FINISHED, a shorter
    one was stopped early (KILLED, tagged early_stopped). Failed trials closed theirs as FAILED.
    """
    for r in records:
        run_id = r["mlflow_run_id"]
        if not run_id or client.get_run(run_id).info.status != "RUNNING":
            continue
        if r["status"] == "error":
            tracking.finish(client, run_id, RuntimeError(r["error"] or "trial process died"))
        elif r["epochs"] >= epochs:
            client.set_terminated(run_id, "FINISHED")
        else:
            tracking.set_tags(client, run_id, {"early_stopped": "true"})
            client.set_terminated(run_id, "KILLED")


def _tuner(space: SearchSpace, ctx: TrialContext, p: SearchParams, mode: str,
           storage: Path) -> tuple[OptunaSearch, tune.Tuner]:
    sampler = optuna.samplers.TPESampler(seed=p.sampler_seed, n_startup_trials=p.n_startup_trials)
    searcher = OptunaSearch(space.define_by_run(), metric=METRIC, mode=mode, sampler=sampler,
                            points_to_evaluate=[space.reference] if space.reference else None)
    scheduler = ASHAScheduler(max_t=p.epochs, grace_period=min(p.asha.grace_period, p.epochs),
                              reduction_factor=p.asha.reduction_factor)
    trainable = tune.with_resources(tune.with_parameters(run_trial, ctx=ctx),
                                    {"cpu": p.resources.cpu, "gpu": p.resources.gpu})
    return searcher, tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(metric=METRIC, mode=mode, num_samples=p.num_samples, scheduler=scheduler,
                                    search_alg=ConcurrencyLimiter(searcher, max_concurrent=p.max_concurrent)),
        run_config=tune.RunConfig(
            name=f"{ctx.dataset}__{ctx.family}__{time.strftime('%Y%m%d-%H%M%S')}", storage_path=str(storage),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2), verbose=0,
            failure_config=tune.FailureConfig(max_failures=0)),
    )


def optuna_states(searcher: OptunaSearch) -> dict[str, int]:
    """How Optuna saw the trials: failed trials must be FAIL, never left RUNNING."""
    states: dict[str, int] = {}
    for trial in searcher._ot_study.get_trials(deepcopy=False):  # the study OptunaSearch told
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    return states


def search(root: Path, dataset: str, family: str, p: SearchParams) -> dict[str, Any]:
    """Run the search for one (dataset, family) and write results/<dataset>/search/<family>.json.

    Validation of the space and the inputs happens before Ray starts. Returns the written record.
    """
    data_dir = require(processed_dir(root, dataset), f"ctsweep prepare {dataset}")
    meta = load_meta(data_dir)
    if meta.vocab_size:  # a token dataset: refuse families that cannot read an embedding, before Ray
        check_token_family(family, get_model_class(family), dataset)
    space = load_space(space_path(root, family), family)
    client, exp_id = tracking.experiment_id(root, dataset)
    parent = tracking.start_run(client, exp_id, f"search/{family}",
                                {"dataset": dataset, "family": family, "stage": "search"})
    tracking.log_params(client, parent, {"search." + k: v for k, v in p.model_dump().items()})
    ctx = TrialContext(dataset, family, str(data_dir), p.epochs, p.trial_seed, p.resources.cpu,
                       tracking.tracking_uri(root), exp_id, parent, p.trial_time_limit_s, p.resources.gpu)
    try:
        with ray_session():
            searcher, tuner = _tuner(space, ctx, p, meta.mode, (root / p.storage_path).resolve())
            grid = tuner.fit()
        records = _trial_records(grid, meta.mode)
        _close_runs(client, records, p.epochs)
        states = optuna_states(searcher)
        tracking.set_tags(client, parent, {"optuna_states": json.dumps(states, sort_keys=True)})
        record = _summarise(dataset, family, meta.metric, meta.mode, space, p, records, parent)
        record["optuna_states"] = states
        tracking.log_metrics(client, parent, {"best_val": record["best_val"], "n_trials": record["n_trials"],
                                              "n_failed": record["n_failed"]})
        tracking.log_params(client, parent, {"best." + k: v for k, v in record["best_config"].items()})
    except BaseException as exc:
        tracking.finish(client, parent, exc)
        raise
    tracking.finish(client, parent)
    write_json(search_result_path(root, dataset, family), record)
    return record


def _summarise(dataset: str, family: str, metric: str, mode: str, space: SearchSpace, p: SearchParams,
               records: list[dict[str, Any]], parent: str) -> dict[str, Any]:
    best = None
    for r in records:  # a trial that failed later does not win on its earlier epochs
        if r["status"] == "ok" and r["best_val"] is not None and is_better(r["best_val"], best and best["best_val"], mode):
            best = r
    if best is None:
        errors = sorted({r["error"] for r in records if r["error"]})
        raise TrialFailedError(f"every trial of {dataset}/{family} failed; errors: {errors}")
    return {
        "dataset": dataset, "family": family, "metric": metric, "mode": mode,
        "best_config": dict(best["config"]),  # sampled values plus the fixed ones
        "best_val": best["best_val"], "trial_seed": p.trial_seed, "sampler_seed": p.sampler_seed,
        "n_trials": len(records), "n_failed": sum(r["status"] == "error" for r in records),
        "reference": space.reference, "mlflow_parent_run_id": parent, "trials": records,
    }
