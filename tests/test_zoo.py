"""Every registered family, through its own search space and the shared training loop.

For each family: the search space file loads and validates, one configuration sampled from it
builds, and the paper's reference configuration trains for one optimiser step with the real
Trainer on a tiny irregular, padded dataset, once with per-sequence and once with per-step targets.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch

from pipeline.data.contract import Dataset, Meta, Split
from pipeline.errors import ConfigError
from pipeline.models import MODELS
from pipeline.spaces import causal_space, load_space, space_path, split_config
from pipeline.training.loop import Trainer, TrainSettings, build_model

ROOT = Path(__file__).resolve().parents[1]
CLASSES, CHANNELS, LENGTH = 3, 2, 7


def tiny_split(per_step: bool, seed: int) -> Split:
    """8 sequences of 2..7 irregular observations, one missing value, NaN padding."""
    rng = np.random.default_rng(seed)
    lengths = np.array([7, 5, 2, 6, 3, 7, 4, 1])
    mask = np.arange(LENGTH)[None, :] < lengths[:, None]
    t = np.cumsum(rng.uniform(0.2, 1.5, size=(8, LENGTH)), axis=1).astype(np.float32)
    t = np.where(mask, t, t[np.arange(8), lengths - 1][:, None])
    x = rng.normal(size=(8, LENGTH, CHANNELS)).astype(np.float32)
    x[~mask] = np.nan
    x[0, 2, 1] = np.nan
    shape = (8, LENGTH) if per_step else (8,)
    y = rng.integers(0, CLASSES, size=shape).astype(np.int64)
    return Split(x, t, mask, y)


def tiny_dataset(per_step: bool) -> Dataset:
    meta = Meta(name="tiny", task="classification", per_step=per_step, output_size=CLASSES,
                metric="accuracy", channels=["a", "b"], source="test_zoo", classes=["p", "q", "r"])
    return Dataset(meta, {name: tiny_split(per_step, i) for i, name in enumerate(("train", "val", "test"))})


@pytest.mark.parametrize("family", sorted(MODELS))
def test_sampled_configuration_builds(family: str) -> None:
    space = load_space(space_path(ROOT, family), family)
    for seed in range(3):
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
        fixed = space.define_by_run()(trial)
        _, model_cfg = split_config({**trial.params, **fixed})
        model = build_model(family, tiny_dataset(False).meta, CHANNELS, model_cfg)
        assert model.num_parameters() > 0


@pytest.mark.parametrize("per_step", [False, True], ids=["per_sequence", "per_step"])
@pytest.mark.parametrize("family", sorted(MODELS))
def test_reference_configuration_trains_one_step(family: str, per_step: bool) -> None:
    space = load_space(space_path(ROOT, family), family)
    if per_step:  # as a search of a per-step dataset plans it: nothing reads later steps (issue 30)
        space, _ = causal_space(space, "tiny")
    train_cfg, model_cfg = split_config({**space.fixed, **space.reference})
    settings = TrainSettings(**{**train_cfg, "batch_size": 8})  # the whole tiny split: one step
    trainer = Trainer(family, model_cfg, settings, tiny_dataset(per_step), seed=0, epochs=4)  # a run's budget
    before = trainer.weights()
    loss = trainer.train_epoch()
    assert np.isfinite(loss)
    after = trainer.weights()
    assert any(not torch.equal(before[k], after[k]) for k in before), "one optimiser step changed nothing"
    scores = trainer.predict("val")
    assert scores.shape == ((8, LENGTH, CLASSES) if per_step else (8, CLASSES))


def test_space_for_unknown_family_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "transformer.yaml"
    path.write_text((space_path(ROOT, "cfc")).read_text())
    with pytest.raises(ConfigError, match=r"transformer\.yaml.*unknown model family 'transformer'"):
        load_space(path)


def test_the_model_reference_lists_every_family_with_its_input() -> None:
    """The model table (docs/reference/models.md) names every registered family on a row with its input."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "models.md").read_text()
    section = page.split("## Families\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    names = {ref: row for row in rows for ref in re.findall(r"`([a-z0-9_]+)`", row.split("|")[1])}
    assert set(names) == set(MODELS)
    inputs = {"raw": "raw", "raw_per_channel": "raw per channel", "interp": "spline", "logsig": "log-signature"}
    for name, cls in MODELS.items():
        assert names[name].rstrip(" |").rsplit("|", 1)[1].strip() == inputs[cls.representation], name
