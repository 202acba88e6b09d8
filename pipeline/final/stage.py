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
from pathlib import Path
from typing import Any, Sequence

from pipeline.runtime.machine import Machines
from pipeline.final import resume as final_resume
from pipeline.stores import staleness
from pipeline.stores import tracking
from pipeline.config import FinalParams
from pipeline.data.contract import Dataset
from pipeline.data.provenance import provenance_fields
from pipeline.final.counts import mean_loss, split_summary, summed_counts
from pipeline.final.repeats import between_repeats, searched_repeats
from pipeline.final import racing
from pipeline.final.plans import Inputs, Part, Plan, dataset_part, open_part, patience_epochs, resources_key, scaled_lr
from pipeline.final.seeds import SeedJob, spread, train_seed
from pipeline.models import get_model_class
from pipeline.runtime.interrupts import Interrupted, deferred, wrote
from pipeline.stores.files import write_json
from pipeline.stores.locks import take_datasets
from pipeline.names import check_name
from pipeline.progress.display import shown
from pipeline.progress.model import FINAL
from pipeline.progress.read import mark_parent
from pipeline.stores.paths import final_result_path
from pipeline.serving.pyfunc import log_model_from_state
from pipeline.spaces import split_config
from pipeline.sweep import run_lookup
from pipeline.sweep.cluster import check_fits, check_shared_storage, ray_session
from pipeline.training.selection import best_index

__all__ = ["SeedJob", "final", "final_datasets", "final_many", "scaled_lr", "stopping", "train_seed"]


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
    return final_datasets(root, [dataset], families, p, only_stale)[dataset]


def final_datasets(root: Path, datasets: list[str], families: list[str], p: FinalParams, only_stale: bool = False,
                   optional: Sequence[str] = ()) -> dict[str, dict[str, dict[str, Any]]]:
    """final_many over several datasets at once, every seed of them all spread over Ray together;
    returns {dataset: {family: record}}. `optional`: more datasets to take on when they can be
    (`final.share_datasets`), only their out-of-date families: one that is busy or fails a check
    is left, with one line, to its own `ctsweep final`."""
    for name in [*datasets, *optional]:
        check_name(name, "dataset name")
    for family in families:
        check_name(family, "family name")
    with contextlib.ExitStack() as locks:  # one driver per final evaluation: a second is refused
        parts = take_datasets(locks, root, "final", families, datasets, optional,
                              lambda name, extra: dataset_part(root, name, families, p, extra or only_stale))
        for part in parts:  # every dataset passed its checks: now the writes, the warnings, the parent runs
            open_part(part)
        trained = [part for part in parts if part.plans]
        if trained:
            _run(trained)
        return {part.inputs.dataset: {family: part.records[family] for family in families} for part in parts}


def _run(parts: list[Part]) -> None:
    """Train every plan's missing seeds, of every dataset, at once; with `final.race` on, then the
    seeds each look of the race asks for, a round at a time (pipeline.final.racing); then write
    each family's record into its part's `records` (the first error raised once every other
    record is written)."""
    cells = [(part, plan) for part in parts for plan in part.plans]
    trained: dict[tuple[str, str], dict[tuple[int, str, int], dict[str, Any]]] = {
        (part.inputs.dataset, plan.family): {} for part, plan in cells}
    failed: dict[tuple[str, str], BaseException] = {}
    races = {part.inputs.dataset: racing.Race(part) for part in parts}
    try:
        with contextlib.ExitStack() as session:
            started = None
            while True:
                todo = [job for part, plan in cells if (part.inputs.dataset, plan.family) not in failed
                        for job in plan.todo
                        if final_resume.seed_key(job.seed, job.lr_factor, job.repeat)
                        not in trained[(part.inputs.dataset, plan.family)]]
                if todo:
                    if started is None:
                        started = _start(session, parts, cells, races)
                    done, newly_failed = spread(todo, {part.inputs.dataset: part.inputs.data for part in parts
                                                       if part.plans})
                    failed.update(newly_failed)
                    for i, result in done.items():
                        job = todo[i]
                        trained[(job.dataset, job.family)][final_resume.seed_key(job.seed, job.lr_factor, job.repeat)] \
                            = result
                extended = [plan for race in races.values() for plan in race.look(trained, failed)]
                if not extended:
                    break
                if started is not None:
                    for part, plan in cells:
                        if plan in extended:
                            _mark(part, plan, started, races[part.inputs.dataset])
    except Interrupted as exc:  # the seeds were stopped; the previous result files stay as they were
        with deferred():
            for part, plan in cells:
                client, exp_id = part.inputs.experiment
                run_lookup.close_interrupted(client, exp_id, plan.parent, str(exc))
        raise
    except BaseException as exc:
        for part, plan in cells:
            tracking.finish(part.inputs.experiment[0], plan.parent, exc)
        raise
    errors = []
    for part, plan in cells:
        cell = (part.inputs.dataset, plan.family)
        try:
            if cell in failed:
                raise failed[cell]
            part.records[plan.family] = _finish(part.inputs, plan, trained[cell], races[part.inputs.dataset].summary())
        except Interrupted:
            raise
        except BaseException as exc:  # a failed seed, or a record that could not be written: resumable
            tracking.finish(part.inputs.experiment[0], plan.parent, exc)
            errors.append(exc)
    if errors:
        raise errors[0]


