"""The trivial baselines under every table (pipeline.reporting.trivial): each predictor scored on
hand-made splits against a hand calculation, the one-sided test behind the `no_better_than_trivial`
mark, and a hand-made result at chance marked in the report, in `ctsweep status` and refused by
promotion unless forced."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import PromoteParams
from pipeline.data.contract import Dataset, Meta, Split, save_dataset
from pipeline.registry.promote import promote, promote_dataset
from pipeline.reporting.marks import NO_BETTER_THAN_TRIVIAL
from pipeline.reporting.report import report
from pipeline.reporting.trivial import Trivial, better_p, dataset_baselines, no_better_than_trivial, trivial_baselines
from pipeline.stores.paths import final_result_path, processed_dir, search_result_path
from tests.conftest import default_params, write_params
from tests.test_promote import DATASET, _champion
from tests.test_promote import _final as _promotable

RUNNER = CliRunner()


def _split(y: np.ndarray, mask: np.ndarray | None = None) -> Split:
    """A split of len(y) series of 3 steps (or mask's), all observed unless `mask` says otherwise."""
    mask = np.ones((len(y), 3), bool) if mask is None else mask
    n, length = mask.shape
    return Split(x=np.zeros((n, length, 1), np.float32), t=np.tile(np.arange(length, dtype=np.float32), (n, 1)),
                 mask=mask, y=y)


def _save(folder: Path, meta: Meta, train: Split, val: Split, test: Split) -> Path:
    save_dataset(folder, Dataset(meta, {"train": train, "val": val, "test": test}))
    return folder


def _meta(task: str, metric: str, output_size: int, per_step: bool = False, classes: list[str] | None = None) -> Meta:
    return Meta(name="toy", task=task, per_step=per_step, output_size=output_size, metric=metric, channels=["a"],
                source="hand-made", classes=classes or [])


def test_majority_class_is_the_training_split_s_most_frequent_label(tmp_path: Path) -> None:
    meta = _meta("classification", "accuracy", 3, classes=["x", "y", "z"])
    train = _split(np.array([2, 2, 2, 0, 1]))  # z: 3 of 5
    val, test = _split(np.array([2, 0, 0, 0])), _split(np.array([2, 2, 1, 0, 2]))
    [found] = trivial_baselines(_save(tmp_path, meta, train, val, test))
    assert (found.name, found.val, found.test) == ("majority class", 0.25, pytest.approx(0.6))
    assert found.detail == "class z: 3 of 5 training targets"


def test_binary_accuracy_and_auroc(tmp_path: Path) -> None:
    train, val, test = _split(np.array([0, 1, 1])), _split(np.array([1, 0])), _split(np.array([0, 0, 0, 1]))
    [acc] = trivial_baselines(_save(tmp_path / "acc", _meta("binary", "accuracy", 1), train, val, test))
    assert (acc.val, acc.test) == (0.5, 0.25)  # always 1
    [auc] = trivial_baselines(_save(tmp_path / "auc", _meta("binary", "auroc", 1), train, val, test))
    assert (auc.name, auc.val, auc.test) == ("constant score", 0.5, 0.5)  # roc_auc_score of one score


def test_per_step_accuracy_counts_only_observed_steps(tmp_path: Path) -> None:
    meta = _meta("classification", "accuracy", 2, per_step=True)
    mask = np.array([[True, True, False], [True, False, False]])
    train = _split(np.array([[1, 1, 0], [1, 0, 0]]), mask)  # observed: 1, 1, 1 (the 0s are not observed)
    test = _split(np.array([[1, 0, 0], [0, 1, 1]]), np.array([[True, True, True], [True, False, False]]))
    [found] = trivial_baselines(_save(tmp_path, meta, train, train, test))
    assert found.val == 1.0 and found.test == pytest.approx(1 / 4)  # observed test labels 1, 0, 0, 0


def test_mse_of_the_training_mean_and_of_the_last_value(tmp_path: Path) -> None:
    flat = _meta("regression", "mse", 2)
    train = _split(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))  # mean (1, 2)
    test = _split(np.array([[1.0, 4.0], [3.0, 2.0]], np.float32))  # errors (0, 2), (2, 0): mse 8 / 4
    [mean] = trivial_baselines(_save(tmp_path / "flat", flat, train, train, test))
    assert (mean.name, mean.val, mean.test) == ("training mean", 1.0 + 0.0, 2.0)

    steps = _meta("regression", "mse", 1, per_step=True)
    mask = np.array([[True, False, True, True]])
    train = _split(np.array([[[1.0], [9.0], [3.0], [2.0]]], np.float32), mask)  # observed mean 2
    test = _split(np.array([[[4.0], [0.0], [6.0], [5.0]]], np.float32), mask)
    found = {b.name: b for b in trivial_baselines(_save(tmp_path / "steps", steps, train, train, test))}
    # training mean: errors 2, 4, 3 -> (4 + 16 + 9) / 3; last value: 2 (the mean at the first
    # step), then 4 (the previous observed target; step 1 is not observed), then 6: errors 2, 2, 1
    assert found["training mean"].test == pytest.approx(29 / 3)
    assert found["last value"].test == pytest.approx(9 / 3)
    assert found["last value"].val == pytest.approx((1 + 4 + 1) / 3)  # 2 -> 1, 1 -> 3, 3 -> 2


