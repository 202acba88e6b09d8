"""The final stage's budget (issue 16): early stopping on validation with a patience, a maximum
number of epochs and a wall-clock cap per seed; why each seed stopped, in the record; a family
whose every search trial failed is recorded as failed and skipped; budgets no seed could use are
refused before Ray starts. Real local Ray and a real SQLite MLflow store in a temporary folder."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.stores import tracking
from pipeline.config import FinalParams, XorParams, load_params
from pipeline.data.contract import load_dataset, save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError
from pipeline.final.plans import dataset_part, expected_seconds, open_part, searched_timing
from pipeline.final.seeds import submission_order
from pipeline.final.stage import final, final_many, stopping
from pipeline.stores.paths import final_result_path, processed_dir, search_result_path
from pipeline.training.budget import MIN_STEPS
from pipeline.training.stopping import train_to_budget
from tests.conftest import default_params, write_params

# A small CfC (Hasani et al. 2022, Table S1's optimiser and schedule) that trains in well under a
# second per epoch here.
CONFIG = {"lr": 0.01, "optimizer": "rmsprop", "lr_schedule": "none", "grad_clip": 1.0, "weight_decay": 0.0,
          "batch_size": 64, "hidden_size": 16, "backbone_units": 16, "backbone_layers": 1,
          "backbone_activation": "relu", "backbone_dropout": 0.0, "time_scale": 1.0, "init_gain": 1.0}


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch, local_ray: None) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=200, n_test=50, seed=3)))
    return project


def _searched(root: Path, config: dict, **extra) -> None:
    record = {"dataset": "xor", "family": "cfc", "metric": "accuracy", "mode": "max", "best_config": config,
              "best_val": 0.5, "trial_seed": 1000, "n_trials": 1, "n_failed": 0, "status": "ok", "trials": [],
              **extra}
    path = search_result_path(root, "xor", "cfc")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _final(root: Path, **budget) -> dict:
    return final(root, "xor", "cfc", FinalParams(seeds=[1, 2], lr_factors=[], **budget))


@pytest.mark.slow
def test_a_seed_whose_validation_stops_improving_stops_after_patience_epochs(root: Path) -> None:
    # A learning rate of 1e-12 leaves the weights as they were: validation never beats epoch 1.
    _searched(root, {**CONFIG, "lr": 1e-12})
    record = _final(root, epochs=20, patience=2, min_steps=200)  # epochs of 4 passes (12 steps)
    assert record["status"] == "ok" and record["patience"] == 2 and record["max_epochs"] == 20
    for seed in record["seeds"]:
        # patience 2 would stop at epoch 3, but never before MIN_STEPS optimiser steps: the first
        # epoch that reaches them
        epochs = max(3, -(-MIN_STEPS // seed["steps_per_epoch"]))
        assert epochs < 20 and seed["steps"] == epochs * seed["steps_per_epoch"] >= MIN_STEPS
        assert seed["stop"] == "patience" and seed["epochs_trained"] == epochs and seed["best_epoch"] == 1
        assert len(seed["curve"]) == epochs
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    run = client.get_run(record["seeds"][0]["mlflow_run_id"])
    assert run.data.tags["stop"] == "patience" and run.info.status == "FINISHED"
    assert run.data.tags["outcome"] == "stopped_early"  # ended before its last epoch, not failed
    assert json.loads(final_result_path(root, "xor", "cfc").read_text())["seeds"][0]["stop"] == "patience"


@pytest.mark.slow
def test_without_patience_every_epoch_runs_and_the_best_epoch_is_kept(root: Path) -> None:
    _searched(root, CONFIG)
    record = _final(root, epochs=4)
    assert record["patience"] is None
    for seed in record["seeds"]:
        assert seed["stop"] == "max_epochs" and seed["epochs_trained"] == 4
        assert seed["curve"][seed["best_epoch"] - 1] == max(seed["curve"])
        assert seed["val"] == pytest.approx(max(seed["curve"]), abs=1e-6)  # the best epoch's weights were scored
    # The kept epoch's validation loss, as the epoch logged it to MLflow, and its mean decides ties
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    for seed in record["seeds"]:
        history = {m.step: m.value for m in client.get_metric_history(seed["mlflow_run_id"], "val_loss")}
        assert len(history) == 4 and seed["val_loss"] == pytest.approx(history[seed["best_epoch"]], rel=1e-5)
        assert client.get_run(seed["mlflow_run_id"]).data.metrics["best_epoch"] == seed["best_epoch"]
    assert record["val_loss_mean"] == pytest.approx(sum(s["val_loss"] for s in record["seeds"]) / 2)


@pytest.mark.slow
def test_seed_runs_are_named_seed_first_and_the_documented_filter_finds_exactly_the_seeds(root: Path) -> None:
    _searched(root, CONFIG)
    record = final(root, "xor", "cfc", FinalParams(seeds=[1, 2], lr_factors=[0.5], epochs=1))
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name("ctsweep/xor").experiment_id
    runs = client.search_runs([exp], "tags.family = 'cfc'")
    assert sorted(r.info.run_name for r in runs) == [
        "final/cfc", "seed-1/final/cfc", "seed-1/lr-x0.5/final/cfc", "seed-2/final/cfc", "seed-2/lr-x0.5/final/cfc"]
    # The filters docs/how-to/mlflow.md gives: the parent carries stage `final` too, `run_level` leaves it out
    assert len(client.search_runs([exp], "tags.stage = 'final' and tags.family = 'cfc'")) == 3
    seeds = client.search_runs([exp], "tags.stage = 'final' and tags.run_level = 'child' and tags.family = 'cfc'")
    assert sorted(r.info.run_id for r in seeds) == sorted(s["mlflow_run_id"] for s in record["seeds"])
    [parent] = client.search_runs([exp], "tags.stage = 'final' and tags.run_level = 'parent' and tags.family = 'cfc'")
    assert parent.info.run_id == record["mlflow_parent_run_id"]
    reruns = client.search_runs([exp], "tags.stage = 'robustness' and tags.lr_factor = '0.5' and "
                                       "tags.run_level = 'child'")
    assert sorted(r.data.tags["seed"] for r in reruns) == ["1", "2"]
    assert all((r.info.status, r.data.tags["outcome"]) == ("FINISHED", "completed") for r in [*seeds, *reruns])


@pytest.mark.slow
def test_the_wall_clock_cap_stops_a_seed_between_epochs(root: Path) -> None:
    # No epoch fits in 1 ms: the first always runs (nothing to keep otherwise), the second would overrun.
    _searched(root, CONFIG)
    record = _final(root, epochs=50, time_limit_s=0.001)
    assert record["time_limit_s"] == 0.001
    assert [s["stop"] for s in record["seeds"]] == ["time_limit", "time_limit"]
    assert [s["epochs_trained"] for s in record["seeds"]] == [1, 1]


def test_a_cap_below_one_measured_epoch_is_refused_before_ray_starts(root: Path) -> None:
    client, exp_id = tracking.experiment_id(root, "xor")
    run_id = tracking.start_run(client, exp_id, "trial", {"stage": "search"})
    tracking.log_metrics(client, run_id, {"epoch_seconds": 2.0}, step=1)
    tracking.log_metrics(client, run_id, {"epoch_seconds": 2.5}, step=2)
    tracking.finish(client, run_id)
    _searched(root, CONFIG, trials=[{"config": CONFIG, "best_val": 0.5, "mlflow_run_id": run_id}])
    with pytest.raises(ConfigError, match=r"final.time_limit_s.*1 s is below one epoch of xor/cfc.*2.25"):
        _final(root, epochs=5, time_limit_s=1)
    assert not final_result_path(root, "xor", "cfc").exists()


def test_a_family_whose_every_search_trial_failed_is_recorded_as_failed_and_skipped(
        root: Path, capsys: pytest.CaptureFixture) -> None:
    _searched(root, None, status="failed", best_val=None, n_trials=3, n_failed=3,
              errors=["first epoch exceeded the trial time limit of 0.001 s (3 trials)"])
    record = _final(root, epochs=5)
    assert record["status"] == "failed" and record["n_failed"] == 3 and "time limit" in record["errors"][0]
    assert json.loads(final_result_path(root, "xor", "cfc").read_text()) == record
    err = capsys.readouterr().err
    assert err.startswith("ctsweep: warning: xor/cfc: every search trial failed") and "time limit" in err


@pytest.mark.parametrize("final_section, message", [
    ({"epochs": 5, "patience": 0}, "key `final.patience`"),
    ({"epochs": 5, "patience": 6}, "patience is 6, more than the 5 epochs"),
    ({"epochs": 50, "family_epochs": {"cfc": 4}, "patience": 10}, "more than the 4 epochs"),
    ({"epochs": 5, "time_limit_s": 0}, "key `final.time_limit_s`"),
    ({"epochs": 5, "cells": {"xor": {"epochs": 3}}}, "key 'xor' is not <dataset>/<family>"),
    ({"epochs": 5, "cells": {"xor/cfc": {"patience": 6}}}, "cells.xor/cfc: patience 6 is more than the cell's 5 epochs"),
    ({"epochs": 20, "cells": {"elsewhere/cfc": {"epochs": 18}}}, "'elsewhere/cfc' names a dataset or family this run"),
    ({"epochs": 5, "cells": {"xor/cfc": {"epochs": 0}}}, r"key `final.cells.'xor/cfc'.epochs`: .*\(got 0\)"),
])
def test_budgets_no_seed_could_use_are_refused_in_one_line(project: Path, final_section: dict, message: str) -> None:
    raw = default_params()
    raw["final"] = {**raw["final"], **final_section}
    write_params(project, raw)
    with pytest.raises(ConfigError, match=message) as caught:
        load_params(project / "params.yaml")
    assert "\n" not in str(caught.value)


def test_a_refusal_comes_alone_before_a_failed_search_s_warning_and_record(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """lstm_dt's every search trial failed (a warning and a failed record, once the command goes on);
    cfc's search seed is among the final seeds (refused): the refusal is all stderr says, and
    lstm_dt's record is not written, nor any parent run opened."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=60, n_test=20, seed=3)))
    _searched(project, CONFIG)
    failed = search_result_path(project, "xor", "lstm_dt")
    failed.write_text(json.dumps({"status": "failed", "metric": "accuracy", "mode": "max", "n_trials": 2, "n_failed": 2,
                                  "best_config": None, "best_val": None, "errors": ["NaN loss"]}))
    with pytest.raises(ConfigError, match="final seeds must be fresh"):
        final_many(project, "xor", ["lstm_dt", "cfc"], FinalParams(seeds=[1000, 1], lr_factors=[]))
    assert capsys.readouterr().err == ""
    assert not final_result_path(project, "xor", "lstm_dt").exists()
    assert not (project / "mlflow.db").exists() or not _final_parents(project)


