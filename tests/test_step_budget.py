"""Issue 29: training length counted in optimiser steps, early stopping that sees the validation
loss, batches never above the training split, and a † that notices a seed cut short. The final
stage and the search run on a real local Ray with a real SQLite MLflow store in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipeline.config import FinalParams, SearchParams, XorParams, load_params
from pipeline.data.contract import Dataset, load_dataset, save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError, TrialFailedError
from pipeline.final.stage import final
from pipeline.reporting.marks import MIN_STEPS, NOT_CONVERGED, cell_marks
from pipeline.spaces import load_space
from pipeline.stores.paths import processed_dir, search_result_path
from pipeline.sweep.search import search
from pipeline.config.params import MAX_STEPS
from pipeline.training.budget import batches_per_pass, passes_per_epoch, steps_per_epoch
from pipeline.training.loop import Trainer, TrainSettings
from pipeline.training.stopping import train_to_budget
from pipeline.training.selection import LOSS_PROGRESS, lowers_loss, progressed
from tests.conftest import REPO, default_params, write_params
from tests.test_final_budget import CONFIG as FINAL_CONFIG

# test_final_budget's small CfC at batch 256: above any tiny split here
CONFIG = {**FINAL_CONFIG, "batch_size": 256}


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch, local_ray: None) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # 40 series: 36 train, 4 validation, as small as the UCR/UEA datasets of the issue
    save_dataset(processed_dir(project, "tiny"), build_xor("tiny", XorParams(kind="xor", n_train=40, n_test=20, seed=3)))
    return project


def _trainer(config: dict, data: Dataset, **budget: int) -> Trainer:
    """A real CfC trainer of `config` (training keys split from the model's) on CPU, seed 0."""
    train = {k: v for k, v in config.items() if k in TrainSettings.__dataclass_fields__}
    model = {k: v for k, v in config.items() if k not in train}
    return Trainer("cfc", model, TrainSettings(**train), data, seed=0, **budget)


# ------------------------------------------------------------------------------- the arithmetic


def test_the_default_floors_leave_japanese_vowels_at_batch_32_alone_and_lengthen_small_splits() -> None:
    params = load_params(REPO / "params.yaml")
    s, f = params.search, params.final
    # JapaneseVowels: 270 archive training series, 20 % to validation -> 216; batch 32 -> 7 steps a pass
    assert batches_per_pass(216, 32) == 7
    assert passes_per_epoch(216, 32, s.epochs, s.min_steps) == 1 and passes_per_epoch(216, 32, f.epochs, f.min_steps) == 1
    assert steps_per_epoch(216, 1024, f.epochs, f.min_steps) == 7  # one step a pass, seven passes an epoch
    # a 40-series dataset (32 train): batch 32 is one step a pass; the final epoch is 7 passes
    assert passes_per_epoch(32, 32, f.epochs, f.min_steps) == 7 and passes_per_epoch(32, 32, s.epochs, s.min_steps) == 7
    assert passes_per_epoch(10_000, 32, f.epochs, f.min_steps) == 1  # a large split: nothing changes
    assert passes_per_epoch(32, 32, 5, 1) == 1  # no floor


def test_a_real_trainer_counts_its_steps_and_never_batches_above_the_split(root: Path) -> None:
    data = load_dataset(processed_dir(root, "tiny"))
    n = len(data.splits["train"].y)
    trainer = _trainer(CONFIG, data, epochs=4, min_steps=20)
    assert trainer.batch_size == n and trainer.passes == 5 and trainer.steps_per_epoch == 5  # 4 x 5 >= 20
    run = train_to_budget(trainer, 4, None, "max")
    assert run.steps == trainer.steps == 20 and run.steps_per_epoch == 5 and len(run.train_losses) == 4
    state = trainer.state()
    again = _trainer(CONFIG, data, epochs=4, min_steps=20)
    again.load_state(state)
    assert again.steps == 20 and again.lowest_val_loss == trainer.lowest_val_loss


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])  # clipped or not: the norm is checked either way
def test_a_non_finite_gradient_with_a_finite_loss_fails_before_the_update(root: Path, grad_clip: float) -> None:
    data = load_dataset(processed_dir(root, "tiny"))
    trainer = _trainer({**CONFIG, "grad_clip": grad_clip}, data, epochs=2)
    before = trainer.weights()
    # the gradient of one real parameter made inf in backward, as an exploding recurrence makes it
    next(trainer.model.parameters()).register_hook(lambda g: torch.full_like(g, float("inf")))
    with pytest.raises(TrialFailedError, match=r"non-finite gradient \(norm inf\) at epoch 1, step 1, with a "
                                               r"finite training loss [0-9.]+: exploding gradients.*"
                                               r"a lower `lr` may help, `grad_clip` cannot"):
        trainer.train_epoch()
    assert all(torch.equal(before[k], v) for k, v in trainer.weights().items())  # no update was made


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_finite_gradients_whose_float32_norm_overflows_train_on(root: Path, grad_clip: float) -> None:
    """Values of 1e30 are finite, their squares are not: the float32 norm is inf. Before the
    check such steps trained on (Adam's update stays bounded); they still do, and a clip scales
    the gradient to `grad_clip` by its float64 norm instead of zeroing it."""
    data = load_dataset(processed_dir(root, "tiny"))
    trainer = _trainer({**CONFIG, "grad_clip": grad_clip}, data, epochs=2)
    before = trainer.weights()
    big = next(trainer.model.parameters())
    big.register_hook(lambda g: torch.full_like(g, 1e30))
    trainer.train_epoch()  # no TrialFailedError
    after = trainer.weights()
    assert all(torch.isfinite(v).all() for v in after.values())
    assert not all(torch.equal(before[k], v) for k, v in after.items())  # an update was made
    if grad_clip:
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        assert float(torch.nn.utils.get_total_norm(grads)) == pytest.approx(grad_clip, rel=1e-3)
        assert float(big.grad.abs().min()) > 0  # scaled to the clip, not zeroed