def _start(session: contextlib.ExitStack, parts: list[Part], cells: list[tuple[Part, Plan]],
           races: dict[str, racing.Race]) -> float:
    """Ray and the progress display, opened when the first seed is to train; returns the start time."""
    session.enter_context(ray_session())
    check_shared_storage(tracking.tracking_uri(parts[0].inputs.root))
    for _, plan in cells:
        if plan.todo:
            check_fits(plan.p.resources_for(plan.family), resources_key(plan.p, plan.family))
    uri = tracking.tracking_uri(parts[0].inputs.root)
    started = session.enter_context(shown(uri, sorted({part.inputs.experiment[1] for part in parts}), FINAL))
    for part, plan in cells:
        _mark(part, plan, started, races[part.inputs.dataset])
    return started


def _mark(part: Part, plan: Plan, started: float, race: racing.Race) -> None:
    """Tag the family's parent run with what it trains, for progress read from MLflow
    (pipeline.progress.read): its seed runs, those kept from an earlier attempt, their epoch
    budget, its patience, a seed's epoch and its epochs by patience as the search measured them
    (before one is timed or ends here), and the seeds it may come to if the race asks for all."""
    first = plan.jobs[0]
    prior = first.expected_s / first.epochs if first.expected_s > 0 and first.epochs else None
    mark_parent(part.inputs.experiment[0], plan.parent, started, len(plan.jobs), max(j.epochs for j in plan.jobs),
                plan.searched["mode"], kept=len(plan.kept), prior_epoch_s=prior, patience=first.patience,
                prior_epochs=patience_epochs(plan.searched, first.patience, first.epochs),
                most=len(plan.jobs) + race.room(plan))


def _finish(inputs: Inputs, plan: Plan, trained: dict[tuple[int, str, int], dict[str, Any]],
            race: dict[str, Any]) -> dict[str, Any]:
    """Write the family's record from its kept and newly trained seeds; close its parent run."""
    client, _ = inputs.experiment
    p, family = plan.p, plan.family
    by_key = {**plan.kept, **trained}
    # in job order, each with its job's exact factor (a kept run's tag holds it rounded by `:g`)
    results = [{**by_key[final_resume.seed_key(j.seed, j.lr_factor, j.repeat)], "lr_factor": j.lr_factor,
                "repeat": j.repeat} for j in plan.jobs]
    record = _evaluate(inputs.root, inputs.dataset, family, plan.searched, p, results, inputs.data)
    record.update(mlflow_parent_run_id=plan.parent, resumed=plan.resumed, reused_seeds=len(plan.kept), race=race,
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


def _robustness(config: dict[str, Any], mode: str, factor: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    val_mean, val_std = split_summary(runs, "val")
    test_mean, test_std = split_summary(runs, "test")
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


def _record(dataset: str, family: str, searched: dict[str, Any], runs: list[dict[str, Any]],
            p: FinalParams) -> dict[str, Any]:
    val_mean, val_std = split_summary(runs, "val")
    test_mean, test_std = split_summary(runs, "test")
    keep = ("seed", "repeat", "val", "val_loss", "test", "val_counts", "test_counts", "num_params", "seconds_per_epoch", "curve", "mlflow_run_id",
            "steps", "steps_per_epoch", "train_loss_curve", "val_loss_curve", "threads")
    machines = Machines([r.get("machine") for r in runs])
    return {
        "status": "ok", "dataset": dataset, "family": family, "metric": searched["metric"], "mode": searched["mode"],
        "config": searched["best_config"], "epochs": p.epochs, "max_epochs": p.epochs, "patience": p.patience,
        "min_steps": p.min_steps, "validation": p.validation,
        "time_limit_s": p.time_limit_s, "space": searched.get("space"), "n_seeds": len(runs),
        "val_mean": val_mean, "val_std": val_std, "val_loss_mean": mean_loss(runs), **summed_counts(runs),
        "test_mean": test_mean, "test_std": test_std, "params": runs[0]["num_params"],
        "seconds_per_epoch": statistics.median(r["seconds_per_epoch"] for r in runs),
        "n_trials": searched["n_trials"], "n_failed": searched["n_failed"],
        "seeds": [{**{k: r.get(k) for k in keep}, "machine": machines.name(r.get("machine")),
                   **stopping(r, searched["mode"])} for r in runs],
        **between_repeats(searched, runs), "machines": machines.described,
    }