def _final_parents(root: Path) -> list:
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    exp = client.get_experiment_by_name("ctsweep/xor")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.stage = 'final'")


def test_a_search_budget_asha_cannot_split_into_rungs_is_refused(project: Path) -> None:
    raw = default_params()
    raw["search"] = {**raw["search"], "epochs": 4, "asha": {"grace_period": 5}}
    write_params(project, raw)
    with pytest.raises(ConfigError, match=r"key `search`.*grace_period is 5, more than search.epochs \(4\)"):
        load_params(project / "params.yaml")


def test_the_best_epoch_is_the_first_best_in_either_direction() -> None:
    assert stopping({"curve": [0.5, 0.7, 0.7, 0.6]}, "max") == {"stop": "max_epochs", "best_epoch": 2,
                                                                 "epochs_trained": 4}
    assert stopping({"curve": [3.0, 1.0, 1.0], "stop": "patience"}, "min")["best_epoch"] == 2


class _FakeTrainer:
    """run_epoch returns the next validation score; `patience` as pipeline.training.loop.Trainer counts it."""

    def __init__(self, scores: list[float], patience: int = 0, losses: list[float] | None = None,
                 steps_per_epoch: int = 100) -> None:
        self.scores, self.patience, self.epoch, self.best, self.stale = scores, patience, 0, None, 0
        self.losses = losses
        self.steps, self.steps_per_epoch = 0, steps_per_epoch

    def run_epoch(self) -> dict:
        val = self.scores[self.epoch]
        loss = None if self.losses is None else self.losses[self.epoch]
        self.epoch += 1
        self.steps += self.steps_per_epoch
        self.best, self.stale = (val, 0) if self.best is None or val > self.best else (self.best, self.stale + 1)
        return {"val_metric": val, "epoch_seconds": 0.0, "train_loss": 1.0, **({} if loss is None else {"val_loss": loss})}

    @property
    def stopped_early(self) -> bool:
        return 0 < self.patience <= self.stale

    def weights(self) -> dict:
        return {"epoch": self.epoch}


