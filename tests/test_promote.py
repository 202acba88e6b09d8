"""The promotion rule on hand-made final results, against a real MLflow store in a temp folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.config import PromoteParams
from pipeline.data.contract import Meta
from pipeline.errors import CtsweepError
from pipeline.stores.paths import final_result_path
from pipeline.registry.promote import judge, promote, promote_dataset
from pipeline.serving.pyfunc import log_model_from_state
from pipeline.training.loop import build_model

DATASET = "toy"
META = Meta(name=DATASET, task="classification", per_step=False, output_size=3, metric="accuracy",
            channels=["a", "b"], source="hand-made", norm_mean=[0.0, 0.0], norm_std=[1.0, 1.0])
KWARGS = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _record(family: str, vals: list[float], config: dict | None = None) -> dict:
    mean = sum(vals) / len(vals)
    return {"dataset": DATASET, "family": family, "metric": "accuracy", "mode": "max",
            "config": config or {**KWARGS, "lr": 1e-3}, "val_mean": mean, "val_std": 0.01, "test_mean": mean,
            "test_std": 0.01, "n_seeds": len(vals), "model_seed": 0,
            "seeds": [{"seed": i, "val": v, "test": v} for i, v in enumerate(vals)]}


def _final(root: Path, family: str, val_mean: float, n_seeds: int = 5, spread: float = 0.01,
           config: dict | None = None) -> dict:
    """Write a final result whose model is a real (untrained) CfC logged to a real run."""
    client, exp = tracking.experiment_id(root, DATASET)
    run = tracking.start_run(client, exp, f"final/{family}", {"stage": "final", "family": family})
    state = build_model("cfc", META, 2, KWARGS).state_dict()
    uri = log_model_from_state(run, tracking.tracking_uri(root), "cfc", KWARGS, 2, state, META)
    offsets = [spread * (i - (n_seeds - 1) / 2) for i in range(n_seeds)]
    record = {**_record(family, [val_mean + o for o in offsets], config), "model_uri": uri,
              "mlflow_parent_run_id": run}
    path = final_result_path(root, DATASET, family)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def _champion(root: Path):
    client = MlflowClient(tracking.tracking_uri(root))
    return client.get_model_version_by_alias(f"ctsweep-{DATASET}", "champion")


def test_rule_margin_and_welch_on_hand_made_scores() -> None:
    champion = {"val_mean": "0.8", "val_scores": json.dumps([0.79, 0.80, 0.81, 0.80, 0.80])}
    tight = _record("b", [0.90, 0.91, 0.89, 0.90, 0.90])
    noisy = _record("b", [0.70, 0.99, 0.75, 0.99, 0.92])  # mean 0.87, but the seeds disagree
    assert judge(tight, champion, PromoteParams(min_improvement=0.05, max_p_value=0.05))[0]
    assert not judge(tight, champion, PromoteParams(min_improvement=0.15))[0]  # 0.10 gain < margin
    ok, why = judge(noisy, champion, PromoteParams(max_p_value=0.05))
    assert not ok and "Welch p = 0.316" in why  # t = 0.07 / 0.0612 = 1.14, df 4.0 and "max_p_value = 0.05" in why
    assert judge(noisy, champion, PromoteParams(max_p_value=None))[0]  # the mean alone would promote it
    assert judge(tight, None, PromoteParams())[1] == "no champion yet"
    lower_better = {**_record("b", [0.1] * 5), "mode": "min"}
    assert judge(lower_better, {"val_mean": "0.2"}, PromoteParams())[0]


def test_alias_moves_only_for_a_better_candidate(root: Path) -> None:
    p = PromoteParams(seeds_required=5, min_improvement=0.01)
    _final(root, "a", 0.80)
    _final(root, "b", 0.70)
    first = promote(root, [DATASET], ["a", "b"], p)[0]
    assert first["candidate_family"] == "a" and first["alias_moved"] and _champion(root).tags["family"] == "a"

    _final(root, "a", 0.805)  # better, but not by min_improvement
    second = promote_dataset(root, DATASET, ["a", "b"], p)
    assert not second["alias_moved"] and second["candidate_version"] == 2 and int(_champion(root).version) == 1
    assert "not better by more than promote.min_improvement = 0.01" in second["reason"]

    _final(root, "b", 0.90)
    third = promote_dataset(root, DATASET, ["a", "b"], p)
    assert third["candidate_family"] == "b" and third["alias_moved"] and _champion(root).tags["family"] == "b"
    assert json.loads((root / "reports" / "promotion.json").read_text())[0]["candidate_family"] == "a"


def test_rerunning_reuses_the_registered_version(root: Path) -> None:
    _final(root, "a", 0.8)
    first = promote_dataset(root, DATASET, ["a"], PromoteParams())
    again = promote_dataset(root, DATASET, ["a"], PromoteParams())
    assert again["candidate_version"] == first["candidate_version"] == 1 and not again["alias_moved"]
    assert again["reason"] == "the candidate is already the champion"
    versions = MlflowClient(tracking.tracking_uri(root)).search_model_versions(f"name = 'ctsweep-{DATASET}'")
    assert len(versions) == 1


def test_registered_version_carries_metrics_and_config(root: Path) -> None:
    record = _final(root, "a", 0.8, config={**KWARGS, "lr": 0.002})
    promote_dataset(root, DATASET, ["a"], PromoteParams())
    tags = _champion(root).tags
    assert float(tags["val_mean"]) == pytest.approx(record["val_mean"]) and tags["n_seeds"] == "5"
    assert json.loads(tags["config"])["lr"] == 0.002 and len(json.loads(tags["val_scores"])) == 5
    assert tags["final_run_id"] == record["mlflow_parent_run_id"] and tags["model_uri"] == record["model_uri"]
    assert _champion(root).description == "a: validation accuracy 80.00 ± 1.00, test 80.00 ± 1.00 over 5 seeds"


def test_the_registered_model_has_a_signature_and_example_and_takes_both_input_forms(root: Path) -> None:
    import mlflow
    import numpy as np
    import pandas as pd
    from mlflow.models import Model

    _final(root, "cfc", 0.8)
    assert promote_dataset(root, DATASET, ["cfc"], PromoteParams())["alias_moved"]
    uri = f"models:/ctsweep-{DATASET}@champion"
    info = Model.load(uri)  # the MLmodel file the UI shows
    inputs = {c["name"]: (c["type"], c.get("required", True)) for c in info.signature.inputs.to_dict()}
    assert inputs == {"series": ("any", False), "time": ("any", False), "a": ("any", False),
                      "b": ("any", False), "x": ("array", False), "t": ("array", False), "mask": ("array", False)}
    assert info.signature.outputs.to_dict() == [{"type": "tensor", "tensor-spec": {"dtype": "float32",
                                                                                  "shape": (-1, 3)}}]
    example = info.load_input_example(mlflow.artifacts.download_artifacts(uri))
    assert list(example.columns) == ["series", "time", "a", "b"] and set(example["series"]) == {"s0", "s1"}

    model = mlflow.pyfunc.load_model(uri)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 2)).astype(np.float32)
    x[1, 3] = np.nan  # the second series is one step shorter
    t = np.tile(np.arange(4, dtype=np.float32), (3, 1))
    mask = ~np.isnan(x).all(-1)
    frame = pd.DataFrame([{"series": f"s{i}", "time": float(t[i, j]), "a": float(x[i, j, 0]), "b": float(x[i, j, 1])}
                          for i in range(3) for j in range(4) if mask[i, j]])
    from_arrays = model.predict({"x": x, "t": t, "mask": mask})
    assert from_arrays.shape == (3, 3)
    np.testing.assert_allclose(model.predict(frame), from_arrays, rtol=1e-6)
    whole = frame.assign(time=frame["time"].astype(np.int64))  # as pandas reads a CSV of whole-number times
    np.testing.assert_allclose(model.predict(whole), from_arrays, rtol=1e-6)
    np.testing.assert_allclose(model.predict({"x": x, "t": t}), from_arrays, rtol=1e-6)  # mask left out
    np.testing.assert_allclose(model.predict(example), model.unwrap_python_model().predict(None, example), rtol=1e-6)


def test_side_by_side_shows_both_and_marks_config_changes(root: Path) -> None:
    _final(root, "a", 0.8, config={**KWARGS, "lr": 0.001})
    promote_dataset(root, DATASET, ["a"], PromoteParams())
    _final(root, "a", 0.9, config={**KWARGS, "lr": 0.003})
    shown = promote_dataset(root, DATASET, ["a"], PromoteParams(), dry_run=True)
    table = shown["table"].splitlines()
    assert "champion v1" in table[1] and "candidate" in table[1]
    assert any(line.split() == ["validation", "accuracy", "80.00", "±", "1.00", "90.00", "±", "1.00"] for line in table)
    assert any(line.split() == ["*", "lr", "0.001", "0.003"] for line in table)
    assert any(line.split() == ["hidden_size", "8", "8"] for line in table)
    assert shown["better_by_rule"] and not shown["alias_moved"] and shown["candidate_version"] is None
    assert len(MlflowClient(tracking.tracking_uri(root)).search_model_versions(f"name = 'ctsweep-{DATASET}'")) == 1


def test_by_hand_and_force_move_the_alias_even_when_worse(root: Path) -> None:
    p = PromoteParams()
    _final(root, "a", 0.9)
    _final(root, "b", 0.5)
    promote_dataset(root, DATASET, ["a", "b"], p)
    decision = promote_dataset(root, DATASET, ["a", "b"], p, family="b")
    assert decision["alias_moved"] and decision["by_hand"] and _champion(root).tags["family"] == "b"
    forced = promote_dataset(root, DATASET, ["a", "b"], p, force=True)  # candidate a, which is better anyway
    assert forced["alias_moved"] and _champion(root).tags["family"] == "a"
    _final(root, "a", 0.1)  # a worse model of a is now the candidate (best on validation: b at 0.5)
    _final(root, "b", 0.05)
    refused = promote_dataset(root, DATASET, ["a", "b"], p)
    assert not refused["alias_moved"]
    assert promote_dataset(root, DATASET, ["a", "b"], p, force=True)["alias_moved"]


def test_too_few_seeds_is_refused_with_the_reason(root: Path) -> None:
    _final(root, "a", 0.9, n_seeds=3)
    with pytest.raises(CtsweepError, match=r"3 final seeds.*seeds_required is 5.*ctsweep final toy a"):
        promote_dataset(root, DATASET, ["a"], PromoteParams(seeds_required=5))
    with pytest.raises(CtsweepError, match=r"3 final seeds"):  # by hand too
        promote_dataset(root, DATASET, ["a"], PromoteParams(seeds_required=5), family="a", force=True)


def test_missing_final_result_names_the_stage(root: Path) -> None:
    with pytest.raises(CtsweepError, match=r"ctsweep final toy a"):
        promote_dataset(root, DATASET, ["a"], PromoteParams())


def test_a_model_trained_on_an_unverified_copy_says_so_in_its_description_and_tags(root: Path) -> None:
    note = "local copy, not verified against the publisher (set-a.tar.gz); 3,996 of 4,000 records"
    record = _final(root, "a", 0.80)
    final_result_path(root, DATASET, "a").write_text(json.dumps({**record, "data_provenance": note}))
    decision = promote_dataset(root, DATASET, ["a"], PromoteParams(seeds_required=5))
    client = MlflowClient(tracking.tracking_uri(root))
    version = client.get_model_version(decision["registered_model"], str(decision["candidate_version"]))
    assert version.description.endswith(f"over 5 seeds; data: {note}")
    assert version.tags["data_provenance"] == note


def test_a_model_trained_on_verified_data_has_no_data_note(root: Path) -> None:
    _final(root, "a", 0.80)
    decision = promote_dataset(root, DATASET, ["a"], PromoteParams(seeds_required=5))
    version = MlflowClient(tracking.tracking_uri(root)).get_model_version(decision["registered_model"],
                                                                          str(decision["candidate_version"]))
    assert "data:" not in version.description and "data_provenance" not in version.tags
