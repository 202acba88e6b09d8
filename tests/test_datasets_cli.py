"""The source datasets through the real CLI (fetch from a local HTTP mirror, prepare) and one
training epoch each, per step and per sequence, so every kind meets the trainer it feeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.data.contract import load_dataset
from pipeline.training.loop import Trainer, TrainSettings
from pipeline.data.kinds import imdb
from tests import test_data_imdb as imdb_fixture
from tests import test_data_person_activity as person
from tests import test_data_sepsis as sepsis
from tests import test_data_walker2d as walker

RUNNER = CliRunner()
SMALL_CFC = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}
SMALL_NCDE = {"hidden_size": 8, "vf_units": 8, "vf_layers": 1, "method": "rk4"}


def _cli(*args: str) -> str:
    result = RUNNER.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _one_epoch(project: Path, dataset: str, family: str, kwargs: dict) -> float:
    data = load_dataset(project / "data" / "processed" / dataset)
    trainer = Trainer(family, kwargs, TrainSettings(lr=1e-2, batch_size=32), data, seed=0)
    loss = trainer.run_epoch()["train_loss"]
    assert np.isfinite(loss)
    return trainer.evaluate("val")


def test_person_activity_fetch_then_prepare_then_train_per_step(project: Path, http_server) -> None:
    lines, _ = person.person_lines()
    person.write_person(http_server.root, lines)
    root = str(project)
    assert "1 raw file(s) verified" in _cli("fetch", "person_activity", "--source", http_server.url, "--root", root)
    lock = json.loads((project / "data" / "raw.lock").read_text())
    assert list(lock) == ["https://archive.ics.uci.edu/ml/machine-learning-databases/00196/ConfLongDemo_JSI.txt"]
    n_requests = len(http_server.requests)
    _cli("prepare", "person_activity", "--root", root)  # no --source: the raw file is already there
    assert len(http_server.requests) == n_requests
    meta = load_dataset(project / "data" / "processed" / "person_activity").meta
    assert meta.per_step and meta.output_size == 7
    assert 0.0 <= _one_epoch(project, "person_activity", "cfc", SMALL_CFC) <= 1.0


def test_walker2d_per_step_regression_trains_a_cde(project: Path, http_server, monkeypatch) -> None:
    walker.write_zip(http_server.root, {k: walker.npy_bytes(v) for k, v in walker.fixture_arrays().items()})
    monkeypatch.setenv("CTSWEEP_DATA_SOURCE", http_server.url)  # the mirror as a cluster would set it
    _cli("prepare", "walker2d", "--root", str(project))
    # per step: the causal path a walker2d search trains (the default cubic spline is refused, issue 30)
    mse = _one_epoch(project, "walker2d", "ncde", {**SMALL_NCDE, "interpolation": "hermite_causal"})
    assert np.isfinite(mse) and mse > 0
    assert (project / "data" / "cache" / "walker2d").is_dir()  # spline coefficients built once


def test_sepsis_with_static_channels_scores_auroc(project: Path, http_server) -> None:
    set_a = {**sepsis.SPECIAL, **sepsis.filler(10, 12, 20.0)}
    sepsis.write_zip(http_server.root / "training_setA.zip", "training", set_a)
    sepsis.write_zip(http_server.root / "training_setB.zip", "training_setB", sepsis.filler(100001, 12, 40.0))
    _cli("prepare", "sepsis_intensity", "--source", http_server.url, "--root", str(project))
    meta = load_dataset(project / "data" / "processed" / "sepsis_intensity").meta
    assert meta.metric == "auroc" and meta.channels[-len(meta.static_channels):] == meta.static_channels
    assert 0.0 <= _one_epoch(project, "sepsis_intensity", "cfc", SMALL_CFC) <= 1.0


def test_imdb_tokens_train_a_raw_family_through_the_embedding(project: Path, http_server, monkeypatch) -> None:
    monkeypatch.setattr(imdb, "PUBLISHED_SHA256", imdb_fixture.write_npz(http_server.root, imdb_fixture.fixture_arrays()))
    _cli("prepare", "imdb", "--source", http_server.url, "--root", str(project))
    meta = load_dataset(project / "data" / "processed" / "imdb").meta
    assert meta.vocab_size == 20000 and meta.embedding_size == 64
    assert 0.0 <= _one_epoch(project, "imdb", "lstm_dt", {"hidden_size": 8}) <= 1.0


def test_cli_errors_are_one_line(project: Path, http_server) -> None:
    result = RUNNER.invoke(app, ["fetch", "speech_command", "--root", str(project)])
    assert result.exit_code == 2 and "unknown dataset 'speech_command'" in result.output
    assert "speech_commands" in result.output and "Traceback" not in result.output
    result = RUNNER.invoke(app, ["prepare", "walker2d", "--source", http_server.url, "--root", str(project)])
    assert result.exit_code == 2 and "walker.zip" in result.output and "404" in result.output
    assert not (project / "data" / "processed" / "walker2d").exists()
