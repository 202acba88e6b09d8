"""What was saved before the package was grouped by concept still loads: a model saved by the old
pipeline.serving (its python_model.pkl names pipeline.serving.SequenceClassifierModel), the
search-space and settings objects a Ray Tune experiment checkpoint pickles (pipeline.spaces._sample,
pipeline.protocol.TrainSettings, pipeline.config.Resources), and every old module path.

The fixtures were written by the package at commit 169a70f (tests/fixtures/old_layout/make_fixture.py
says how), not by today's code.
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import mlflow
import numpy as np
import optuna
import pytest
from mlflow.tracking import MlflowClient

from pipeline.moved import MOVED
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "old_layout"


def test_the_fixture_really_names_the_old_paths() -> None:
    # Otherwise the tests below would prove nothing about old pickles.
    assert b"pipeline.serving" in (FIXTURE / "model" / "python_model.pkl").read_bytes()
    state = (FIXTURE / "tune_state.pkl").read_bytes()
    assert b"pipeline.protocol" in state and b"pipeline.spaces" in state and b"pipeline.config" in state
    assert not (REPO / "pipeline" / "protocol.py").exists() and not (REPO / "pipeline" / "serving.py").exists()


def test_a_model_saved_with_the_old_layout_loads_and_predicts_as_it_did(tmp_path: Path) -> None:
    expected = np.load(FIXTURE / "expected.npz")
    model = mlflow.pyfunc.load_model(str(FIXTURE / "model"))
    got = model.predict({"x": expected["x"], "t": expected["t"], "mask": expected["mask"]})
    np.testing.assert_allclose(got, expected["probabilities"], rtol=1e-5, atol=1e-6)
    from pipeline.serving.pyfunc import SequenceClassifierModel

    assert type(model.unwrap_python_model()) is SequenceClassifierModel


def test_an_old_registered_champion_loads_through_ctsweep_predicts_path(tmp_path: Path) -> None:
    from pipeline.serving.predict import load_registered
    from pipeline.stores.tracking import ALIAS, registered_name

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("toy", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(experiment).info.run_id
    client.log_artifacts(run, str(FIXTURE / "model"), "model")  # the saved folder as a logged model
    client.set_terminated(run)
    mlflow.set_tracking_uri(uri)
    version = mlflow.register_model(f"runs:/{run}/model", registered_name("toy"))
    client.set_registered_model_alias(registered_name("toy"), ALIAS, version.version)
    model, meta, info = load_registered(uri, "toy")
    assert meta.classes == ["x", "y", "z"] and info.version == int(version.version)
    expected = np.load(FIXTURE / "expected.npz")
    got = model.predict({"x": expected["x"], "t": expected["t"], "mask": expected["mask"]})
    np.testing.assert_allclose(got, expected["probabilities"], rtol=1e-5, atol=1e-6)


def test_a_search_state_pickled_with_the_old_layout_unpickles_and_samples_as_today() -> None:
    from pipeline.config.params import Resources
    from pipeline.config.protocol import TrainSettings
    from pipeline.spaces import load_space, space_path

    state = pickle.loads((FIXTURE / "tune_state.pkl").read_bytes())
    assert isinstance(state["settings"], TrainSettings) and state["settings"].lr == 0.002
    assert isinstance(state["resources"], Resources) and state["resources"].cpu == 1.0
    today = load_space(space_path(REPO, "cfc"), "cfc").for_dataset("toy")
    assert state["space"].params.keys() == today.params.keys()

    def sampled(define_by_run) -> dict:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
        trial = study.ask()
        fixed = define_by_run(trial)
        return {**trial.params, **fixed}

    assert sampled(state["define_by_run"]) == sampled(today.define_by_run())


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_module_path_imports_as_the_module_that_replaced_it(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_an_old_path_that_never_existed_still_fails() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("pipeline.no_such_module")

