"""`ctsweep compare A B`: two project roots' results compared value by value, the first
difference named; run ids, paths inside each root and wall-clock times ignored."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import MissingInputError
from pipeline.reporting.compare import MISSING, Difference, compare_runs

SEARCH = "results/japanese_vowels/search/ncde.json"
FINAL = "results/japanese_vowels/final/ncde.json"
METRICS = "reports/metrics.json"


def search_record(root: Path) -> dict[str, Any]:
    return {
        "dataset": "japanese_vowels", "family": "ncde", "mlflow_parent_run_id": f"parent-{root.name}",
        "ray_experiment_path": str(root / "ray" / "japanese_vowels-ncde"),
        "best_config": {"hidden_channels": 64, "lr": 0.001},
        "trials": [{"trial_id": f"{root.name}-{i}", "mlflow_run_id": f"run-{root.name}-{i}",
                    "config": {"hidden_channels": 64, "lr": 0.001 * (i + 1)}, "val_metric": 0.5 + i / 10,
                    "seconds_per_epoch": 1.5 + i, "history": [0.1, 0.2, float("nan")]}
                   for i in range(3)],
    }


def write(root: Path, rel: str, data: Any) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        json.dump(data, f)


def project(root: Path) -> Path:
    """A small project root: one search and one final record and reports/metrics.json."""
    write(root, SEARCH, search_record(root))
    write(root, FINAL, {"test_mean": 0.9612345678901234, "test_std": 0.01, "seeds": [0, 1, 2],
                        "model_uri": f"runs:/{root.name}/model", "wall_s": 12.0,
                        "checkpoint": str(root / "results" / "japanese_vowels" / "final" / "ncde.pt")})
    write(root, METRICS, {"japanese_vowels": {"ncde": {"test_mean": 0.9612345678901234, "status": "ok"}}})
    return root


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    return project(tmp_path / "a"), project(tmp_path / "b")


def edit(root: Path, rel: str, change: Any) -> None:
    path = root / rel
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_identical_roots_have_no_difference(roots: tuple[Path, Path]) -> None:
    assert compare_runs(*roots) == []


def test_a_float_changed_deep_in_a_trial_is_named_exactly(roots: tuple[Path, Path]) -> None:
    a, b = roots
    edit(b, SEARCH, lambda d: d["trials"][1]["config"].update(lr=0.0020000000000000005))
    found = compare_runs(a, b)
    assert found == [Difference(SEARCH, "trials[1].config.lr", 0.002, 0.0020000000000000005)]
    assert str(found[0]) == f"{SEARCH}: trials[1].config.lr: 0.002 (A) vs 0.0020000000000000005 (B)"
    assert compare_runs(a, b, tolerance=1e-9) == []


def test_a_changed_value_prints_as_one_line(roots: tuple[Path, Path]) -> None:
    a, b = roots
    edit(b, SEARCH, lambda d: d["best_config"].update(hidden_channels=128))
    assert [str(d) for d in compare_runs(a, b)] == [f"{SEARCH}: best_config.hidden_channels: 64 (A) vs 128 (B)"]


def test_ignored_keys_may_differ(roots: tuple[Path, Path]) -> None:
    a, b = roots
    edit(b, SEARCH, lambda d: d["trials"][0].update(mlflow_run_id="other", seconds_per_epoch=99.0))
    edit(b, FINAL, lambda d: d.update(wall_s=1.0))
    assert compare_runs(a, b) == []


def test_absolute_paths_compare_relative_to_their_root(roots: tuple[Path, Path]) -> None:
    a, b = roots
    assert str(a) in (a / FINAL).read_text() and str(b) in (b / FINAL).read_text()
    assert compare_runs(a, b) == []
    edit(b, FINAL, lambda d: d.update(checkpoint=str(b / "elsewhere.pt")))
    assert [(d.path, d.key) for d in compare_runs(a, b)] == [(FINAL, "checkpoint")]


def test_lists_compare_element_wise_and_by_length(roots: tuple[Path, Path]) -> None:
    a, b = roots
    edit(b, SEARCH, lambda d: d["trials"][2]["history"].append(0.3))
    assert compare_runs(a, b) == [Difference(SEARCH, "trials[2].history[3]", MISSING, 0.3)]


def test_floats_compare_bit_for_bit(roots: tuple[Path, Path]) -> None:
    a, b = roots
    edit(b, METRICS, lambda d: d["japanese_vowels"]["ncde"].update(test_mean=0.9612345678901235))
    (found,) = compare_runs(a, b)
    assert (found.path, found.key) == (METRICS, "japanese_vowels.ncde.test_mean")
    assert math.isnan(json.loads((a / SEARCH).read_text())["trials"][0]["history"][2])  # NaN equals NaN


def test_a_file_missing_in_b_is_a_difference(roots: tuple[Path, Path]) -> None:
    a, b = roots
    (b / FINAL).unlink()
    (found,) = compare_runs(a, b)
    assert (found.path, found.key, found.b) == (FINAL, "", MISSING)
    assert str(found).startswith(f"{FINAL}: ") and str(found).endswith("vs missing (B)")


def test_files_are_compared_results_first_then_metrics(roots: tuple[Path, Path]) -> None:
    a, b = roots
    edit(b, METRICS, lambda d: d["japanese_vowels"]["ncde"].update(status="failed"))
    edit(b, SEARCH, lambda d: d.update(dataset="x"))
    edit(b, FINAL, lambda d: d.update(seeds=[0, 1]))
    assert [d.path for d in compare_runs(a, b)] == [FINAL, SEARCH, METRICS]


def test_an_empty_root_a_is_an_error_naming_it(tmp_path: Path) -> None:
    empty, full = tmp_path / "empty", project(tmp_path / "full")
    empty.mkdir()
    with pytest.raises(MissingInputError, match=str(empty)):
        compare_runs(empty, full)


def test_cli_exit_status_and_lines(roots: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = roots
    runner = CliRunner()
    same = runner.invoke(app, ["compare", str(a), str(b)])
    assert same.exit_code == 0, same.output
    assert same.output.strip() == "identical: 3 files compared (2 under results/, reports/metrics.json)"

    edit(b, SEARCH, lambda d: d["trials"][1]["config"].update(lr=0.5))
    edit(b, FINAL, lambda d: d.update(test_std=0.02))
    first = runner.invoke(app, ["compare", str(a), str(b)])
    assert first.exit_code == 1
    assert first.output.splitlines() == [f"{FINAL}: test_std: 0.01 (A) vs 0.02 (B)",
                                         "... and 1 more difference; --all lists them"]
    every = runner.invoke(app, ["compare", str(a), str(b), "--all"])
    assert every.exit_code == 1
    assert every.output.splitlines() == [f"{FINAL}: test_std: 0.01 (A) vs 0.02 (B)",
                                         f"{SEARCH}: trials[1].config.lr: 0.002 (A) vs 0.5 (B)"]
    assert runner.invoke(app, ["compare", str(a), str(b), "--tolerance", "1"]).exit_code == 0

    empty = tmp_path / "empty"
    empty.mkdir()
    for args in ([str(empty), str(b)], [str(a), str(empty)]):  # an empty A or B: not "missing (B)" for every file
        error = runner.invoke(app, ["compare", *args])
        assert error.exit_code == 2
        assert error.output.startswith("ctsweep: error: ") and len(error.output.splitlines()) == 1
        assert f"{empty} has nothing to compare" in error.output
