"""The promotion rule on hand-made final results, against a real MLflow store in a temp folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline import tracking
from pipeline.config import PromoteParams
from pipeline.data.contract import Meta
from pipeline.errors import CtsweepError
from pipeline.paths import final_result_path
from pipeline.promote import promote, promote_dataset
from pipeline.serving import log_model_from_state
from pipeline.train import build_model

DATASET = "toy"
META = Meta(name=DATASET, task="classification", per_step=False, output_size=3, metric="accuracy",
            channels=["a", "b"], source="hand-made", norm_mean=[0.0, 0.0], norm_std=[1.0, 1.0])
KWARGS = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _final(root: Path, family: str, val_mean: float, n_seeds: int = 5) -> None:
    """Write a final result whose model is a real (untrained) CfC logged to a real run."""
    client, exp = tracking.experiment_id(root, DATASET)
    run = tracking.start_run(client, exp, f"final/{family}", {"stage": "final", "family": family})
    state = build_model("cfc", META, 2, KWARGS).state_dict()
    uri = log_model_from_state(run, tracking.tracking_uri(root), "cfc", KWARGS, 2, state, META)
    record = {"dataset": DATASET, "family": family, "metric": "accuracy", "mode": "max", "config": KWARGS,
              "val_mean": val_mean, "val_std": 0.01, "test_mean": val_mean, "test_std": 0.01,
              "n_seeds": n_seeds, "model_seed": 0, "model_uri": uri}
    path = final_result_path(root, DATASET, family)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _champion_family(root: Path) -> str:
    client = MlflowClient(tracking.tracking_uri(root))
    return client.get_model_version_by_alias(f"ctsweep-{DATASET}", "champion").tags["family"]


def test_alias_moves_only_for_a_better_candidate(root: Path) -> None:
    p = PromoteParams(seeds_required=5, min_improvement=0.01)
    _final(root, "a", 0.80)
    _final(root, "b", 0.70)
    first = promote(root, [DATASET], ["a", "b"], p)[0]
    assert first["candidate_family"] == "a" and first["alias_moved"] and _champion_family(root) == "a"

    _final(root, "a", 0.805)  # better, but not by min_improvement
    second = promote_dataset(root, DATASET, ["a", "b"], p)
    assert not second["alias_moved"] and second["candidate_version"] == 2 and _champion_family(root) == "a"
    assert second["champion_version"] == 1

    _final(root, "b", 0.90)
    third = promote_dataset(root, DATASET, ["a", "b"], p)
    assert third["candidate_family"] == "b" and third["alias_moved"] and _champion_family(root) == "b"
    assert json.loads((root / "reports" / "promotion.json").read_text())[0]["candidate_family"] == "a"


def test_by_hand_moves_the_alias_even_when_worse(root: Path) -> None:
    p = PromoteParams()
    _final(root, "a", 0.9)
    _final(root, "b", 0.5)
    promote_dataset(root, DATASET, ["a", "b"], p)
    decision = promote_dataset(root, DATASET, ["a", "b"], p, family="b")
    assert decision["alias_moved"] and decision["by_hand"] and _champion_family(root) == "b"


def test_too_few_seeds_is_refused_with_the_reason(root: Path) -> None:
    _final(root, "a", 0.9, n_seeds=3)
    with pytest.raises(CtsweepError, match=r"3 final seeds.*seeds_required is 5"):
        promote_dataset(root, DATASET, ["a"], PromoteParams(seeds_required=5))


def test_missing_final_result_names_the_stage(root: Path) -> None:
    with pytest.raises(CtsweepError, match=r"ctsweep final toy a"):
        promote_dataset(root, DATASET, ["a"], PromoteParams())
