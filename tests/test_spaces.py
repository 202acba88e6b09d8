"""Search spaces: every family's file compiles, its reference lies inside, bad files fail loudly."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from pipeline.errors import ConfigError
from pipeline.models import MODELS
from pipeline.spaces import load_space, split_config
from tests.conftest import REPO

FAMILIES = sorted(MODELS)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_a_valid_space(family: str) -> None:
    space = load_space(REPO / "search_spaces" / f"{family}.yaml")
    assert space.params["lr"].distribution == "loguniform"
    assert space.reference, "the paper's reference configuration must be given"


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_is_enqueued_first_and_sampling_is_seeded(family: str) -> None:
    space = load_space(REPO / "search_spaces" / f"{family}.yaml")

    def proposals(seed: int) -> list[dict]:
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=2))
        study.enqueue_trial(space.reference)
        out = []
        for _ in range(4):
            trial = study.ask()
            fixed = space.define_by_run()(trial)
            out.append({**trial.params, **fixed})
            study.tell(trial, 0.5)
        return out

    first = proposals(0)
    assert {k: first[0][k] for k in space.reference} == space.reference
    assert first == proposals(0)
    train, model = split_config(first[1])
    assert "lr" in train and "batch_size" in train and "lr" not in model


def _write(tmp_path: Path, family: str, edit) -> Path:
    raw = yaml.safe_load((REPO / "search_spaces" / f"{family}.yaml").read_text())
    edit(raw)
    path = tmp_path / f"{family}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_unknown_model_key_names_file_and_allowed(tmp_path: Path) -> None:
    path = _write(tmp_path, "cfc", lambda r: r["fixed"].update(hiden_size=3))
    with pytest.raises(ConfigError) as err:
        load_space(path)
    assert str(path) in str(err.value) and "hiden_size" in str(err.value) and "backbone_units" in str(err.value)


def test_learning_rate_must_be_loguniform(tmp_path: Path) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["params"].update(lr={"distribution": "uniform", "low": 1e-4, "high": 1e-2}))
    with pytest.raises(ConfigError, match=r"params\.lr.*loguniform"):
        load_space(path)


def test_reference_outside_range(tmp_path: Path) -> None:
    path = _write(tmp_path, "ode_rnn", lambda r: r["reference"].update(lr=5.0))
    with pytest.raises(ConfigError, match=r"reference\.lr.*outside"):
        load_space(path)


def test_unknown_distribution(tmp_path: Path) -> None:
    path = _write(tmp_path, "ode_rnn", lambda r: r["params"].update(hidden_size={"distribution": "normal", "low": 1, "high": 2}))
    with pytest.raises(ConfigError, match=r"params\.hidden_size\.distribution.*categorical"):
        load_space(path)


def test_condition_on_later_param_is_rejected(tmp_path: Path) -> None:
    def edit(r: dict) -> None:
        r["params"] = {"lr": r["params"]["lr"], "rtol": {"distribution": "loguniform", "low": 1e-4, "high": 1e-2,
                                                         "when": {"method": "dopri5"}}, **r["params"]}

    with pytest.raises(ConfigError, match=r"params\.rtol\.when"):
        load_space(_write(tmp_path, "ode_rnn", edit))


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown top-level keys"):
        load_space(_write(tmp_path, "cfc", lambda r: r.update(constants={})))
