"""The `final` stage: retrain each family's best configuration over fresh seeds, the seeds of all
of a dataset's families spread over Ray at once (pipeline.final.seeds).

Each seed trains until validation stops improving (`final.patience` epochs without progress,
pipeline.training.selection.PROGRESS_RULE; a family whose searched configuration sets its own
`patience` keeps it), for at most `final.epochs` (or the family's `final.family_epochs`), epochs
of at least `final.min_steps` optimiser steps in all (pipeline.training.budget), and within `final.time_limit_s` of wall
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

import contextlib
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.final import resume as final_resume
from pipeline.stores import staleness
from pipeline.stores import tracking
from pipeline.config import FinalParams
from pipeline.data.contract import Dataset, load_dataset
from pipeline.data.provenance import provenance_fields
from pipeline.errors import ConfigError
from pipeline.final.repeats import between_repeats, searched_repeats, summary as _summary
from pipeline.final.seeds import SeedJob, spread, train_seed
from pipeline.models import get_model_class
from pipeline.models.base import later_steps_problem
from pipeline.runtime.interrupts import Interrupted, deferred, wrote
from pipeline.stores.files import check_writable, write_json
from pipeline.stores.locks import stage_lock
from pipeline.names import check_name
from pipeline.stores.paths import final_result_path, processed_dir, require, search_result_path
from pipeline.config.protocol import dataset_problem
from pipeline.stores.schema import SEARCH_FOR_FINAL, read_record
from pipeline.serving.pyfunc import log_model_from_state
from pipeline.spaces import split_config
from pipeline.sweep import run_lookup
from pipeline.sweep.cluster import check_fits, check_shared_storage, ray_session
from pipeline.training.selection import best_index

__all__ = ["SeedJob", "final", "final_many", "scaled_lr", "stopping", "train_seed"]


def _check_protocol(config: dict[str, Any], meta: Any, epochs: int, dataset: str, family: str) -> None:
    """The searched training protocol must work at the final budget too (a step epoch within it)."""
    for key, value in config.items():
        problem = dataset_problem(key, [value], meta.task, bool(meta.vocab_size), epochs)
        if problem:
            raise ConfigError(f"results/{dataset}/search/{family}.json: best_config `{key}` {problem} "
                              f"(the final stage trains {family} for {epochs} epochs: params.yaml "
                              f"`final.epochs` or `final.family_epochs`)")


def _check_causal(config: dict[str, Any], meta: Any, dataset: str, family: str) -> None:
    """On a per-step dataset the searched configuration reads no later step where the family has a
    causal variant (a search from before issue 30 may still hold one that does): refuse it before Ray."""
    problem = later_steps_problem(get_model_class(family), split_config(config)[1]) if meta.per_step else None
    if problem:
        raise ConfigError(f"results/{dataset}/search/{family}.json: best_config reads later steps on per-step "
                          f"dataset {dataset} ({problem}); rerun `ctsweep search {dataset} {family}`, which "
                          f"searches that variant")


def reads_later_steps(family: str, configs: list[dict[str, Any]], per_step: bool) -> str | None:
    """Why the family, trained with these configurations on a per-step task, reads later steps
    (the final record's `reads_later_steps`, which the report marks); None when it does not."""
    if not per_step:
        return None
    cls = get_model_class(family)
    return next((r for c in configs if (r := cls.reads_later_steps(split_config(c)[1])) is not None), None)


def final(root: Path, dataset: str, family: str, p: FinalParams) -> dict[str, Any]:
    """Retrain the searched best config of (dataset, family) on every seed of `p.seeds`."""
    return final_many(root, dataset, [family], p)[family]


def final_many(root: Path, dataset: str, families: list[str], p: FinalParams,
               only_stale: bool = False) -> dict[str, dict[str, Any]]:
    """The final evaluation of every family of `families` on `dataset`, their seeds all spread
    over Ray at once; returns {family: record}. `only_stale`: skip a family whose result file was
    written from the same searched configuration, params, data and code.

    A family whose seed fails ends FAILED (resumable, its finished seeds kept) without stopping
    the others; the first such error is raised once every other family's result is written.
    """
    check_name(dataset, "dataset name")
    for family in families:
        check_name(family, "family name")
    with contextlib.ExitStack() as locks:  # one driver per final evaluation: a second is refused
        for family in sorted(families):
            locks.enter_context(stage_lock(root, "final", dataset, family))
        return _final_many(root, dataset, families, p, only_stale)


@dataclass
class _Plan:
    """One family's final evaluation: checked, its parent run open, its seeds to train."""

    family: str
    p: FinalParams
    searched: dict[str, Any]
    parent: str
    resumed: bool
    jobs: list[SeedJob]
    kept: dict[tuple[int, str, int], dict[str, Any]]
    digest: str

    @property
    def todo(self) -> list[SeedJob]:
        return [j for j in self.jobs if final_resume.seed_key(j.seed, j.lr_factor, j.repeat) not in self.kept]


class _Inputs:
    """The dataset and the MLflow experiment, opened once and only when a family needs them."""

    def __init__(self, root: Path, dataset: str) -> None:
        self.root, self.dataset = root, dataset
        self.dir = require(processed_dir(root, dataset), f"ctsweep prepare {dataset}")
        self._data: Dataset | None = None
        self._experiment: tuple[tracking.MlflowClient, str] | None = None

    @property
    def data(self) -> Dataset:
        if self._data is None:
            self._data = load_dataset(self.dir)  # a corrupt split fails now, before Ray and MLflow
        return self._data

    @property
    def experiment(self) -> tuple[tracking.MlflowClient, str]:
        if self._experiment is None:
            self._experiment = tracking.experiment_id(self.root, self.dataset)
        return self._experiment


def _final_many(root: Path, dataset: str, families: list[str], p: FinalParams,
                only_stale: bool) -> dict[str, dict[str, Any]]:
    inputs = _Inputs(root, dataset)
    records: dict[str, dict[str, Any]] = {}
    plans: list[_Plan] = []
    for family in families:
        outcome = _plan(inputs, family, p.for_family(family), only_stale)
        if isinstance(outcome, _Plan):
            plans.append(outcome)
        else:
            records[family] = outcome
    if plans:
        records.update(_run(inputs, plans))
    return {family: records[family] for family in families}


def _plan(inputs: _Inputs, family: str, p: FinalParams, only_stale: bool) -> _Plan | dict[str, Any]:
    """The family's plan, or its record when there is nothing to train (failed search, current result)."""
    root, dataset = inputs.root, inputs.dataset
    producer = f"ctsweep search {dataset} {family}"
    searched = read_record(require(search_result_path(root, dataset, family), producer), producer, SEARCH_FOR_FINAL)
    if searched.get("status") == "failed":  # nothing to evaluate: say so, and let the other families go on
        return _skip_failed(root, dataset, family, searched)
    repeats = searched_repeats(searched)
    for trial_seed in [searched["trial_seed"], *(r["trial_seed"] for r in searched.get("repeats", []))]:
        if trial_seed in p.seeds:
            raise ConfigError(f"params.yaml: key `final.seeds`: {p.seeds} includes the search seed "
                              f"{trial_seed}; final seeds must be fresh")
    out = final_result_path(root, dataset, family)
    check_writable(out.parent)
    fp = final_resume.fingerprint(dataset, family, searched, p, inputs.dir)
    digest = staleness.inputs_digest(fp, staleness.code_digest(staleness.FINAL_CODE))
    if only_stale and (current := staleness.current_record(out, digest)) is not None:
        return {**current, "up_to_date": True}  # the flag is for the caller; the file is untouched
    for _, config in repeats:
        _check_protocol(config, inputs.data.meta, p.epochs, dataset, family)
        _check_causal(config, inputs.data.meta, dataset, family)
    client, exp_id = inputs.experiment
    _check_time_limit(client, searched, p, dataset, family)
    parent, resumed = final_resume.open_parent(
        client, exp_id, dataset, family, fp,
        {**searched["best_config"], "seeds": p.seeds, "epochs": p.epochs, "final_patience": p.patience,
         "time_limit_s": p.time_limit_s, "lr_factors": p.lr_factors})
    if inputs.data.meta.provenance:  # not a tag a resumed stage is found by: its fingerprint covers meta.json
        tracking.set_tags(client, parent, provenance_fields(inputs.data.meta))
    res = p.resources_for(family)
    # Robustness reruns (lr factors) train the first repeat's configuration only.
    jobs = [SeedJob(dataset, family, str(inputs.dir), scaled_lr(config, factor), s, p.epochs, res.cpu, res.gpu,
                    tracking.tracking_uri(root), exp_id, parent, factor, p.patience, p.time_limit_s, repeat,
                    p.min_steps, p.validation, inputs.data.meta.provenance)
            for i, (repeat, config) in enumerate(repeats)
            for factor in ((1.0, *p.lr_factors) if i == 0 else (1.0,)) for s in p.seeds]
    kept = final_resume.finished_seeds(client, exp_id, parent) if resumed else {}
    return _Plan(family, p, searched, parent, resumed, jobs, kept, digest)


def _run(inputs: _Inputs, plans: list[_Plan]) -> dict[str, dict[str, Any]]:
    """Train every plan's missing seeds at once, then write each family's record."""
    client, exp_id = inputs.experiment
    todo = [job for plan in plans for job in plan.todo]
    try:
        done, failed = ({}, {})
        if todo:
            with ray_session():
                check_shared_storage(tracking.tracking_uri(inputs.root))
                for plan in plans:
                    if plan.todo:
                        check_fits(plan.p.resources_for(plan.family),
                                   f"final.family_resources.{plan.family}" if plan.family in plan.p.family_resources
                                   else "final.resources")
                done, failed = spread(todo, inputs.data)
    except Interrupted as exc:  # the seeds were stopped; the previous result files stay as they were
        with deferred():
            for plan in plans:
                run_lookup.close_interrupted(client, exp_id, plan.parent, str(exc))
        raise
    except BaseException as exc:
        for plan in plans:
            tracking.finish(client, plan.parent, exc)
        raise
    trained: dict[str, dict[tuple[int, str, int], dict[str, Any]]] = {plan.family: {} for plan in plans}
    for i, result in done.items():
        trained[todo[i].family][final_resume.seed_key(todo[i].seed, todo[i].lr_factor, todo[i].repeat)] = result
    records, errors = {}, []
    for plan in plans:
        try:
            if plan.family in failed:
                raise failed[plan.family]
            records[plan.family] = _finish(inputs, plan, trained[plan.family])
        except Interrupted:
            raise
        except BaseException as exc:  # a failed seed, or a record that could not be written: resumable
            tracking.finish(client, plan.parent, exc)
            errors.append(exc)
    if errors:
        raise errors[0]
    return records


def _finish(inputs: _Inputs, plan: _Plan, trained: dict[tuple[int, str, int], dict[str, Any]]) -> dict[str, Any]:
    """Write the family's record from its kept and newly trained seeds; close its parent run."""
    client, _ = inputs.experiment
    p, family = plan.p, plan.family
    by_key = {**plan.kept, **trained}
    # in job order, each with its job's exact factor (a kept run's tag holds it rounded by `:g`)
    results = [{**by_key[final_resume.seed_key(j.seed, j.lr_factor, j.repeat)], "lr_factor": j.lr_factor,
                "repeat": j.repeat} for j in plan.jobs]
    record = _evaluate(inputs.root, inputs.dataset, family, plan.searched, p, results, inputs.data)
    record.update(mlflow_parent_run_id=plan.parent, resumed=plan.resumed, reused_seeds=len(plan.kept),
                  **provenance_fields(inputs.data.meta), **{staleness.DIGEST_KEY: plan.digest})
    tracking.log_metrics(client, plan.parent, {k: record[k] for k in ("val_mean", "val_std", "test_mean", "test_std")})
    for r in record["robustness"]:
        tracking.log_metrics(client, plan.parent, {f"lr_x{r['lr_factor']:g}_{k}": r[k]
                                                   for k in ("val_mean", "val_std", "test_mean", "test_std")})
    out = final_result_path(inputs.root, inputs.dataset, family)
    with deferred():  # a signal here waits until the record and its parent run agree (stop_message names both)
        write_json(out, record)
        tracking.set_tags(client, plan.parent, {final_resume.COMPLETE_TAG: "true"})
        tracking.finish(client, plan.parent)
        wrote(str(out.relative_to(inputs.root) if out.is_relative_to(inputs.root) else out),
              f"{family}: {len(results)} seed run(s), MLflow parent run FINISHED")
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
    best = runs[best_index([(r["val"], r.get("val_loss")) for r in runs], searched["mode"]) or 0]  # TIE_RULE
    uri = tracking.tracking_uri(root)
    state = best["state_dict"] if "state_dict" in best else final_resume.load_state(uri, best["mlflow_run_id"])
    config = dict(searched_repeats(searched)).get(best.get("repeat", 0), searched["best_config"])  # its repeat's
    record["model_uri"] = log_model_from_state(best["mlflow_run_id"], uri, family, split_config(config)[1],
                                               data.splits["train"].x.shape[2], state, data.meta)
    record["model_seed"], record["model_repeat"], record["model_config"] = best["seed"], best.get("repeat", 0), config
    reason = reads_later_steps(family, [c for _, c in searched_repeats(searched)], data.meta.per_step)
    if reason is not None:  # only then: every other record stays as it was
        record["reads_later_steps"] = reason
    return record


def scaled_lr(config: dict[str, Any], factor: float) -> dict[str, Any]:
    """`config` with its learning rate multiplied by `factor` (every search space searches `lr`)."""
    return config if factor == 1.0 else {**config, "lr": config["lr"] * factor}


def _robustness(config: dict[str, Any], mode: str, factor: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    val_mean, val_std = _summary([r["val"] for r in runs])
    test_mean, test_std = _summary([r["test"] for r in runs])
    return {"lr_factor": factor, "lr": config["lr"] * factor, "n_seeds": len(runs),
            "val_mean": val_mean, "val_std": val_std, "test_mean": test_mean, "test_std": test_std,
            "seeds": [{**{k: r.get(k) for k in ("seed", "val", "test", "curve", "mlflow_run_id", "steps")},
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
    keep = ("seed", "repeat", "val", "val_loss", "test", "num_params", "seconds_per_epoch", "curve", "mlflow_run_id",
            "steps", "steps_per_epoch", "train_loss_curve", "val_loss_curve")
    return {
        "status": "ok", "dataset": dataset, "family": family, "metric": searched["metric"], "mode": searched["mode"],
        "config": searched["best_config"], "epochs": p.epochs, "max_epochs": p.epochs, "patience": p.patience,
        "min_steps": p.min_steps, "validation": p.validation,
        "time_limit_s": p.time_limit_s, "space": searched.get("space"), "n_seeds": len(runs),
        "val_mean": val_mean, "val_std": val_std, "val_loss_mean": _mean_loss(runs),
        "test_mean": test_mean, "test_std": test_std, "params": runs[0]["num_params"],
        "seconds_per_epoch": statistics.median(r["seconds_per_epoch"] for r in runs),
        "n_trials": searched["n_trials"], "n_failed": searched["n_failed"],
        "seeds": [{**{k: r.get(k) for k in keep}, **stopping(r, searched["mode"])} for r in runs],
        **between_repeats(searched, runs),
    }

