"""`final.race` in the real final stage (local Ray, SQLite MLflow in a temporary folder): seeds
are added a round at a time until every family is decided or at the cap, the record keeps the
race's looks and decisions, and its end state is one the rule itself would stop at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import FinalParams, XorParams
from pipeline.config.race import RaceParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.final.race import AT_CAP, look
from pipeline.final.stage import final_many
from pipeline.stores import tracking
from pipeline.stores.paths import processed_dir, search_result_path
from tests.test_final_budget import CONFIG

FAMILIES = ["cfc", "cfc_no_gate"]
RACE = RaceParams(enabled=True, margin=1e-9, max_seeds=4, seeds_per_round=1)  # nothing is equivalent within 1e-9


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch, local_ray: None) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=200, n_test=50, seed=3)))
    for family in FAMILIES:
        path = search_result_path(project, "xor", family)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"dataset": "xor", "family": family, "metric": "accuracy", "mode": "max",
                                    "best_config": CONFIG, "best_val": 0.5, "trial_seed": 3, "n_trials": 1,
                                    "n_failed": 0, "status": "ok", "trials": []}))
    return project


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_race_adds_seeds_until_decided_or_capped(root: Path) -> None:
    p = FinalParams(seeds=[1, 2], epochs=2, race=RACE)
    records = final_many(root, "xor", FAMILIES, p)
    race = records["cfc"]["race"]
    assert race["enabled"] and race["max_looks"] == 3 and 1 <= race["looks"] <= 3
    assert race["alpha_per_look"] == pytest.approx(0.05 / 3) and race["margin"] == 1e-9
    assert all(r["race"] == race for r in records.values())
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    for family, record in records.items():
        seeds = [s["seed"] for s in record["seeds"]]
        # the configured seeds, then the next ones, skipping the search's trial seed (3)
        assert seeds == [1, 2, 4, 5][:len(seeds)] and 2 <= len(seeds) <= 4 and record["n_seeds"] == len(seeds)
        runs = client.search_runs([client.get_run(record["mlflow_parent_run_id"]).info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{record['mlflow_parent_run_id']}'")
        assert sorted(int(r.data.tags["seed"]) for r in runs) == sorted(seeds)
    # the end state is one the rule stops at, with the decisions recorded
    again = look({f: {**r, "status": "ok"} for f, r in records.items()}, RACE, 2)
    assert again.extend == [] and again.decisions == race["decisions"] and again.best == race["best"]
    if AT_CAP in race["decisions"].values():
        assert all(r["n_seeds"] == 4 for r in records.values())
    if race["looks"] > 1:  # every round gave the best and the open family one more seed
        assert all(r["n_seeds"] == 1 + race["looks"] for r in records.values())

