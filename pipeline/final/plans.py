"""What the final stage checks and plans before Ray starts, per dataset and family: the searched
record it trains from, the protocol and causality checks, the time limit against one searched
epoch, the MLflow parent run (opened, or found again and resumed) and the seed jobs still to train.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import FinalParams
from pipeline.config.protocol import dataset_problem
from pipeline.data.contract import Dataset, load_dataset
from pipeline.data.provenance import provenance_fields
from pipeline.errors import ConfigError
from pipeline.final import resume as final_resume
from pipeline.final.repeats import searched_repeats
from pipeline.final.seeds import SeedJob
from pipeline.models import get_model_class
from pipeline.models.base import later_steps_problem
from pipeline.spaces import split_config
from pipeline.stores import staleness, tracking
from pipeline.stores.files import check_writable, write_json
from pipeline.stores.paths import final_result_path, processed_dir, require, search_result_path
from pipeline.stores.schema import SEARCH_FOR_FINAL, read_record
from pipeline.sweep.cluster import check_fits, local_node
from pipeline.training.budget import steps_per_epoch


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


@dataclass
class Plan:
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


class Inputs:
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


@dataclass(frozen=True)
class Checked:
    """One family past its checks, with what opening its plan needs (open_part). `failed`: its
    every search trial failed; nothing to train, and its failed record is written at opening."""

    family: str
    p: FinalParams
    searched: dict[str, Any]
    fingerprint: str = ""
    digest: str = ""
    timing: Timing | None = None
    failed: bool = False


@dataclass
class Part:
    """One dataset's share of the stage: its inputs, its families' checks, then their plans, and
    their records (those with nothing to train at once, the others once trained)."""

    inputs: Inputs
    plans: list[Plan]
    records: dict[str, dict[str, Any]]
    checked: list[Checked] = field(default_factory=list)


def dataset_part(root: Path, dataset: str, families: list[str], p: FinalParams, only_stale: bool) -> Part:
    """Everything checked about one dataset's final evaluations before Ray starts. Nothing is
    written or opened, and nothing printed, until every dataset of the command passed (open_part)."""
    inputs = Inputs(root, dataset)
    part = Part(inputs, [], {})
    for family in families:
        outcome = family_check(inputs, family, p.for_cell(dataset, family), only_stale)
        if isinstance(outcome, Checked):
            part.checked.append(outcome)
        else:
            part.records[family] = outcome
    return part


def open_part(part: Part) -> None:
    """After every check of the command: each checked family's plan, its parent run opened (or
    found and resumed), or, for a family whose every search trial failed, its record written."""
    for checked in part.checked:
        if checked.failed:
            part.records[checked.family] = _skip_failed(part.inputs.root, part.inputs.dataset, checked.family,
                                                        checked.searched)
        else:
            part.plans.append(_open_plan(part.inputs, checked))
    part.checked = []


def family_check(inputs: Inputs, family: str, p: FinalParams, only_stale: bool) -> Checked | dict[str, Any]:
    """The family checked, or its current record when it is up to date (nothing to train)."""
    root, dataset = inputs.root, inputs.dataset
    producer = f"ctsweep search {dataset} {family}"
    searched = read_record(require(search_result_path(root, dataset, family), producer), producer, SEARCH_FOR_FINAL)
    if searched.get("status") == "failed":  # nothing to evaluate: said once every check passed; the others go on
        return Checked(family, p, searched, failed=True)
    repeats = searched_repeats(searched)
    for trial_seed in [searched["trial_seed"], *(r["trial_seed"] for r in searched.get("repeats", []))]:
        if trial_seed in p.seeds:
            raise ConfigError(f"params.yaml: key `final.seeds`: {p.seeds} includes the search seed "
                              f"{trial_seed}; final seeds must be fresh")
    out = final_result_path(root, dataset, family)
    check_writable(out.parent)
    fp = final_resume.fingerprint(dataset, family, searched, p, inputs.dir)
    # the race decides which seeds the record holds, not what any seed scores: in the record's
    # digest (a changed race writes the record again), not in the fingerprint (finished seeds stay usable)
    race = f":race={p.race.model_dump_json()}" if p.race.enabled else ""
    digest = staleness.inputs_digest(fp + race, staleness.code_digest(staleness.FINAL_CODE))
    if only_stale and (current := staleness.current_record(out, digest)) is not None:
        return {**current, "up_to_date": True}  # the flag is for the caller; the file is untouched
    for _, config in repeats:
        _check_protocol(config, inputs.data.meta, p.epochs, dataset, family)
        _check_causal(config, inputs.data.meta, dataset, family)
    if (here := local_node()) is not None:  # a local instance: what this machine cannot meet, before any write
        check_fits(p.resources_for(family), resources_key(p, family), nodes=here)
    timing = searched_timing(inputs.experiment[0], searched)
    _check_time_limit(timing, p, dataset, family)
    return Checked(family, p, searched, fp, digest, timing)


def _open_plan(inputs: Inputs, checked: Checked) -> Plan:
    """The family's plan: its parent run opened, or found again and resumed, and its seed jobs."""
    root, dataset, family, p, searched = inputs.root, inputs.dataset, checked.family, checked.p, checked.searched
    fp, digest, timing = checked.fingerprint, checked.digest, checked.timing
    repeats = searched_repeats(searched)
    client, exp_id = inputs.experiment
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
                    p.min_steps, p.validation, inputs.data.meta.provenance,
                    expected_seconds(timing, config, len(inputs.data.splits["train"].y), p))
            for i, (repeat, config) in enumerate(repeats)
            for factor in ((1.0, *p.lr_factors) if i == 0 else (1.0,)) for s in p.seeds]
    kept = final_resume.finished_seeds(client, exp_id, parent) if resumed else {}
    return Plan(family, p, searched, parent, resumed, jobs, kept, digest)