# ------------------------------------------------------------------------- early stopping's rule


def test_progress_is_a_better_metric_or_a_clearly_lower_loss() -> None:
    assert progressed(0.8, 1.0, 0.75, 0.9, "max")  # a better metric, whatever the loss
    assert progressed(0.75, 0.9 * (1 - 2 * LOSS_PROGRESS), 0.75, 0.9, "max")  # flat metric, lower loss
    assert not progressed(0.75, 0.9 * (1 - LOSS_PROGRESS / 2), 0.75, 0.9, "max")  # a fall within the noise
    assert not progressed(0.7, 0.95, 0.75, 0.9, "max")
    assert progressed(1.0, None, None, None, "min") and not lowers_loss(float("nan"), 1.0)


def test_a_trainer_whose_metric_is_stuck_goes_on_while_its_validation_loss_falls(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the accuracy of 4 validation series stuck at 75 %, the loss falling for 6 epochs, then flat
    losses = iter([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5])
    monkeypatch.setattr(Trainer, "evaluate_with_loss", lambda self, split: (0.75, next(losses)))
    data = load_dataset(processed_dir(root, "tiny"))
    trainer = _trainer({**CONFIG, "patience": 3}, data, epochs=10)
    run = train_to_budget(trainer, 10, None, "max", min_steps=0)  # the rule alone, without the step floor
    # a metric-only patience would have stopped at epoch 4; the loss moved until epoch 6
    assert (run.stop, len(run.curve), run.best_epoch) == ("patience", 9, 6)


# --------------------------------------------------------------------------------- batch clipping


def test_batch_choices_above_the_split_are_clipped_in_one_line() -> None:
    space = load_space(REPO / "search_spaces" / "cfc.yaml", "cfc").for_dataset("tiny")
    clipped, note = space.clip_batch(36, "tiny")
    assert clipped.params["batch_size"].choices == (32, 36) and clipped.reference["batch_size"] == 36
    assert note == ("cfc: batch_size 64, 128, 256 (of choices [32, 64, 128, 256]); reference 64 above the 36 "
                    "training series of tiny: trained as 36 (one step per pass over the split)")
    assert space.clip_batch(10_000, "big") == (space, None)
    ltc = load_space(REPO / "search_spaces" / "ltc.yaml", "ltc").for_dataset("tiny")
    assert ltc.clip_batch(20, "tiny")[0].params["batch_size"].choices == (16, 20)


@pytest.mark.slow
def test_a_search_on_a_tiny_split_clips_its_batches_and_takes_its_floor_of_steps(
        root: Path, capsys: pytest.CaptureFixture) -> None:
    p = SearchParams(num_samples=1, max_concurrent=1, epochs=2, min_steps=10, asha={"grace_period": 1})
    record = search(root, "tiny", "cfc", p)
    [trial] = record["trials"]
    assert trial["status"] == "ok" and trial["config"]["batch_size"] == 36  # the reference's 64, clipped
    assert trial["steps"] == 10 and record["min_steps"] == 10  # 2 epochs of 5 one-step passes
    assert "batch_size 64, 128, 256 (of choices [32, 64, 128, 256]); reference 64 above the 36 training " \
           "series of tiny" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("section, value", [("search", 0), ("search", -5), ("final", 0), ("final", MAX_STEPS + 1)])
def test_a_step_floor_outside_its_range_is_refused_in_one_line(project: Path, section: str, value: int) -> None:
    raw = default_params()
    raw[section] = {**raw[section], "min_steps": value}
    write_params(project, raw)
    with pytest.raises(ConfigError, match=rf"key `{section}.min_steps`") as caught:
        load_params(project / "params.yaml")
    assert "\n" not in str(caught.value)
    assert f"{value} is not allowed; allowed: an integer from 1 to {MAX_STEPS}" in str(caught.value)


# -------------------------------------------------------------------------- the † that notices


def _searched(root: Path, config: dict) -> None:
    record = {"dataset": "tiny", "family": "cfc", "metric": "accuracy", "mode": "max", "best_config": config,
              "best_val": 0.5, "trial_seed": 1000, "n_trials": 1, "n_failed": 0, "status": "ok", "trials": []}
    path = search_result_path(root, "tiny", "cfc")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


@pytest.mark.slow
def test_a_tiny_dataset_with_large_batches_and_short_patience_is_marked_not_converged(root: Path) -> None:
    """The issue's case: 36 training series at batch 256 (one step an epoch), patience 2, no floor on
    the epochs' steps: 30 epochs are 30 steps, fewer than patience may stop before (MIN_STEPS), so
    every seed runs its 30 epochs and is still short."""
    _searched(root, CONFIG)
    record = final(root, "tiny", "cfc", FinalParams(seeds=[1, 2, 3], epochs=30, patience=2, min_steps=1))
    for seed in record["seeds"]:
        assert seed["steps_per_epoch"] == 1 and seed["steps"] == seed["epochs_trained"] == 30 < MIN_STEPS
        assert len(seed["train_loss_curve"]) == len(seed["val_loss_curve"]) == seed["epochs_trained"]
    [mark] = [m for m in cell_marks(record) if m.mark == NOT_CONVERGED]
    assert mark.detail.startswith("3 of 3 seeds not converged (3 trained fewer than 100 steps")