def test_train_to_budget_keeps_the_best_epoch_and_says_why_it_stopped() -> None:
    scores = [0.5, 0.7, 0.6, 0.6, 0.9, 0.9]
    seen: list[dict] = []
    run = train_to_budget(_FakeTrainer(scores), 6, None, "max", seen.append)
    assert (run.curve, run.best_state, run.best_epoch, run.stop) == (scores, {"epoch": 5}, 5, "max_epochs")
    assert [m["val_metric"] for m in seen] == scores  # no loss: a tie keeps the first best epoch
    run = train_to_budget(_FakeTrainer(scores, patience=2), 6, None, "max")
    assert (len(run.curve), run.best_state, run.stop) == (4, {"epoch": 2}, "patience")
    run = train_to_budget(_FakeTrainer(scores), 6, 1e-9, "max")
    assert (len(run.curve), run.stop) == (1, "time_limit")  # at least one epoch, then the cap


def test_patience_never_ends_a_seed_before_the_step_floor() -> None:
    # 30 steps an epoch, best at epoch 2, patience 1: stops at epoch 4 (120 steps), not at epoch 3 (90)
    scores = [0.5, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6]
    run = train_to_budget(_FakeTrainer(scores, patience=1, steps_per_epoch=30), 7, None, "max")
    assert (len(run.curve), run.steps, run.stop, run.best_epoch) == (4, 120, "patience", 2)
    assert MIN_STEPS == 100  # the number the not-converged rule (marks.seed_reasons "short") uses
    # 10 steps an epoch: 7 epochs are 70 steps, patience never fires, the budget ends the run
    run = train_to_budget(_FakeTrainer(scores, patience=1, steps_per_epoch=10), 7, None, "max")
    assert (len(run.curve), run.stop) == (7, "max_epochs")
    # the floor is a parameter: 0 restores plain patience
    run = train_to_budget(_FakeTrainer(scores, patience=1, steps_per_epoch=10), 7, None, "max", min_steps=0)
    assert (len(run.curve), run.stop) == (3, "patience")