def test_a_dataset_without_processed_data_or_with_a_damaged_split_says_why(tmp_path: Path) -> None:
    why = "no processed data in data/processed/toy (`ctsweep prepare toy` writes it)"
    assert dataset_baselines(tmp_path, "toy") == why
    folder = processed_dir(tmp_path, "toy")
    _save(folder, _meta("binary", "accuracy", 1), *[_split(np.array([0, 1]))] * 3)
    (folder / "test.npz").write_bytes(b"not a zip")
    why = dataset_baselines(tmp_path, "toy")  # a damaged split
    assert why.startswith("data/processed/toy/test.npz: ") and "\n" not in why  # relative: the same anywhere


def test_the_one_sided_test_on_five_values() -> None:
    # By hand: mean 0.52, sample variance 0.00025, t = 0.02 / sqrt(0.00025 / 5) = sqrt 8, df 4. The
    # t distribution's CDF at 4 degrees of freedom in closed form, with t^2 = 8 (1 + t^2/4 = 3):
    # F(t) = 1/2 + 3/8 * t/sqrt(3) * (1 - (8/3)/12) = 1/2 + 3/8 * 1.632993 * 7/9 = 0.976290, p = 1 - F.
    scores = [0.50, 0.51, 0.52, 0.53, 0.54]
    p = 0.5 - 3 / 8 * math.sqrt(8 / 3) * 7 / 9
    assert p == pytest.approx(0.023710, abs=1e-6)
    assert better_p(scores, 0.5, "max") == pytest.approx(p, rel=1e-9)
    assert better_p(scores, 0.5, "min") == pytest.approx(1 - p, rel=1e-9)
    assert math.isnan(better_p([0.9], 0.5, "max"))  # one score: no test
    assert better_p([0.6, 0.6], 0.5, "max") == 0.0 and math.isnan(better_p([0.5, 0.5], 0.5, "max"))


def _record(tests: list[float], mode: str = "max") -> dict:
    return {"metric": "accuracy", "mode": mode, "test_mean": sum(tests) / len(tests),
            "seeds": [{"seed": i, "test": t} for i, t in enumerate(tests)]}


def test_a_cell_at_chance_is_marked_and_one_above_it_is_not() -> None:
    chance = Trivial("majority class", "class 0", 0.5, 0.5)
    mark, p = no_better_than_trivial(_record([0.49, 0.5, 0.51, 0.5, 0.48]), False, chance)
    assert mark is not None and mark.mark == NO_BETTER_THAN_TRIVIAL and p > 0.05
    assert mark.detail.startswith("test 49.60 against majority class 50.00 (p = ")
    assert no_better_than_trivial(_record([0.8, 0.82, 0.81]), False, chance)[0] is None
    one, p = no_better_than_trivial(_record([0.9]), False, chance)
    assert one is not None and "1 seed: no test" in one.detail and math.isnan(p)


