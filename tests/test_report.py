"""The report on hand-made final results: statistics, best family, table, robustness, references,
provenance and plot data."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from pipeline.errors import ConfigError, MissingInputError
from pipeline.final.counts import summary as _summary
from pipeline.stores.paths import final_result_path, search_result_path
from pipeline.reporting.paper_column import mean_interval
from pipeline.reporting.report import best_family, report
from pipeline.reporting.tables import p_value, tie_lines
from pipeline.reporting.stats import welch


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _final(family: str, vals: list[float], tests: list[float], lr: float = 1e-3, mode: str = "max",
           robust: dict[float, list[float]] | None = None) -> dict:
    val_mean, val_std = _summary(vals)
    test_mean, test_std = _summary(tests)
    robustness = [{"lr_factor": f, "lr": lr * f, "n_seeds": len(v), "val_mean": _summary(v)[0],
                   "val_std": _summary(v)[1], "test_mean": 0.5, "test_std": 0.0, "seeds": []}
                  for f, v in (robust or {}).items()]
    return {"dataset": "d", "family": family, "metric": "accuracy", "mode": mode, "n_seeds": len(vals),
            "config": {"lr": lr}, "val_mean": val_mean, "val_std": val_std, "test_mean": test_mean,
            "test_std": test_std, "params": 1234, "seconds_per_epoch": 0.5, "n_trials": 4, "n_failed": 1,
            "robustness": robustness,
            "seeds": [{"seed": i, "val": v, "test": t, "curve": [0.5, v], "stop": "patience"} for i, (v, t) in enumerate(zip(vals, tests))]}


def _search(lrs: list[float], importance: dict | None = None) -> dict:
    return {"trials": [{"config": {"lr": lr}, "best_val": 0.5, "status": "ok"} for lr in lrs]
            + [{"config": {"lr": 1}, "best_val": None, "status": "error"}],
            "optuna_study": "d/x/abc", "importance": importance}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    a_tests, b_tests = [0.85, 0.8, 0.9], [0.6, 0.6, 0.62]
    _write(final_result_path(tmp_path, "d", "a"),
           _final("a", [0.9, 0.8, 1.0], a_tests, robust={0.8: [0.7, 0.72, 0.74], 1.25: [0.9, 0.92, 0.94]}))
    _write(final_result_path(tmp_path, "d", "b"),
           _final("b", [0.6, 0.7, 0.65], b_tests, lr=3e-4, robust={0.8: [0.8, 0.8, 0.8], 1.25: [0.6, 0.6, 0.6]}))
    imp = {"evaluator": "fanova", "complete": {"n_trials": 2, "values": None, "reason": "2 trial(s), at least 3 needed"},
           "epoch 2": {"n_trials": 16, "values": {"lr": 0.7, "hidden_size": 0.3}, "reason": None}}
    _write(search_result_path(tmp_path, "d", "a"), _search([1e-3, 1e-2], imp))
    _write(search_result_path(tmp_path, "d", "b"), _search([3e-4]))
    (tmp_path / "params.yaml").write_text("datasets: [d]\nfamilies: [a, b]\nprepare: {d: {kind: xor}}\n")
    return tmp_path


def test_best_family_uses_validation_and_direction() -> None:
    results = {"a": {"val_mean": 0.9, "test_mean": 0.1, "mode": "max"},
               "b": {"val_mean": 0.8, "test_mean": 0.99, "mode": "max"}}
    assert best_family(results) == "a"  # test never decides
    for r in results.values():
        r["mode"] = "min"
    assert best_family(results) == "b"


def test_a_validation_tie_is_broken_by_the_lower_validation_loss_never_by_test() -> None:
    tie = 0.1 + 0.2  # 0.30000000000000004: a mean of the same scores in another order may differ so
    results = {"a": {"val_mean": 0.3, "val_loss_mean": 0.40, "test_mean": 0.99, "mode": "max"},
               "b": {"val_mean": tie, "val_loss_mean": 0.20, "test_mean": 0.10, "mode": "max"},
               "c": {"val_mean": 0.3, "test_mean": 0.99, "mode": "max"}}  # no loss recorded: loses the tie
    assert best_family(results) == "b"
    lines = tie_lines({f: {**r, "metric": "accuracy"} for f, r in results.items()}, "b")
    assert lines[0].startswith("Best on validation: 3 families tie at 30.00;")
    assert "a 0.4000, b 0.2000, c not recorded" in lines[0]
    results["a"]["val_mean"] = 0.31
    assert best_family(results) == "a"  # a better score wins whatever the loss
    assert tie_lines({f: {**r, "metric": "accuracy"} for f, r in results.items()}, "a") == []


def test_table_marks_the_best_and_tests_every_family_against_it(project: Path) -> None:
    metrics = report(project, ["d"], ["a", "b"])
    assert metrics["d"]["a"]["best"] and metrics["d"]["a"]["p_vs_best"] is None
    p = welch([0.6, 0.6, 0.62], [0.85, 0.8, 0.9]).p
    assert metrics["d"]["b"]["p_vs_best"] == pytest.approx(p, abs=1e-6) and p < 0.05
    table = (project / "reports" / "results.md").read_text()
    assert "| **a** (best) | 85.00 ± 5.00 | 90.00 ± 10.00 | — | best | 3 | 1,234 | 0.50 | 4 (1) |" in table
    assert f"| b | 60.67 ± 1.15 | 65.00 ± 5.00 | — | -24.33 (p = {p:.3f} *) |" in table


def test_p_values_below_a_thousandth_print_as_such(project: Path) -> None:
    assert [p_value(p) for p in (0.2, 0.05, 0.034, 0.001, 0.000999, 1e-9, 0.0)] == [
        "p = 0.200", "p = 0.050", "p = 0.034 *", "p = 0.001 *", "p < 0.001 *", "p < 0.001 *", "p < 0.001 *"]
    assert p_value(float("nan")) == "p n/a"
    for family, vals, tests in (("a", [0.9, 0.8, 1.0], [0.85, 0.851, 0.852]), ("b", [0.6, 0.7, 0.65], [0.2, 0.201, 0.202])):
        _write(final_result_path(project, "d", family), _final(family, vals, tests))  # far apart, little spread
    metrics = report(project, ["d"], ["a", "b"])
    assert metrics["d"]["b"]["p_vs_best"] < 0.001
    table = (project / "reports" / "results.md").read_text()
    assert "| b | 20.10 ± 0.10 | 65.00 ± 5.00 | — | -65.00 (p < 0.001 *) |" in table and "p = 0.000" not in table


def test_robustness_says_whether_the_ranking_survives(project: Path) -> None:
    report(project, ["d"], ["a", "b"])
    table = (project / "reports" / "results.md").read_text()
    assert "| a | 72.00 ± 2.00 | 90.00 ± 10.00 | 92.00 ± 2.00 |" in table
    assert "lr × 0.8: ranking b > a; Kendall τ = -1.00 against the searched learning rate; the best family becomes b" in table
    assert "lr × 1.25: ranking a > b; Kendall τ = 1.00 against the searched learning rate; the best family stays best" in table
    rows = list(csv.DictReader((project / "reports" / "lr" / "d.csv").open()))
    assert list(rows[0]) == ["family", "stage", "lr_factor", "lr", "validation accuracy"]  # the metric last: DVC's y
    assert [(r["family"], r["stage"], float(r["lr"])) for r in rows][:3] == [
        ("a", "search", 1e-3), ("a", "search", 1e-2), ("b", "search", 3e-4)]
    assert ("a", "final", "0.8", pytest.approx(8e-4), pytest.approx(0.72)) in [
        (r["family"], r["stage"], r["lr_factor"], float(r["lr"]), float(r["validation accuracy"])) for r in rows]


def test_sensitivity_uses_the_best_available_basis(project: Path) -> None:
    report(project, ["d"], ["a", "b"])
    table = (project / "reports" / "results.md").read_text()
    assert "| a | epoch 2 (16) | lr 0.70, hidden_size 0.30 | `d/x/abc` |" in table
    assert "| b | — | not computed" in table


def test_paper_figures_are_shown_with_their_citation(project: Path) -> None:
    (project / "references.yaml").write_text(
        "sources:\n  p1: {citation: 'Someone et al. 2022, A paper', url: 'https://example.org'}\n"
        "figures:\n  - {dataset: d, family: b, metric: accuracy, mean: 99.42, std: 0.42, unit: percent,"
        " source: p1, where: Table 4, note: 100k samples}\n")
    report(project, ["d"], ["a", "b"])
    table = (project / "reports" / "results.md").read_text()
    assert "| b | 60.67 ± 1.15 | 65.00 ± 5.00 | 99.42 ± 0.42 [1] (Δ -38.75; outside our 95 % CI) |" in table
    assert "[1] Someone et al. 2022, A paper <https://example.org>" in table and "Table 4; 100k samples" in table


def test_the_paper_s_mean_is_checked_against_our_95_percent_interval() -> None:
    """Student's t over the seeds: b's 0.60, 0.60, 0.62 give 0.6067 ± 4.303 x 0.01155 / sqrt(3)."""
    low, high = mean_interval([0.6, 0.6, 0.62])
    assert (low, high) == (pytest.approx(0.6067 - 0.0287, abs=1e-4), pytest.approx(0.6067 + 0.0287, abs=1e-4))
    assert mean_interval([0.6]) is None and mean_interval([0.5, 0.5]) == (0.5, 0.5)


def test_a_best_run_figure_is_labelled_and_set_beside_our_best_seed(project: Path) -> None:
    (project / "references.yaml").write_text(
        "sources:\n  p1: {citation: 'Someone 2022', best_run: true}\n  p2: {citation: 'Other 2021'}\n"
        "figures:\n  - {dataset: d, family: b, metric: accuracy, mean: 61, unit: percent, source: p1, where: T1}\n"
        "  - {dataset: d, family: a, metric: accuracy, mean: 84, std: 1, unit: percent, source: p2, where: T2}\n")
    report(project, ["d"], ["a", "b"])
    table = (project / "reports" / "results.md").read_text()
    assert "| 61.00 [2] (best run; our best seed 62.00) |" in table  # b's seeds: 60, 60, 62
    assert "| 84.00 ± 1.00 [1] (Δ +1.00; inside our 95 % CI) |" in table  # a's 85, 80, 90: 85 ± 12.4


def test_a_paper_row_of_a_variant_we_did_not_run_is_listed_not_compared(project: Path) -> None:
    """A paper reporting two variants of a family (review finding N10): only the row whose model
    arguments our configuration has sits in the cell; the other is listed under the table."""
    (project / "references.yaml").write_text(
        "sources:\n  p1: {citation: 'Someone 2022'}\nfigures:\n"
        "  - {dataset: d, family: b, metric: accuracy, mean: 61, std: 1, unit: percent, source: p1,"
        " where: T1 slow, config: {lr: 0.0003}}\n"
        "  - {dataset: d, family: b, metric: accuracy, mean: 70, std: 1, unit: percent, source: p1,"
        " where: T1 fast, config: {lr: 0.01}}\n")
    report(project, ["d"], ["a", "b"])  # b ran with lr 3e-4
    table = (project / "reports" / "results.md").read_text()
    assert "| 61.00 ± 1.00 [1] (Δ -0.33; inside our 95 % CI) |" in table and "70.00 ± 1.00 [1] (Δ" not in table
    assert ("- b: 70.00 ± 1.00 [1] (T1 fast) is the paper's run with lr 0.01; ours ran with lr 0.0003, "
            "so it is not compared.") in table


def test_a_paper_row_of_another_model_under_the_family_s_name_is_listed_not_compared(project: Path) -> None:
    """Review finding N5: CfC's and CDR-NDE's "GRU-ODE" is Lechner & Hasani's, not the family's."""
    (project / "references.yaml").write_text(
        "sources:\n  p1: {citation: 'Someone 2022'}\nfigures:\n"
        "  - {dataset: d, family: b, metric: accuracy, mean: 52, std: 1, unit: percent, source: p1,"
        " where: T4, other_model: 'their GRU-ODE, an ODE between observations'}\n")
    report(project, ["d"], ["a", "b"])
    table = (project / "reports" / "results.md").read_text()
    assert "| b | 60.67 ± 1.15 | 65.00 ± 5.00 | — |" in table
    assert ("- b: 52.00 ± 1.00 [1] (T4) is another model: their GRU-ODE, an ODE between observations, "
            "so it is not compared.") in table


def test_bad_reference_file_names_the_key(project: Path) -> None:
    (project / "references.yaml").write_text(
        "sources: {}\nfigures:\n  - {dataset: d, family: b, metric: accuracy, mean: 1, unit: percent,"
        " source: nowhere, where: T1}\n")
    with pytest.raises(ConfigError, match=r"references.yaml.*'nowhere' is not a key of `sources`"):
        report(project, ["d"], ["a", "b"])
    (project / "references.yaml").write_text("sources: {}\nfigures:\n  - {dataset: d, metric: f1}\n")
    with pytest.raises(ConfigError) as err:
        report(project, ["d"], ["a", "b"])
    assert "references.yaml" in str(err.value) and "key `figures.0.family`" in str(err.value)
    assert "key `figures.0.metric`" in str(err.value) and "'accuracy'" in str(err.value)


def test_report_is_stamped_with_commit_dvc_lock_and_params(project: Path) -> None:
    (project / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  prepare@d:\n    cmd: ctsweep prepare d\n    outs:\n"
        "    - path: data/processed/d\n      md5: 0123abcd.dir\n  search@d:\n    cmd: ctsweep search d\n    outs:\n"
        "    - path: results/d/search\n      md5: 4567ef.dir\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "params.yaml"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=project, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    report(project, ["d"], ["a", "b"])
    table = (project / "reports" / "results.md").read_text()
    assert f"git commit: `{head}`" in table and "`prepare@d`: `data/processed/d` 0123abcd.dir" in table
    assert "`search@d`: `results/d/search` 4567ef.dir" in table  # the folder, then each family's file in it
    digest = hashlib.md5(search_result_path(project, "d", "a").read_bytes()).hexdigest()
    assert f"`search@d`: `results/d/search/a.json` {digest}" in table
    assert '"families": [\n  "a",\n  "b"\n ]' in table
    (project / "params.yaml").write_text((project / "params.yaml").read_text() + "# edited\n")
    report(project, ["d"], ["a", "b"])
    assert f"`{head} (uncommitted changes: params.yaml)`" in (project / "reports" / "results.md").read_text()


def test_plots_and_plot_data_are_written(project: Path) -> None:
    report(project, ["d"], ["a", "b"])
    for kind in ("curves", "lr", "test"):
        assert (project / "reports" / "plots" / f"d_{kind}.png").stat().st_size > 5000
    curves = list(csv.DictReader((project / "reports" / "curves" / "d.csv").open()))
    assert list(curves[0]) == ["family", "epoch", "n_seeds", "mean_minus_std", "mean_plus_std", "validation accuracy"]
    assert [(c["family"], int(c["epoch"])) for c in curves] == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
    a2 = curves[1]
    assert float(a2["validation accuracy"]) == pytest.approx(0.9) and int(a2["n_seeds"]) == 3
    assert (float(a2["mean_minus_std"]), float(a2["mean_plus_std"])) == (pytest.approx(0.8), pytest.approx(1.0))
    bars = list(csv.DictReader((project / "reports" / "bars" / "d.csv").open()))
    assert [(b["family"], round(float(b["test_mean"]), 4)) for b in bars] == [("a", 0.85), ("b", 0.6067)]


def test_missing_final_names_the_stage_to_run(tmp_path: Path) -> None:
    _write(final_result_path(tmp_path, "d", "a"), _final("a", [0.9], [0.8]))
    with pytest.raises(MissingInputError, match=r"no final results for d: b, c .*`ctsweep final d b`.*dvc repro"):
        report(tmp_path, ["d"], ["a", "b", "c"])
    assert not (tmp_path / "reports").exists()  # nothing half-written


def test_a_record_whose_mlflow_run_is_gone_gets_a_warning_and_the_others_their_report(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # DVC's run cache can restore a final record trained against another mlflow.db: the report is
    # still written and attached to the runs the store has, with one warning line for the other.
    from pipeline.stores import tracking

    client, exp_id = tracking.experiment_id(project, "d")
    run_id = tracking.start_run(client, exp_id, "final/a", {"stage": "final"})
    for family, run in (("a", run_id), ("b", "0" * 32)):
        path = final_result_path(project, "d", family)
        _write(path, {**json.loads(path.read_text()), "mlflow_parent_run_id": run})
    report(project, ["d"], ["a", "b"])
    err = capsys.readouterr().err
    assert err.count("ctsweep: warning:") == 1 and "Traceback" not in err
    assert f"results/d/final/b.json names MLflow run {'0' * 32}" in err and "ctsweep final d b" in err
    assert "report/results.md" in {f.path for f in client.list_artifacts(run_id, "report")}
    assert (project / "reports" / "results.md").exists()


def test_data_that_is_not_as_published_is_named_under_its_table_and_in_the_provenance(project: Path) -> None:
    report(project, ["d"], ["a", "b"])
    assert "**Data:**" not in (project / "reports" / "results.md").read_text()  # verified data: nothing added
    note = "local copy, not verified against the publisher (set-a.tar.gz); 3,996 of 4,000 records"
    for family in ("a", "b"):
        path = final_result_path(project, "d", family)
        path.write_text(json.dumps({**json.loads(path.read_text()), "data_provenance": note}))
    report(project, ["d"], ["a", "b"])
    text = (project / "reports" / "results.md").read_text()
    assert f"**Data:** {note} (data/raw.lock says why)." in text
    assert f"- data of `d`: {note}" in text.split("## Provenance", 1)[1]