def resources_key(p: FinalParams, family: str) -> str:
    """The params.yaml key that set the family's final-stage resources."""
    return f"final.family_resources.{family}" if family in p.family_resources else "final.resources"


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


@dataclass(frozen=True)
class Timing:
    """How fast the search trial that found the best configuration trained: the median seconds
    of its epochs and its optimiser steps per epoch (from its MLflow metrics)."""

    epoch_s: float
    steps_per_epoch: int

    @property
    def step_s(self) -> float:
        return self.epoch_s / self.steps_per_epoch


def searched_timing(client: tracking.MlflowClient, searched: dict[str, Any]) -> Timing | None:
    """The best configuration's search trial's Timing; None when it logged no epoch."""
    best = [t for t in searched.get("trials", []) if t.get("config") == searched["best_config"]
            and t.get("mlflow_run_id")]
    if not best:
        return None
    run_id = best[0]["mlflow_run_id"]
    seconds = [m.value for m in client.get_metric_history(run_id, "epoch_seconds")]
    steps = sorted(client.get_metric_history(run_id, "steps"), key=lambda m: m.step)
    if not seconds:
        return None
    # `steps` counts the run's optimiser steps after each epoch: the first is one epoch's
    per_epoch = int(steps[0].value) if steps and steps[0].value >= 1 else 1
    return Timing(statistics.median(seconds), per_epoch)


def expected_seconds(timing: Timing | None, config: dict[str, Any], n_train: int, p: FinalParams) -> float:
    """A seed's training seconds at its whole budget, `p.epochs` epochs of the final's own steps
    per epoch (pipeline.training.budget) at the search's seconds per step; 0 when unmeasured.
    An upper bound (patience usually stops a seed sooner) that only orders the seeds' start."""
    if timing is None:
        return 0.0
    batch = int(config.get("batch_size", n_train))  # every space sets it; the whole split otherwise
    return timing.step_s * p.epochs * steps_per_epoch(n_train, batch, p.epochs, p.min_steps)


def patience_epochs(searched: dict[str, Any], patience: int | None, epochs: int) -> float | None:
    """The epochs a final seed trains when patience stops it, as the family's search measured: its
    chosen configuration's trials (one per search repeat) reached their best validation score at
    epoch b, so a seed that improves as long is stopped at b + patience (within `epochs`); the
    mean over those trials. Only the chosen configuration's: the others' learning rates and sizes
    decide other curves, and a trial ASHA stopped at a rung tells where the rung is, not where
    validation stops improving. A trial still improving at its last epoch gives a low guess (the
    seed may well improve for longer): the low end of the progress display's range, which is
    what it is for. None without patience or a trial that logged its best epoch."""
    if not patience:
        return None
    chosen = [config for _, config in searched_repeats(searched)]
    best = [int(t["best_epoch"]) for t in searched.get("trials", [])
            if t.get("config") in chosen and t.get("status", "ok") == "ok" and t.get("best_epoch")]
    return statistics.fmean(min(epochs, b + patience) for b in best) if best else None


def _check_time_limit(timing: Timing | None, p: FinalParams, dataset: str, family: str) -> None:
    """A cap below one epoch would stop every seed before it trained: refuse it before Ray starts."""
    if p.time_limit_s is None:
        return
    if timing is not None and p.time_limit_s < timing.epoch_s:
        raise ConfigError(f"params.yaml: key `final.time_limit_s`: {p.time_limit_s:g} s is below one epoch of "
                          f"{dataset}/{family} as its search measured it ({timing.epoch_s:.3g} s); allowed: at least "
                          f"{timing.epoch_s:.3g}, or null for no cap")


def scaled_lr(config: dict[str, Any], factor: float) -> dict[str, Any]:
    """`config` with its learning rate multiplied by `factor` (every search space searches `lr`)."""
    return config if factor == 1.0 else {**config, "lr": config["lr"] * factor}