# ------------------------------------------------------------ report, status and promotion, end to end

A, B = "cfc", "ncde"


@pytest.fixture
def at_chance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Dataset toy (three classes, 40 % of every split's labels class 0): cfc scores 41 % and ncde 39 %
    over five seeds, cfc the best on validation; both with a real model that promotion can register."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    params = default_params()
    write_params(tmp_path, {**params, "datasets": [DATASET], "families": [A, B],
                            "prepare": {DATASET: params["prepare"]["xor_event"]}})
    meta = _meta("classification", "accuracy", 3)
    labels = np.array([0, 0, 1, 2, 0, 1, 2, 0, 1, 2])  # 4 of 10 are class 0 in every split
    _save(processed_dir(tmp_path, DATASET), meta, *[_split(labels)] * 3)
    for family, score in ((A, 0.41), (B, 0.39)):  # test = validation: cfc the best, both at chance
        _promotable(tmp_path, family, score)
        path = final_result_path(tmp_path, DATASET, family)
        record = json.loads(path.read_text())  # what the report reads besides what promotion does
        record.update(params=100, seconds_per_epoch=0.1, n_trials=4, n_failed=0, status="ok")
        for s in record["seeds"]:
            s.update(curve=[0.3, s["val"], s["val"]], stop="patience")
        path.write_text(json.dumps(record))
    for family in (A, B):
        path = search_result_path(tmp_path, DATASET, family)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"status": "ok", "trials": [{"config": {"lr": 1e-3}, "best_val": 0.4}]}))
    return tmp_path


def test_a_result_at_chance_is_marked_in_the_report_and_status_and_refused_by_promotion(at_chance: Path) -> None:
    metrics = report(at_chance, [DATASET], [A, B])
    marks = [m["mark"] for m in metrics[DATASET][A]["marks"]]
    assert marks == [NO_BETTER_THAN_TRIVIAL] and metrics[DATASET][A]["p_vs_trivial"] > 0.05
    assert metrics["_baselines"][DATASET]["trivial"] == [
        {"name": "majority class", "detail": "class 0: 4 of 10 training targets", "val": 0.4, "test": 0.4}]
    md = (at_chance / "reports" / "results.md").read_text()
    assert f"| **{A}** (best) ∅ | 41.00 ± 1.00 |" in md
    row = "| *trivial: majority class* | 40.00 | 40.00 |" + " — |" * 7  # a cell in every column
    assert row + "\n" in md
    assert "∅ No better than trivial: a one-sided one-sample t-test" in md
    assert (at_chance / "reports" / "metrics" / DATASET / f"{A}.json").is_file()  # "_baselines" is no dataset
    # these hand-made searches name no reference configuration: no search gain, and why
    assert metrics[DATASET][A]["search_gain"] is None
    assert metrics[DATASET][A]["search_gain_note"] == "no reference configuration"
    assert "| 4 (0) | n/a (no reference configuration) |" in md

    status = RUNNER.invoke(app, ["status", "--root", str(at_chance)])
    assert status.exit_code == 0, status.output  # a mark is a warning
    assert f"{DATASET}/{A}: {NO_BETTER_THAN_TRIVIAL}: test 41.00 against majority class 40.00" in status.output
    assert f"{DATASET}/{B}: {NO_BETTER_THAN_TRIVIAL}: test 39.00 against" in status.output

    refused = promote(at_chance, [DATASET], [A, B], PromoteParams())[0]
    assert refused["candidate_family"] == A and refused["refused"] == NO_BETTER_THAN_TRIVIAL
    assert f"{A} is no better than trivial (test 41.00 against" in refused["reason"] and "--force" in refused["reason"]
    assert not refused["alias_moved"] and refused["candidate_version"] is None
    forced = promote_dataset(at_chance, DATASET, [A, B], PromoteParams(), force=True)
    assert forced["alias_moved"] and forced["by_force"] and "promoted by --force" in forced["reason"]
    assert _champion(at_chance).tags["family"] == A
