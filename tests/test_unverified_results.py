"""Results made from an unverified local copy say so everywhere a result is read (issue 30): the
MLflow runs of the search (trials and parents) and of the final stage (seeds and parents), the
search and final records, the report and the registered model. The real stack on a tiny rebuilt
PhysioNet 2012 set-a: prepare, Ray Tune + Optuna search, final seeds over Ray, report, promote,
with a real SQLite MLflow store in a temporary project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.config import FinalParams, Physionet2012Params, PromoteParams, SearchParams
from pipeline.data.prepare import prepare
from pipeline.final.seeds import SeedJob
from pipeline.final.stage import final_many
from pipeline.registry.promote import promote_dataset
from pipeline.reporting.report import report
from pipeline.stores import tracking
from pipeline.stores.paths import final_result_path, processed_dir, raw_dir, raw_lock_path, search_result_path
from pipeline.sweep.search import search_many
from tests.test_unverified_copy import _copy_of_set_a

NOTE = "local copy, not verified against the publisher (Outcomes-a.txt, set-a.tar.gz); 24 of 25 records"


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch, local_ray: None) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("CTSWEEP_UNVERIFIED_COPY", raising=False)
    return project


def test_seed_runs_are_tagged_only_when_the_data_has_a_note() -> None:
    job = SeedJob("icu", "cfc", "/d", {"lr": 0.1}, 1, 2, 1.0, 0.0, "sqlite:///m.db", "1", "p")
    assert "data_provenance" not in job.tags  # data as published: the tags as they always were
    assert SeedJob(**{**job.__dict__, "data_provenance": NOTE}).tags["data_provenance"] == NOTE


def _runs(client: MlflowClient, stage: str) -> list:
    exp = client.get_experiment_by_name("ctsweep/icu")
    return client.search_runs([exp.experiment_id], f"tags.stage = '{stage}'")


@pytest.mark.slow
def test_an_unverified_copy_is_named_in_runs_records_report_and_model(root: Path, tmp_path: Path) -> None:
    source = _copy_of_set_a(tmp_path / "copy")
    meta = prepare("icu", Physionet2012Params(kind="physionet2012"), processed_dir(root, "icu"), raw_dir(root, "icu"),
                   raw_lock_path(root), source, allow_unverified=True)
    assert meta.provenance == NOTE
    lock = json.loads(raw_lock_path(root).read_text())
    assert all(e["unverified"] == f"no published checksum list at {source}/SHA256SUMS.txt" for e in lock.values())

    searched = search_many(root, "icu", ["cfc"], SearchParams(num_samples=2, max_concurrent=1, epochs=2,
                                                               n_startup_trials=1))["cfc"]
    assert searched["status"] == "ok" and searched["data_provenance"] == NOTE
    assert json.loads(search_result_path(root, "icu", "cfc").read_text())["data_provenance"] == NOTE
    finals = final_many(root, "icu", ["cfc"], FinalParams(seeds=[1, 2], epochs=2, patience=2, lr_factors=[]))
    record = json.loads(final_result_path(root, "icu", "cfc").read_text())
    assert finals["cfc"]["data_provenance"] == record["data_provenance"] == NOTE

    client = MlflowClient(tracking.tracking_uri(root))
    search_runs, final_runs = _runs(client, "search"), _runs(client, "final")
    levels = {(stage, r.data.tags[tracking.RUN_LEVEL_TAG]) for stage, runs in (("search", search_runs),
                                                                                ("final", final_runs)) for r in runs}
    assert levels == {("search", "parent"), ("search", "child"), ("final", "parent"), ("final", "child")}
    assert len(search_runs) == 3 and len(final_runs) == 3  # a parent and its trials; a parent and its seeds
    assert all(r.data.tags.get("data_provenance") == NOTE for r in search_runs + final_runs)

    report(root, ["icu"], ["cfc"])
    text = (root / "reports" / "results.md").read_text()
    assert f"**Data:** {NOTE} (data/raw.lock says why)." in text
    assert f"- data of `icu`: {NOTE}" in text.split("## Provenance", 1)[1]

    decision = promote_dataset(root, "icu", ["cfc"], PromoteParams(seeds_required=2), force=True)
    version = client.get_model_version(decision["registered_model"], str(decision["candidate_version"]))
    assert version.description.endswith(f"; data: {NOTE}")
    assert version.tags["data_provenance"] == NOTE
