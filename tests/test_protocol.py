"""The training protocol as configuration: optimisers, schedules, class weights, embedding
dropout and early stopping do what they say, resume exactly, and bad values fail in one line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from pipeline.config import XorParams
from pipeline.data.contract import Dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError
from pipeline.config.protocol import TRAINING_KEYS, TrainSettings, class_weights
from pipeline.spaces import check_for_dataset, load_space, split_config
from pipeline.training.loop import Trainer, build_model

from test_embedding import token_dataset

KWARGS = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}
N_TRAIN, BATCH = 80, 16


@pytest.fixture(scope="module")
def data() -> Dataset:
    return build_xor("x", XorParams(kind="xor", n_train=N_TRAIN, n_test=20, seed=5))


def _as(data: Dataset, task: str, output_size: int, metric: str) -> Dataset:
    return Dataset(dataclasses.replace(data.meta, task=task, output_size=output_size, metric=metric), data.splits)


def _lr(trainer: Trainer) -> float:
    return trainer.optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize(("name", "cls", "extra", "expected"), [
    ("adam", torch.optim.Adam, {"beta1": 0.8, "beta2": 0.99}, {"betas": (0.8, 0.99)}),
    ("adamw", torch.optim.AdamW, {"weight_decay": 0.01}, {"weight_decay": 0.01}),
    ("rmsprop", torch.optim.RMSprop, {"momentum": 0.5, "rms_alpha": 0.9, "eps": 1e-7},
     {"momentum": 0.5, "alpha": 0.9, "eps": 1e-7}),
    ("adamax", torch.optim.Adamax, {"beta2": 0.95}, {"betas": (0.9, 0.95)}),
])
def test_each_optimizer_is_torch_s_with_its_arguments(data: Dataset, name: str, cls: type, extra: dict,
                                                      expected: dict) -> None:
    trainer = Trainer("cfc", KWARGS, TrainSettings(lr=3e-3, batch_size=BATCH, optimizer=name, **extra), data, 0)
    assert type(trainer.optimizer) is cls
    group = trainer.optimizer.param_groups[0]
    assert group["lr"] == 3e-3 and all(group[k] == v for k, v in expected.items())
    trainer.run_epoch()  # and it trains


def test_exponential_decay_per_epoch_and_per_batch(data: Dataset) -> None:
    per_epoch = Trainer("cfc", KWARGS, TrainSettings(lr=1e-2, batch_size=BATCH, lr_schedule="exponential",
                                                     lr_decay=0.5), data, 0)
    seen = [per_epoch.run_epoch()["lr"] for _ in range(3)]
    assert seen == pytest.approx([1e-2, 5e-3, 2.5e-3]) and _lr(per_epoch) == pytest.approx(1.25e-3)
    per_batch = Trainer("cfc", KWARGS, TrainSettings(lr=1e-2, batch_size=BATCH, lr_schedule="exponential",
                                                     lr_decay=0.9, lr_decay_per="batch"), data, 0)
    per_batch.run_epoch()
    assert _lr(per_batch) == pytest.approx(1e-2 * 0.9 ** math.ceil(N_TRAIN / BATCH))


def test_exponential_decay_stops_at_its_floor(data: Dataset) -> None:
    """Rubanova et al.'s latent_ode code: x0.999 per batch, never below lr / 10 (here x0.5 and lr / 4)."""
    settings = TrainSettings(lr=1e-2, batch_size=BATCH, optimizer="adamax", lr_schedule="exponential",
                             lr_decay=0.5, lr_decay_per="batch", lr_min_factor=0.25)
    trainer = Trainer("cfc", KWARGS, settings, data, 0)
    assert math.ceil(N_TRAIN / BATCH) > 2  # so one epoch passes the floor
    trainer.run_epoch()
    assert _lr(trainer) == pytest.approx(2.5e-3)
    resumed = Trainer("cfc", KWARGS, settings, data, 1)
    resumed.load_state(trainer.state())
    assert _lr(resumed) == pytest.approx(2.5e-3)
    with pytest.raises(ConfigError, match="lr_min_factor.*lr_schedule"):
        TrainSettings(lr=1e-2, batch_size=BATCH, lr_schedule="step", lr_decay=0.1, lr_step_epoch=1,
                      lr_min_factor=0.1)