def test_a_tie_on_the_metric_keeps_the_epoch_of_lower_validation_loss() -> None:
    scores = [0.5, 0.9, 0.8, 0.9, 0.9, 0.7]
    losses = [1.0, 0.40, 0.3, 0.35, 0.50, 0.1]  # epoch 3's loss is lower, but its accuracy is not tied
    run = train_to_budget(_FakeTrainer(scores, losses=losses), 6, None, "max")
    assert (run.best_state, run.best_epoch) == ({"epoch": 4}, 4)
    assert run.val_losses == losses and run.train_losses == [1.0] * 6 and run.steps == 600
    # lower is better (an MSE): the same rule
    run = train_to_budget(_FakeTrainer([2.0, 1.0, 1.0], losses=[2.0, 1.0, 0.5]), 3, None, "min")
    assert run.best_epoch == 3


def test_the_recorded_best_epoch_wins_over_the_first_best_of_the_curve() -> None:
    assert stopping({"curve": [0.5, 0.9, 0.9], "best_epoch": 3}, "max")["best_epoch"] == 3


def test_seeds_start_longest_expected_first_from_the_searchs_seconds_per_step(root: Path) -> None:
    client, exp_id = tracking.experiment_id(root, "xor")
    run_id = tracking.start_run(client, exp_id, "trial", {"stage": "search"})
    for epoch, (seconds, steps) in enumerate([(2.0, 4), (3.0, 8), (2.5, 12)], 1):  # 4 steps an epoch
        tracking.log_metrics(client, run_id, {"epoch_seconds": seconds, "steps": steps}, step=epoch)
    tracking.finish(client, run_id)
    _searched(root, CONFIG, trials=[{"config": CONFIG, "best_val": 0.5, "mlflow_run_id": run_id}])
    searched = json.loads(search_result_path(root, "xor", "cfc").read_text())
    timing = searched_timing(client, searched)
    assert (timing.epoch_s, timing.steps_per_epoch, timing.step_s) == (2.5, 4, 0.625)
    # 140 training series at batch 64: 3 steps a pass; 10 epochs of at least 60 steps: 2 passes an epoch
    p = FinalParams(seeds=[1, 2], lr_factors=[], epochs=10, min_steps=60)
    assert expected_seconds(timing, CONFIG, 140, p) == 0.625 * 10 * 6
    assert expected_seconds(None, CONFIG, 140, p) == 0.0  # unmeasured: started in the given order
    part = dataset_part(root, "xor", ["cfc"], p, False)
    open_part(part)
    [plan] = part.plans
    n_train = len(load_dataset(processed_dir(root, "xor")).splits["train"].y)
    assert [j.expected_s for j in plan.jobs] == [expected_seconds(timing, CONFIG, n_train, p)] * 2
    assert plan.jobs[0].expected_s > 0
    jobs = [replace(plan.jobs[0], expected_s=s) for s in (1.0, 5.0, 0.0, 5.0, 2.0)]
    assert submission_order(jobs) == [1, 3, 4, 0, 2]


@pytest.mark.slow
def test_a_cells_own_budget_trains_its_seeds_and_no_other_cells(root: Path) -> None:
    """`final.cells`: one (dataset, family) trains to its own epochs (no patience: every epoch runs)."""
    _searched(root, CONFIG)
    p = FinalParams(seeds=[1, 2], lr_factors=[], epochs=1, cells={"xor/cfc": {"epochs": 3}})
    assert (p.for_cell("xor", "cfc").epochs, p.for_cell("other", "cfc").epochs, p.for_cell("xor", "ncde").epochs) == (3, 1, 1)
    record = final(root, "xor", "cfc", p)
    assert record["max_epochs"] == 3 and [s["epochs_trained"] for s in record["seeds"]] == [3, 3]
