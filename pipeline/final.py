"""The `final` stage: retrain a family's best configuration over fresh seeds, spread over Ray.

Each seed trains until validation stops improving (`final.patience` epochs without a better
score; a family whose searched configuration sets its own `patience` keeps it), for at most
`final.epochs` (or the family's `final.family_epochs`) and within `final.time_limit_s` of wall
clock, keeps the weights of its best validation epoch and is scored on validation and test with
them; the record says per seed why it stopped, so the report can mark a family still improving
when its budget ran out. A family whose every search trial failed is recorded as failed and
skipped (exit 0), so one family never stops `dvc repro`. The seed with the best
validation score is logged as an MLflow pyfunc model, the candidate that `promote` may register.

Robustness (`final.lr_factors`): the same configuration with its learning rate multiplied by
each factor trains on every seed too (MLflow stage `robustness`, tag `lr_factor`), so the
report can say whether the ranking of the families survives a small change of learning rate.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch

from pipeline import final_resume, tracking
from pipeline.config import FinalParams, Resources
from pipeline.data.contract import Dataset, load_dataset
from pipeline.errors import ConfigError
from pipeline.interrupts import Interrupted, deferred
from pipeline.io import check_writable, write_json
from pipeline.locks import stage_lock
from pipeline.names import check_name
from pipeline.paths import final_result_path, processed_dir, require, search_result_path
from pipeline.schema import SEARCH_FOR_FINAL, read_record
from pipeline.serving import log_model_from_state
from pipeline.protocol import dataset_problem
from pipeline.spaces import split_config
from pipeline.sweep import run_lookup
from pipeline.sweep.cluster import check_fits, check_shared_storage, ray_session
from pipeline.sweep.context import local_dataset
from pipeline.train import Trainer, TrainSettings, device_for, train_to_budget, with_patience


@dataclass(frozen=True)
class SeedJob:
    dataset: str
    family: str
    dataset_dir: str
    config: dict[str, Any]
    seed: int
    epochs: int
    cpus: float
    gpus: float
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    lr_factor: float = 1.0  # 1: the searched configuration itself; else a robustness rerun
    patience: int | None = None  # epochs without a better validation score before the seed stops
    time_limit_s: float | None = None  # wall-clock cap on the seed's training

    @property
    def run_name(self) -> str:
        nominal = self.lr_factor == 1.0
        return f"final/{self.family}/{'' if nominal else f'lr-x{self.lr_factor:g}/'}seed-{self.seed}"

    @property
    def tags(self) -> dict[str, Any]:
        tags = {"dataset": self.dataset, "family": self.family, "stage": "final", "seed": self.seed}
        return tags if self.lr_factor == 1.0 else {**tags, "stage": "robustness", "lr_factor": f"{self.lr_factor:g}"}


def train_seed(job: SeedJob, data: Dataset) -> dict[str, Any]:
    """Train one seed of `data` (shipped through Ray's object store, so a worker node needs no
    copy of the project); returns its metrics, learning curve and best-validation weights."""
    torch.set_num_threads(max(1, int(job.cpus)))
    client = tracking.MlflowClient(job.tracking_uri)
    run_id = tracking.start_run(client, job.experiment_id, job.run_name, job.tags, parent_run_id=job.parent_run_id)
    tracking.log_params(client, run_id, {**job.config, "seed": job.seed, "epochs": job.epochs,
                                         "lr_factor": job.lr_factor, "final_patience": job.patience,
                                         "time_limit_s": job.time_limit_s})
    try:
        train_cfg, model_cfg = split_config(job.config)
        dataset = local_dataset(data)
        trainer = Trainer(job.family, model_cfg, TrainSettings(**with_patience(train_cfg, job.patience)), dataset,
                          job.seed, device_for(job.gpus), job.epochs)
        run = train_to_budget(trainer, job.epochs, job.time_limit_s, dataset.meta.mode,
                              lambda m: tracking.log_metrics(client, run_id, m, step=trainer.epoch))
        tracking.set_tags(client, run_id, {final_resume.STOP_TAG: run.stop, **({"patience_stopped": "true"}
                                                                              if run.stop == "patience" else {})})
        trainer.model.load_state_dict(run.best_state)  # copies onto the model's device
        val, val_loss = trainer.evaluate_with_loss("val")
        result = {"seed": job.seed, "val": val, "val_loss": val_loss, "test": trainer.evaluate("test"),
                  "num_params": trainer.model.num_parameters(), "seconds_per_epoch": statistics.median(run.seconds),
                  "curve": run.curve, "mlflow_run_id": run_id, "stop": run.stop, "best_epoch": run.best_epoch}
        tracking.log_metrics(client, run_id, {"final_val": val, "final_val_loss": val_loss, "final_test": result["test"],
                                              "num_params": result["num_params"], "best_epoch": run.best_epoch,
                                              "seconds_per_epoch": result["seconds_per_epoch"]})
        if job.lr_factor == 1.0:  # a resumed stage reuses this seed instead of training it again
            final_resume.save_state(client, run_id, run.best_state)
    except Exception as exc:
        tracking.finish(client, run_id, exc)
        raise
    tracking.finish(client, run_id)
    if job.lr_factor != 1.0:  # robustness reruns only report scores: no weights through the object store
        return {**result, "lr_factor": job.lr_factor}
    return {**result, "lr_factor": job.lr_factor, "state_dict": run.best_state}


def _spread(jobs: list[SeedJob], data: Dataset, res: Resources) -> list[dict[str, Any]]:
    remote = ray.remote(train_seed).options(num_cpus=res.cpu, num_gpus=res.gpu)
    data_ref = ray.put(data)  # once, not once per seed
    refs = [remote.remote(job, data_ref) for job in jobs]
    remaining = list(refs)
    with deferred() as interrupt:  # a signal is checked between short waits, never raised inside Ray
        while remaining and interrupt.signum is None:
            ready, remaining = ray.wait(remaining, num_returns=len(remaining), timeout=0.5)
            ray.get(ready)  # a failed seed fails the stage now, as a plain ray.get would
        if interrupt.signum is not None:  # stop the seeds now, not at Ray's shutdown: their runs are closed next
            for ref in remaining:
                ray.cancel(ref, force=True)
    return ray.get(refs)


def _summary(values: list[float]) -> tuple[float, float]:
    # Sample standard deviation (ddof = 1) over seeds; 0 for a single seed.
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _check_protocol(config: dict[str, Any], meta: Any, epochs: int, dataset: str, family: str) -> None:
    """The searched training protocol must work at the final budget too (a step epoch within it)."""
    for key, value in config.items():
        problem = dataset_problem(key, [value], meta.task, bool(meta.vocab_size), epochs)
        if problem:
            raise ConfigError(f"results/{dataset}/search/{family}.json: best_config `{key}` {problem} "
                              f"(the final stage trains {family} for {epochs} epochs: params.yaml "
                              f"`final.epochs` or `final.family_epochs`)")


def final(root: Path, dataset: str, family: str, p: FinalParams) -> dict[str, Any]:
    """Retrain the searched best config of (dataset, family) on every seed of `p.seeds`."""
    check_name(dataset, "dataset name")
    check_name(family, "family name")
    with stage_lock(root, "final", dataset, family):  # one driver per final evaluation: a second is refused
        return _final(root, dataset, family, p.for_family(family))


def _final(root: Path, dataset: str, family: str, p: FinalParams) -> dict[str, Any]:
    data_dir = require(processed_dir(root, dataset), f"ctsweep prepare {dataset}")
    producer = f"ctsweep search {dataset} {family}"
    searched = read_record(require(search_result_path(root, dataset, family), producer), producer, SEARCH_FOR_FINAL)
    if searched.get("status") == "failed":  # nothing to evaluate: say so, and let the other families go on
        return _skip_failed(root, dataset, family, searched)
    if searched["trial_seed"] in p.seeds:
        raise ConfigError(f"params.yaml: key `final.seeds`: {p.seeds} includes the search seed "
                          f"{searched['trial_seed']}; final seeds must be fresh")
    check_writable(final_result_path(root, dataset, family).parent)
    data = load_dataset(data_dir)  # a corrupt split fails now, before Ray and MLflow
    _check_protocol(searched["best_config"], data.meta, p.epochs, dataset, family)
    client, exp_id = tracking.experiment_id(root, dataset)
    _check_time_limit(client, searched, p, dataset, family)
    parent, resumed = final_resume.open_parent(
        client, exp_id, dataset, family, final_resume.fingerprint(dataset, family, searched, p, data_dir),
        {**searched["best_config"], "seeds": p.seeds, "epochs": p.epochs, "final_patience": p.patience,
         "time_limit_s": p.time_limit_s, "lr_factors": p.lr_factors})
    res = p.resources_for(family)
    jobs = [SeedJob(dataset, family, str(data_dir), scaled_lr(searched["best_config"], factor), s, p.epochs,
                    res.cpu, res.gpu, tracking.tracking_uri(root), exp_id, parent, factor, p.patience, p.time_limit_s)
            for factor in (1.0, *p.lr_factors) for s in p.seeds]
    try:
        kept = final_resume.finished_seeds(client, exp_id, parent) if resumed else {}
        todo = [j for j in jobs if final_resume.seed_key(j.seed, j.lr_factor) not in kept]
        done = []
        if todo:
            with ray_session():
                check_shared_storage(tracking.tracking_uri(root))
                check_fits(res, f"final.family_resources.{family}" if family in p.family_resources
                           else "final.resources")
                done = _spread(todo, data, res)
        by_key = {**kept, **{final_resume.seed_key(r["seed"], r["lr_factor"]): r for r in done}}
        # in job order, each with its job's exact factor (a kept run's tag holds it rounded by `:g`)
        results = [{**by_key[final_resume.seed_key(j.seed, j.lr_factor)], "lr_factor": j.lr_factor} for j in jobs]
        record = _evaluate(root, dataset, family, searched, p, results, data)
        record.update(mlflow_parent_run_id=parent, resumed=resumed, reused_seeds=len(kept))
        tracking.log_metrics(client, parent, {k: record[k] for k in ("val_mean", "val_std", "test_mean", "test_std")})
        for r in record["robustness"]:
            tracking.log_metrics(client, parent, {f"lr_x{r['lr_factor']:g}_{k}": r[k]
                                                  for k in ("val_mean", "val_std", "test_mean", "test_std")})
        write_json(final_result_path(root, dataset, family), record)
    except Interrupted as exc:  # the seeds were stopped; the previous result file stays as it was
        with deferred():
            run_lookup.close_interrupted(client, exp_id, parent, str(exc))
        raise
    except BaseException as exc:  # a failed seed: resumable too (finished seeds are kept)
        tracking.finish(client, parent, exc)
        raise
    tracking.set_tags(client, parent, {final_resume.COMPLETE_TAG: "true"})
    tracking.finish(client, parent)
    return record


def _skip_failed(root: Path, dataset: str, family: str, searched: dict[str, Any]) -> dict[str, Any]:
    """The record of a family whose every search trial failed: no seeds, its reasons, exit 0."""
    record = {"status": "failed", "dataset": dataset, "family": family, "metric": searched["metric"],
              "mode": searched["mode"], "n_trials": searched["n_trials"], "n_failed": searched["n_failed"],
              "errors": searched.get("errors", []), "reason": "every search trial failed"}
    write_json(final_result_path(root, dataset, family), record)
    reasons = "; ".join(record["errors"][:3]) or "no reason recorded"
    print(f"ctsweep: warning: {dataset}/{family}: every search trial failed ({reasons}); nothing to evaluate, "
          f"recorded as failed in {final_result_path(root, dataset, family).relative_to(root)}", file=sys.stderr)
    return record


def _measured_epoch_s(client: tracking.MlflowClient, searched: dict[str, Any]) -> float | None:
    """The median training seconds per epoch of the search trial that found the best configuration."""
    best = [t for t in searched.get("trials", []) if t.get("config") == searched["best_config"]
            and t.get("mlflow_run_id")]
    if not best:
        return None
    seconds = [m.value for m in client.get_metric_history(best[0]["mlflow_run_id"], "epoch_seconds")]
    return statistics.median(seconds) if seconds else None


def _check_time_limit(client: tracking.MlflowClient, searched: dict[str, Any], p: FinalParams, dataset: str,
                      family: str) -> None:
    """A cap below one epoch would stop every seed before it trained: refuse it before Ray starts."""
    if p.time_limit_s is None:
        return
    epoch_s = _measured_epoch_s(client, searched)
    if epoch_s is not None and p.time_limit_s < epoch_s:
        raise ConfigError(f"params.yaml: key `final.time_limit_s`: {p.time_limit_s:g} s is below one epoch of "
                          f"{dataset}/{family} as its search measured it ({epoch_s:.3g} s); allowed: at least "
                          f"{epoch_s:.3g}, or null for no cap")


def _evaluate(root: Path, dataset: str, family: str, searched: dict[str, Any], p: FinalParams,
              results: list[dict[str, Any]], data: Dataset) -> dict[str, Any]:
    """The final record from every seed's result; logs the best nominal seed's model for promotion."""
    runs = [r for r in results if r["lr_factor"] == 1.0]
    record = _record(dataset, family, searched, runs, p)
    record["robustness"] = [_robustness(searched["best_config"], searched["mode"], f,
                                        [r for r in results if r["lr_factor"] == f])
                            for f in p.lr_factors]
    best = max(runs, key=lambda r: r["val"]) if searched["mode"] == "max" else min(runs, key=lambda r: r["val"])
    uri = tracking.tracking_uri(root)
    state = best["state_dict"] if "state_dict" in best else final_resume.load_state(uri, best["mlflow_run_id"])
    record["model_uri"] = log_model_from_state(best["mlflow_run_id"], uri, family,
                                               split_config(searched["best_config"])[1],
                                               data.splits["train"].x.shape[2], state, data.meta)
    record["model_seed"] = best["seed"]
    return record


def scaled_lr(config: dict[str, Any], factor: float) -> dict[str, Any]:
    """`config` with its learning rate multiplied by `factor` (every search space searches `lr`)."""
    return config if factor == 1.0 else {**config, "lr": config["lr"] * factor}


def _robustness(config: dict[str, Any], mode: str, factor: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    val_mean, val_std = _summary([r["val"] for r in runs])
    test_mean, test_std = _summary([r["test"] for r in runs])
    return {"lr_factor": factor, "lr": config["lr"] * factor, "n_seeds": len(runs),
            "val_mean": val_mean, "val_std": val_std, "test_mean": test_mean, "test_std": test_std,
            "seeds": [{**{k: r[k] for k in ("seed", "val", "test", "curve", "mlflow_run_id")},
                       **stopping(r, mode)} for r in runs]}


def stopping(result: dict[str, Any], mode: str) -> dict[str, Any]:
    """How a seed's training ended: {"stop": "patience"|"max_epochs"|"time_limit",
    "best_epoch": 1-based epoch whose weights were kept, "epochs_trained"}. A result without
    `best_epoch` (a seed run logged before it was recorded) gets the first epoch of its best
    validation score."""
    curve = result["curve"]
    best = max(range(len(curve)), key=lambda i: (curve[i], -i)) if mode == "max" else \
        min(range(len(curve)), key=lambda i: (curve[i], i))
    return {"stop": result.get("stop", "max_epochs"), "best_epoch": int(result.get("best_epoch") or best + 1),
            "epochs_trained": len(curve)}


def _mean_loss(runs: list[dict[str, Any]]) -> float | None:
    """Mean validation loss at the kept epochs; None when a seed has none recorded."""
    losses = [r.get("val_loss") for r in runs]
    return None if any(v is None for v in losses) else statistics.fmean(losses)


def _record(dataset: str, family: str, searched: dict[str, Any], runs: list[dict[str, Any]],
            p: FinalParams) -> dict[str, Any]:
    val_mean, val_std = _summary([r["val"] for r in runs])
    test_mean, test_std = _summary([r["test"] for r in runs])
    keep = ("seed", "val", "val_loss", "test", "num_params", "seconds_per_epoch", "curve", "mlflow_run_id")
    return {
        "status": "ok", "dataset": dataset, "family": family, "metric": searched["metric"], "mode": searched["mode"],
        "config": searched["best_config"], "epochs": p.epochs, "max_epochs": p.epochs, "patience": p.patience,
        "time_limit_s": p.time_limit_s, "space": searched.get("space"), "n_seeds": len(runs),
        "val_mean": val_mean, "val_std": val_std, "val_loss_mean": _mean_loss(runs),
        "test_mean": test_mean, "test_std": test_std, "params": runs[0]["num_params"],
        "seconds_per_epoch": statistics.median(r["seconds_per_epoch"] for r in runs),
        "n_trials": searched["n_trials"], "n_failed": searched["n_failed"],
        "seeds": [{**{k: r.get(k) for k in keep}, **stopping(r, searched["mode"])} for r in runs],
    }