def test_step_decay_at_an_epoch_or_a_fraction_of_the_budget(data: Dataset) -> None:
    """CDR-NDE Sec. 5: x0.1 at epoch 100 of 200, i.e. lr_step_fraction 0.5 of any budget."""
    for settings, epochs in ((dict(lr_step_epoch=2), None), (dict(lr_step_fraction=0.5), 4)):
        trainer = Trainer("cfc", KWARGS, TrainSettings(lr=1e-2, batch_size=BATCH, lr_schedule="step", lr_decay=0.1,
                                                       **settings), data, 0, epochs=epochs)
        assert [trainer.run_epoch()["lr"] for _ in range(4)] == pytest.approx([1e-2, 1e-2, 1e-3, 1e-3])
    with pytest.raises(ConfigError, match="lr_step_fraction.*epochs"):
        Trainer("cfc", KWARGS, TrainSettings(lr=1e-2, batch_size=BATCH, lr_schedule="step", lr_decay=0.1,
                                             lr_step_fraction=0.5), data, 0)


def test_a_resumed_run_continues_its_schedule_and_patience(data: Dataset) -> None:
    settings = TrainSettings(lr=1e-2, batch_size=BATCH, optimizer="rmsprop", lr_schedule="exponential",
                             lr_decay=0.7, patience=5)
    straight = Trainer("cfc", KWARGS, settings, data, 3)
    straight.run_epoch()
    state = straight.state()
    expected = straight.run_epoch()
    resumed = Trainer("cfc", KWARGS, settings, data, 99)
    resumed.load_state(state)
    again = resumed.run_epoch()
    assert again["lr"] == expected["lr"] == pytest.approx(7e-3)
    assert again["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-6)
    assert (resumed.best_val, resumed.stale_epochs) == (straight.best_val, straight.stale_epochs)


def test_class_weights_enter_the_loss(data: Dataset) -> None:
    y = torch.tensor([0, 0, 0, 1, 2, 2])
    mask = torch.ones(6, dtype=torch.bool)
    balanced = TrainSettings(lr=1e-2, batch_size=4, class_weight="balanced")
    assert class_weights("classification", balanced, y, mask, False, 4).tolist() == pytest.approx(
        [6 / (4 * 3), 6 / (4 * 1), 6 / (4 * 2), 0.0])  # n / (C n_c); an unseen class weighs nothing
    assert class_weights("binary", balanced, torch.tensor([0, 0, 0, 1]), mask[:4], False, 1).item() == 3.0
    assert class_weights("regression", balanced, y, mask, False, 1) is None

    trainer = Trainer("cfc", KWARGS, TrainSettings(lr=1e-2, batch_size=BATCH, pos_weight=4.0), data, 0)
    idx = torch.arange(BATCH)
    out = trainer._forward("train", idx)
    target = trainer.targets["train"][idx].float()
    w = 1.0 + 3.0 * target  # positives weigh 4: the weighted mean, as a (1, 4)-weighted 2-class cross-entropy
    expected = (w * F.binary_cross_entropy_with_logits(out[:, 0], target, reduction="none")).sum() / w.sum()
    two_class = F.cross_entropy(torch.cat([torch.zeros_like(out), out], 1), target.long(), weight=torch.tensor([1.0, 4.0]))
    assert expected.item() == pytest.approx(two_class.item(), rel=1e-5)
    unweighted = F.binary_cross_entropy_with_logits(out[:, 0], target)
    from pipeline.training.loop import loss_fn

    got = loss_fn(trainer.meta, out, trainer.targets["train"][idx], trainer.masks["train"][idx], trainer.loss_weight)
    assert got.item() == pytest.approx(expected.item()) and got.item() != pytest.approx(unweighted.item())


def test_early_stopping_ends_after_patience_epochs_without_progress(data: Dataset) -> None:
    # An lr too small to move the weights: validation never improves after the first epoch.
    trainer = Trainer("cfc", KWARGS, TrainSettings(lr=1e-30, batch_size=BATCH, patience=2), data, 0)
    stops = []
    for _ in range(4):
        trainer.run_epoch()
        stops.append(trainer.stopped_early)
    assert stops == [False, False, True, True]
    never = Trainer("cfc", KWARGS, TrainSettings(lr=1e-30, batch_size=BATCH), data, 0)
    for _ in range(3):
        never.run_epoch()
    assert not never.stopped_early  # patience 0: no early stopping


def test_embedding_dropout_trains_only_and_a_promoted_model_predicts_the_same() -> None:
    data = token_dataset()
    trainer = Trainer("cfc", KWARGS, TrainSettings(lr=1e-2, batch_size=16, embed_dropout=0.5), data, 0)
    assert trainer.model.dropout.p == 0.5
    trainer.run_epoch()
    idx = torch.arange(8)
    trainer.model.train()
    assert not torch.equal(trainer._forward("train", idx), trainer._forward("train", idx))  # dropout draws
    evaluated = trainer.predict("test")
    rebuilt = build_model("cfc", data.meta, 1, KWARGS)  # as serving rebuilds it: training keys dropped
    rebuilt.load_state_dict(trainer.model.state_dict())
    rebuilt.eval()
    with torch.no_grad():
        again = rebuilt(**trainer._batch("test", torch.arange(len(trainer.targets["test"]))))
    torch.testing.assert_close(evaluated, again, rtol=0, atol=0)


@pytest.mark.parametrize(("settings", "match"), [
    (dict(optimizer="sgd"), r"`optimizer`: 'sgd' is not allowed; allowed: one of \['adam', 'adamw', 'rmsprop', 'adamax'\]"),
    (dict(lr_schedule="cosine"), r"`lr_schedule`.*one of \['none', 'exponential', 'step'\]"),
    (dict(lr_schedule="exponential", lr_decay=0.0), r"`lr_decay`: 0.0 is not allowed; allowed: a number in \(0, 1\]"),
    (dict(lr_schedule="exponential", lr_decay=1.5), r"`lr_decay`: 1.5 .*\(0, 1\]"),
    (dict(lr_schedule="exponential"), r"`lr_decay`: missing"),
    (dict(lr_schedule="step", lr_decay=0.1), r"`lr_step_epoch`: missing.*lr_step_epoch', 'lr_step_fraction"),
    (dict(lr_schedule="step", lr_decay=0.1, lr_step_epoch=3, lr_step_fraction=0.5), r"both"),
    (dict(lr_decay=0.5), r"`lr_decay`: is set but lr_schedule is 'none'"),
    (dict(momentum=0.9), r"`momentum`: is set but optimizer is 'adam'; allowed: only with optimizer in \['rmsprop'\]"),
    (dict(optimizer="rmsprop", beta1=0.9), r"`beta1`.*optimizer is 'rmsprop'"),
    (dict(patience=-1), r"`patience`: -1 is not allowed"),
    (dict(embed_dropout=1.0), r"`embed_dropout`: 1.0 .*\[0, 1\)"),
])
def test_bad_settings_are_refused_in_one_line(settings: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        TrainSettings(lr=1e-3, batch_size=8, **settings)
    assert "\n" not in str(caught.value)


def _space(tmp_path: Path, params: dict, fixed: dict | None = None, reference: dict | None = None) -> Path:
    raw = {"params": {"lr": {"distribution": "loguniform", "low": 1e-4, "high": 1e-1}, **params},
           "fixed": {"batch_size": 16, **(fixed or {})}, "reference": reference or {"lr": 1e-3}}
    path = tmp_path / "cfc.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_protocol_keys_are_searchable_with_conditions(tmp_path: Path) -> None:
    path = _space(tmp_path, {
        "optimizer": {"distribution": "categorical", "choices": ["adam", "rmsprop"]},
        "momentum": {"distribution": "uniform", "low": 0.0, "high": 0.9, "when": {"optimizer": "rmsprop"}},
        "lr_schedule": {"distribution": "categorical", "choices": ["none", "exponential"]},
        "lr_decay": {"distribution": "uniform", "low": 0.5, "high": 1.0, "when": {"lr_schedule": "exponential"}},
    }, reference={"lr": 1e-3, "optimizer": "rmsprop", "momentum": 0.5, "lr_schedule": "exponential", "lr_decay": 0.9})
    space = load_space(path)
    train, model = split_config({**space.reference, **space.fixed})
    assert set(train) <= TRAINING_KEYS and not model
    TrainSettings(**train)


@pytest.mark.parametrize(("params", "fixed", "match"), [
    ({"momentum": {"distribution": "uniform", "low": 0.0, "high": 0.9}}, {},
     r"params.momentum`: applies only with optimizer in \['rmsprop'\]; optimizer is 'adam' here"),
    ({"optimizer": {"distribution": "categorical", "choices": ["adam", "rmsprop"]},
      "momentum": {"distribution": "uniform", "low": 0.0, "high": 0.9}}, {},
     r"params.momentum`: .*optimizer is searched; allowed: a param with `when: \{optimizer: \['rmsprop'\]\}`"),
    ({"lr_schedule": {"distribution": "categorical", "choices": ["none", "step"]},
      "lr_decay": {"distribution": "uniform", "low": 0.1, "high": 0.5, "when": {"lr_schedule": "step"}}}, {},
     r"lr_step_epoch`: missing: lr_schedule 'step' needs lr_step_epoch or lr_step_fraction"),
    ({}, {"optimizer": "nadam"}, r"fixed.optimizer`: 'nadam' is not allowed; allowed: one of"),
])
def test_incoherent_protocol_in_a_space_is_refused_at_load(tmp_path: Path, params: dict, fixed: dict,
                                                           match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_space(_space(tmp_path, params, fixed))


@pytest.mark.parametrize(("fixed", "task", "tokens", "match"), [
    ({"class_weight": "balanced"}, "regression", False, r"fixed.class_weight`: weights classes but the task is regression"),
    ({"pos_weight": 10.0}, "classification", False, r"fixed.pos_weight`: is set but the task is classification"),
    ({"embed_dropout": 0.2}, "binary", False, r"fixed.embed_dropout`: drops embeddings .*not tokens"),
    ({"lr_schedule": "step", "lr_decay": 0.1, "lr_step_epoch": 100}, "binary", False,
     r"fixed.lr_step_epoch`: 100 is beyond the run's 4 epochs; allowed: 1 to 4 \(or lr_step_fraction\) \(dataset d\)"),
])
def test_keys_a_dataset_or_budget_cannot_use_are_refused_before_ray(tmp_path: Path, fixed: dict, task: str,
                                                                    tokens: bool, match: str) -> None:
    space = load_space(_space(tmp_path, {}, fixed))
    with pytest.raises(ConfigError, match=match):
        check_for_dataset(space, "d", task, tokens, epochs=4)
    check_for_dataset(space, "d", "binary", True, epochs=200)  # where it applies: accepted


def test_per_dataset_references_merge_over_the_default(tmp_path: Path) -> None:
    params = {"hidden_size": {"distribution": "int", "low": 8, "high": 64, "step": 8}}
    reference = {"default": {"lr": 1e-3, "hidden_size": 16}, "xor": {"lr": 5e-2}, "walker2d": {"hidden_size": 64}}
    space = load_space(_space(tmp_path, params, reference=reference))
    assert space.reference_for("xor") == {"lr": 5e-2, "hidden_size": 16}
    assert space.reference_for("walker2d") == {"lr": 1e-3, "hidden_size": 64}
    assert space.reference_for("imdb") == space.reference == {"lr": 1e-3, "hidden_size": 16}
    for bad, match in (({"xor": {"lr": 1e-3, "hidden_size": 16}}, r"`reference`: per-dataset entries need a `default`"),
                       ({"default": {"lr": 1e-3, "hidden_size": 16}, "xor": {"hidden_size": 72}},
                        r"`reference.xor.hidden_size`: 72 lies outside the space"),
                       ({"default": {"lr": 1e-3, "hidden_size": 16}, "xor": 3}, r"`reference.xor`: got 3 beside per-dataset entries; allowed: the value under `reference.default`"),
                       ({"default": {"lr": 1e-3, "hidden_size": 16}, "../x": {"lr": 1e-3}}, r"reference.\.\./x")):
        with pytest.raises(ConfigError, match=match):
            load_space(_space(tmp_path, params, reference=bad))


def test_per_dataset_fixed_values_such_as_a_class_weight(tmp_path: Path) -> None:
    """CfC Table S2 weighs PhysioNet's positives; the same space searches regression data unweighted."""
    fixed = {"default": {"batch_size": 16}, "physionet2012": {"batch_size": 128, "pos_weight": 11.69}}
    space = load_space(_write_fixed(tmp_path, fixed))
    physionet = space.for_dataset("physionet2012")
    assert physionet.fixed == {"batch_size": 128, "pos_weight": 11.69} and physionet.reference == {"lr": 1e-3}
    assert space.for_dataset("walker2d").fixed == {"batch_size": 16}
    check_for_dataset(physionet, "physionet2012", "binary", False, 4)
    check_for_dataset(space.for_dataset("walker2d"), "walker2d", "regression", False, 4)
    with pytest.raises(ConfigError, match=r"fixed.pos_weight`: is set but the task is regression"):
        check_for_dataset(physionet, "physionet2012", "regression", False, 4)
    with pytest.raises(ConfigError, match=r"fixed.physionet2012.pos_weight`: -1 is not allowed"):
        _write_fixed(tmp_path, {"default": {"batch_size": 16}, "physionet2012": {"pos_weight": -1}}, load=True)


def _write_fixed(tmp_path: Path, fixed: dict, load: bool = False):
    raw = {"params": {"lr": {"distribution": "loguniform", "low": 1e-4, "high": 1e-1}}, "fixed": fixed,
           "reference": {"lr": 1e-3}}
    path = tmp_path / "cfc.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_space(path) if load else path
