"""The classical reference (pipeline.classical): which aeon classifier a processed dataset admits,
on hand-made splits; a classifier that fails or runs out of time reported, not raised; and the real
stage on a dataset aeon ships (ItalyPowerDemand, MiniRocket) shown by the real report stage as a
row, a line beneath the table, a line on the test plot and metrics.json's entry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.classical.choice import DTW, LOGISTIC, MINIROCKET, RIDGE, Choice, choose
from pipeline.classical.fit import Fitted, fit_predict
from pipeline.reporting.classical_reference import read_reference, reference_note, reference_rows
from pipeline.cli import app
from pipeline.data.contract import Meta, Split
from pipeline.reporting.report import report
from pipeline.stores.paths import classical_result_path, final_result_path, search_result_path
from tests.conftest import default_params, write_params

RUNNER = CliRunner()


def _meta(task: str = "classification", per_step: bool = False) -> Meta:
    return Meta(name="toy", task=task, per_step=per_step, output_size=2, metric="accuracy", channels=["a", "b"],
                source="hand-made")


def _split(lengths: list[int], width: int = 5, dt: float = 1.0) -> Split:
    """Series of two channels whose first `lengths[i]` steps are observed, then padding (NaN,
    mask False, the last time repeated), sampled every `dt`."""
    n = len(lengths)
    x = np.full((n, width, 2), np.nan, np.float32)
    t = np.zeros((n, width), np.float32)
    mask = np.zeros((n, width), bool)
    for i, length in enumerate(lengths):
        x[i, :length] = np.arange(2 * length, dtype=np.float32).reshape(length, 2) + i
        t[i] = dt * np.minimum(np.arange(width), length - 1)
        mask[i, :length] = True
    return Split(x=x, t=t, mask=mask, y=np.arange(n, dtype=np.int64) % 2)


def test_series_of_one_length_go_to_minirocket_as_one_array_with_validation_in_training() -> None:
    train, val, test = _split([5, 5, 5]), _split([5, 5]), _split([5])
    choice = choose(_meta(), train, val, test)
    assert isinstance(choice, Choice) and choice.classifier == MINIROCKET
    assert choice.train.shape == (5, 2, 5) and choice.test.shape == (1, 2, 5)  # (N, C, L): aeon's layout
    assert choice.y_train.tolist() == [0, 1, 0, 0, 1]  # training labels, then validation's
    assert choice.train[3, 1].tolist() == val.x[0, :, 1].tolist()  # channel 1 of validation's first series


def test_padded_series_of_unequal_length_go_to_1nn_dtw_as_a_list() -> None:
    choice = choose(_meta(), _split([5, 3, 4]), _split([2]), _split([5, 5]))
    assert isinstance(choice, Choice) and choice.classifier == DTW
    assert [s.shape for s in choice.train] == [(2, 5), (2, 3), (2, 4), (2, 2)]  # the observed steps only
    assert not any(np.isnan(s).any() for s in choice.train)
    # the same length within each split but not across them: unequal too
    assert choose(_meta(), _split([4, 4]), _split([4]), _split([5])).classifier == DTW


def test_data_no_aeon_classifier_takes_is_refused_with_the_reason() -> None:
    ok = _split([5, 5])
    gaps = _split([5, 5])
    gaps.mask[0, 2] = False  # a missing step inside a series
    assert "missing steps" in choose(_meta(), gaps, ok, ok) and "(the train split)" in choose(_meta(), gaps, ok, ok)
    uneven = _split([5, 5])
    uneven.t[1] = [0, 1, 3, 4, 8]
    assert "unevenly spaced" in choose(_meta(), ok, ok, uneven) and "(the test split)" in choose(_meta(), ok, ok, uneven)
    holes = _split([5, 5])
    holes.x[1, 2, 0] = np.nan  # an observed step with a channel missing
    assert "missing channel values" in choose(_meta(), ok, holes, ok)
    assert "one target per series" in choose(_meta("regression"), ok, ok, ok)
    assert isinstance(choose(_meta(), ok, ok, _split([5, 5], dt=0.25)), Choice)  # any interval, if equal


def test_a_failing_classifier_and_one_past_its_time_limit_are_reported_not_raised() -> None:
    data = np.zeros((4, 1, 12))
    broken = Choice(MINIROCKET, data, np.array([0, 1]), data)  # 2 labels for 4 series
    why = fit_predict(broken, seed=0, time_limit_s=300)
    assert isinstance(why, str) and why.startswith("ValueError") and "\n" not in why
    slow = Choice(DTW, [np.zeros((1, 3)), np.ones((1, 4))], np.array([0, 1]), [np.zeros((1, 5))])
    assert fit_predict(slow, seed=0, time_limit_s=0.2) == (
        "1-NN DTW exceeded its time limit of 0.2 s (`classical.time_limit_s`)")  # aeon's import alone takes longer
    fitted = fit_predict(slow, seed=0, time_limit_s=300)  # the nearest of the two is the all-zero series
    assert isinstance(fitted, Fitted) and fitted.classes == [0, 1] and fitted.outputs.tolist() == [[1.0, 0.0]]


def test_the_stage_writes_why_a_regression_dataset_has_no_reference(tmp_path: Path) -> None:
    from pipeline.classical.stage import run
    from pipeline.config import ClassicalParams
    from pipeline.data.contract import Dataset, save_dataset
    from pipeline.stores.paths import processed_dir

    meta = Meta(name="toy", task="regression", per_step=False, output_size=1, metric="mse", channels=["a", "b"],
                source="hand-made")
    split = _split([5, 5])
    split = Split(x=split.x, t=split.t, mask=split.mask, y=np.zeros((2, 1), np.float32))
    save_dataset(processed_dir(tmp_path, "toy"), Dataset(meta, {"train": split, "val": split, "test": split}))
    record = run(tmp_path, "toy", ClassicalParams())
    assert json.loads(classical_result_path(tmp_path, "toy").read_text()) == record
    assert (record["status"], record["reason"]) == ("not_applicable", (
        "a regression task with one target per series: the classical reference covers classification "
        "and per-step regression"))


def _steps_split(rng: np.random.Generator, n: int, weights: np.ndarray, noise: float) -> Split:
    """Per-step regression: y at a step = weights @ [x, dt] of that step + noise, 8 steps a series,
    the 4th step of every other series missing (so its successor's dt is 2)."""
    x = rng.normal(size=(n, 8, 2)).astype(np.float32)
    mask = np.ones((n, 8), bool)
    mask[::2, 3] = False
    x[~mask] = np.nan
    t = np.tile(np.arange(8, dtype=np.float32), (n, 1))
    dt = np.zeros((n, 8), np.float32)
    for i in range(n):
        times = t[i][mask[i]]
        dt[i][mask[i]] = np.diff(times, prepend=times[:1])
    inputs = np.concatenate([np.nan_to_num(x), dt[..., None]], axis=-1)
    y = (inputs @ weights.T + noise * rng.normal(size=(n, 8, 2))).astype(np.float32)
    return Split(x=x, t=t, mask=mask, y=y)


def test_per_step_regression_goes_to_the_one_step_ridge_with_the_time_since_the_last_step() -> None:
    meta = Meta(name="toy", task="regression", per_step=True, output_size=2, metric="mse", channels=["a", "b"],
                source="hand-made")
    rng = np.random.default_rng(0)
    weights = np.array([[1.0, 0.5, 2.0], [0.0, -1.0, 0.0]])
    train, val, test = (_steps_split(rng, n, weights, 0.0) for n in (4, 2, 3))
    choice = choose(meta, train, val, test)
    assert isinstance(choice, Choice) and choice.classifier == RIDGE
    observed_train = 4 * 8 - 2
    observed = observed_train + 2 * 8 - 1  # train, then validation: the missing steps left out
    assert choice.train.shape == (observed, 3) and choice.y_train.shape == (observed, 2)
    assert choice.train[:8, 2].tolist() == [0, 1, 1, 2, 1, 1, 1, 0]  # series 0's dt, then series 1's first
    assert np.allclose(choice.train @ weights.T, choice.y_train, atol=1e-5)  # each step's target beside its inputs
    assert choice.test.shape == (3 * 8 - 2, 3)
    holes = _steps_split(rng, 2, weights, 0.0)
    holes.x[1, 5, 0] = np.nan
    assert choose(meta, train, val, holes) == ("missing channel values at observed steps: the one-step ridge "
                                               "regression takes complete steps (the test split)")
    labels = Split(train.x, train.t, train.mask, (train.y[..., 0] > 0).astype(np.int64))  # a label per step
    steps = choose(_meta(per_step=True), labels, labels, labels)
    assert steps.classifier == LOGISTIC and steps.y_train.shape == (2 * observed_train,)
    assert steps.y_train.dtype == np.int64 and (steps.train == np.concatenate([choice.train[:observed_train]] * 2)).all()


def test_the_stage_fits_the_one_step_ridge_and_scores_it_as_the_trials_are(tmp_path: Path) -> None:
    from pipeline.classical.stage import run, summary
    from pipeline.config import ClassicalParams
    from pipeline.data.contract import Dataset, save_dataset
    from pipeline.stores.paths import processed_dir

    meta = Meta(name="steps", task="regression", per_step=True, output_size=2, metric="mse", channels=["a", "b"],
                source="hand-made")
    rng = np.random.default_rng(1)
    weights = np.array([[1.0, 0.5, 2.0], [0.0, -1.0, 0.0]])
    splits = {name: _steps_split(rng, n, weights, 0.1) for name, n in (("train", 300), ("val", 50), ("test", 100))}
    save_dataset(processed_dir(tmp_path, "steps"), Dataset(meta, splits))
    record = run(tmp_path, "steps", ClassicalParams())
    assert (record["status"], record["classifier"], record["unit"]) == ("ok", RIDGE, "steps")
    assert record["library"].startswith("scikit-learn ") and record["metric"] == "mse"
    assert (record["n_train"], record["n_test"]) == (350 * 8 - 175, 100 * 8 - 50)
    test = splits["test"]
    observed = test.mask
    persistence = float(np.mean((np.nan_to_num(test.x) - test.y)[observed] ** 2))
    assert 0.005 < record["test"] < 0.02 < persistence  # the noise's variance, 0.01, not the last value's error
    assert summary(record).startswith("steps: one-step ridge regression (scikit-learn ")
    note = reference_note(record, "steps", "mse")[0]
    assert f"({record['n_train']:,} steps) on one core" in note
    assert reference_rows(record, "mse", 4)[0].startswith("| *classical: one-step ridge regression (scikit-learn ")


def test_the_report_reads_a_missing_or_broken_reference_as_one_line(tmp_path: Path) -> None:
    assert read_reference(tmp_path, "toy") is None
    assert reference_note(None, "toy", "accuracy") == [
        "Classical reference not computed (`ctsweep classical toy` writes results/toy/classical.json).", ""]
    path = classical_result_path(tmp_path, "toy")
    path.parent.mkdir(parents=True)
    path.write_text('{"status": "ok", "classifier": "MiniRocket"}')
    broken = read_reference(tmp_path, "toy")
    assert broken == ("results/toy/classical.json: no library, test, train_seconds, n_train "
                      "(`ctsweep classical toy` rewrites it)")
    assert reference_rows(broken, "accuracy", 10) == []
    path.write_text("{")
    assert read_reference(tmp_path, "toy").startswith("results/toy/classical.json: ")


# ------------------------------------------------------------------ the real stage and report

DATASET, FAMILIES = "italy_power_demand", ("cfc", "ncde")


def _final(root: Path, family: str, tests: list[float], dataset: str = DATASET) -> None:
    """A hand-made final record the report reads (scores only: no model, no MLflow run)."""
    mean = sum(tests) / len(tests)
    record = {"dataset": dataset, "family": family, "metric": "accuracy", "mode": "max", "config": {"lr": 1e-3},
              "val_mean": mean, "val_std": 0.01, "test_mean": mean, "test_std": 0.01, "n_seeds": len(tests),
              "params": 100, "seconds_per_epoch": 0.1, "n_trials": 1, "n_failed": 0, "status": "ok",
              "seeds": [{"seed": i, "val": v, "test": v, "curve": [0.5, v], "stop": "patience"}
                        for i, v in enumerate(tests)]}
    path = final_result_path(root, dataset, family)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    search = search_result_path(root, dataset, family)
    search.parent.mkdir(parents=True, exist_ok=True)
    search.write_text(json.dumps({"status": "ok", "trials": [{"config": {"lr": 1e-3}, "best_val": mean}]}))


@pytest.mark.slow  # MiniRocket's numba kernels compile on a fresh machine: about 30 s
@pytest.mark.timeout(300)
def test_the_classical_row_is_computed_on_a_bundled_dataset_through_the_real_report_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    params = default_params()
    write_params(tmp_path, {**params, "datasets": [DATASET], "families": list(FAMILIES)})
    for command in (["prepare", DATASET], ["classical", DATASET]):
        done = RUNNER.invoke(app, [*command, "--root", str(tmp_path)])
        assert done.exit_code == 0, done.output
    record = json.loads(classical_result_path(tmp_path, DATASET).read_text())
    assert done.output.startswith(f"{DATASET}: MiniRocket (aeon ") and "on one core" in done.output
    assert (record["status"], record["classifier"], record["trained_on"]) == ("ok", MINIROCKET, "train+val")
    assert record["n_train"] == 67 and record["n_test"] == 1029  # the archive's splits: all 67 train it
    assert 0.9 < record["test"] <= 1.0 and record["train_seconds"] > 0

    for family, tests in zip(FAMILIES, ([0.80, 0.82, 0.81], [0.70, 0.72, 0.71])):
        _final(tmp_path, family, tests)
    metrics = report(tmp_path, [DATASET], list(FAMILIES))
    shown = metrics["_baselines"][DATASET]["classical"]
    assert shown == {k: record[k] for k in ("status", "classifier", "library", "metric", "test", "n_train", "seed")}
    md = (tmp_path / "reports" / "results.md").read_text()
    row = (f"| *classical: MiniRocket ({record['library']}), {record['train_seconds']:.1f} s to train* | "
           f"{100 * record['test']:.2f} |" + " — |" * 8)
    assert row + "\n" in md  # a cell in every one of the table's ten columns
    assert "Classical reference (the *classical* row): MiniRocket from aeon" in md and "(67 series)" in md
    assert set(metrics[DATASET]) == set(FAMILIES)  # a reference, not a family: never ranked or marked as one
    assert (tmp_path / "reports" / "plots" / f"{DATASET}_test.png").stat().st_size > 1000


def test_the_across_datasets_table_has_the_reference_s_would_be_rank_as_a_row_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    datasets = ["a", "b"]
    params = default_params()
    write_params(tmp_path, {**params, "datasets": datasets, "families": list(FAMILIES),
                            "prepare": {d: params["prepare"]["xor_event"] for d in datasets}})
    scores = {"a": ([0.80, 0.82, 0.81], [0.70, 0.72, 0.71]), "b": ([0.60, 0.62, 0.61], [0.90, 0.92, 0.91])}
    for d in datasets:
        for family, tests in zip(FAMILIES, scores[d]):
            _final(tmp_path, family, tests, d)
    # hand-made references: above both families on a (rank 1), between them on b (rank 2)
    for d, test in (("a", 0.95), ("b", 0.75)):
        path = classical_result_path(tmp_path, d)
        path.write_text(json.dumps({"dataset": d, "status": "ok", "classifier": MINIROCKET, "library": "aeon 1.6.0",
                                    "metric": "accuracy", "test": test, "train_seconds": 1.0, "n_train": 10,
                                    "seed": 0}))
    metrics = report(tmp_path, datasets, list(FAMILIES))
    md = (tmp_path / "reports" / "results.md").read_text()
    assert "| *classical reference (would rank)* | 1.50 | 1 | 2 | — |" in md
    assert list(metrics["_across_datasets"]["families"]) == list(FAMILIES)  # the families alone are ranked


def test_per_step_labels_get_the_one_step_logistic_regression_scored_per_step(tmp_path: Path) -> None:
    from pipeline.classical.stage import run
    from pipeline.config import ClassicalParams
    from pipeline.data.contract import Dataset, save_dataset
    from pipeline.stores.paths import processed_dir

    # three activities, each step's label readable from its own channels (plus 10 % label noise)
    meta = Meta(name="acts", task="classification", per_step=True, output_size=3, metric="accuracy",
                channels=["a", "b"], source="hand-made")
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])

    def split(n: int) -> Split:
        labels = rng.integers(0, 3, size=(n, 8))
        x = (centres[labels] + 0.5 * rng.normal(size=(n, 8, 2))).astype(np.float32)
        noisy = np.where(rng.random((n, 8)) < 0.1, rng.integers(0, 3, size=(n, 8)), labels)
        t = np.tile(np.arange(8, dtype=np.float32), (n, 1))
        return Split(x=x, t=t, mask=np.ones((n, 8), bool), y=noisy.astype(np.int64))

    splits = {"train": split(200), "val": split(50), "test": split(100)}
    save_dataset(processed_dir(tmp_path, "acts"), Dataset(meta, splits))
    record = run(tmp_path, "acts", ClassicalParams())
    assert (record["status"], record["classifier"], record["unit"]) == ("ok", LOGISTIC, "steps")
    assert (record["n_train"], record["n_test"]) == (250 * 8, 100 * 8)
    # a step's label follows from its channels but for the noise (a tenth, a third of it right by chance)
    assert 0.85 < record["test"] < 0.97
