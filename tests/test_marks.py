"""The marks that say when a cell cannot be trusted, and what the report, `promote` and `ctsweep
status` do with them: hand-made records, the real report stage, a real MLflow store in tmp_path
and the real CLI (typer's runner)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import PromoteParams
from pipeline.stores.paths import final_result_path, search_result_path
from pipeline.registry.promote import promote, promote_dataset
from pipeline.reporting.marks import (EDGE, FAILED, MIN_STEPS, MOSTLY_FAILED, NOT_CAUSAL, NOT_CONVERGED, Mark,
                                      cell_marks, edge, epoch_noise, loss_falling, mostly_failed, not_converged, still_improving)
from pipeline.reporting.report import report
from pipeline.reporting.status import datasets
from tests.conftest import default_params, write_params
from tests.test_promote import DATASET, _champion
from tests.test_promote import _final as _promotable

RUNNER = CliRunner()
RISING = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9]  # last quarter 0.88, 0.9 beats 0.85 by far more than 0.5%
FLAT = [0.5, 0.8, 0.85, 0.85, 0.852, 0.851, 0.85, 0.853]  # last quarter gains 0.001: within 0.5% of 0.852
LR_LOG = {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}
A, B, C = FAMILIES = ["cfc", "ncde", "ode_rnn"]  # real names: the CLI checks them against the registry


def _seeds(curve: list[float], stop: str | None, n: int = 5) -> list[dict]:
    seeds = [{"seed": i, "val": max(curve), "test": max(curve), "curve": curve} for i in range(n)]
    return [{**s, "stop": stop} for s in seeds] if stop else seeds


def _record(curve: list[float], stop: str | None = "max_epochs", mode: str = "max", **extra) -> dict:
    return {"dataset": "d", "family": "a", "metric": "accuracy", "mode": mode, "config": {"lr": 1e-3},
            "n_trials": 8, "n_failed": 0, "seeds": _seeds(curve, stop), **extra}


# ------------------------------------------------------------------------------------------ rules


def test_a_rising_curve_stopped_by_the_budget_is_not_converged() -> None:
    mark = not_converged(_record(RISING, "max_epochs"))
    assert mark == Mark(NOT_CONVERGED, "5 of 5 seeds not converged (5 still improving at the budget; stopped by "
                                       "max_epochs)")
    assert not_converged(_record(RISING, "time_limit")) is not None
    assert not_converged(_record(RISING, stop=None)) is not None  # older records: trained every epoch
    falling = [1.0 - v for v in RISING]  # a loss still going down
    assert not_converged(_record(falling, mode="min")) is not None
    assert not_converged(_record(falling, mode="max")) is None  # the direction comes from the record


def test_a_flat_curve_or_a_patience_stop_is_converged() -> None:
    assert not still_improving(FLAT, "max") and still_improving(RISING, "max")
    assert not_converged(_record(FLAT, "max_epochs")) is None
    assert not_converged(_record(RISING, "patience")) is None
    assert not_converged(_record([0.9], "max_epochs")) is None  # one epoch: nothing to compare


def test_not_converged_needs_more_than_half_of_the_seeds() -> None:
    record = _record(RISING)
    for s in record["seeds"][:3]:
        s["stop"] = "patience"
    assert not_converged(record) is None  # 2 of 5
    record["seeds"][2]["stop"] = "max_epochs"
    assert not_converged(record).detail.startswith("3 of 5 seeds")


LEVELLED = [1.4, 0.9, 0.6, 0.45, 0.38, 0.35, 0.34, 0.335]  # last quarter: 0.005 of a 1.065 fall
CUT_SHORT = [1.4, 1.3, 1.2, 1.1, 1.0, 0.9, 0.8, 0.7]  # last quarter: 0.2 of a 0.7 fall


def test_a_seed_stopped_while_a_loss_still_falls_is_not_converged_however_it_stopped() -> None:
    assert loss_falling(CUT_SHORT) and not loss_falling(LEVELLED)
    assert not loss_falling([1.0]) and not loss_falling([1.0, 1.2, 1.3, 1.1])  # never below the first epoch
    for which in ("train_loss_curve", "val_loss_curve"):
        record = _record(FLAT, "patience")
        for s in record["seeds"]:
            s[which] = CUT_SHORT
        assert "5 stopped with a loss still falling" in not_converged(record).detail
        for s in record["seeds"]:
            s[which] = LEVELLED
        assert not_converged(record) is None


def test_a_flat_noisy_loss_is_not_read_as_falling_but_a_noisy_real_fall_is() -> None:
    rng = np.random.default_rng(0)
    flat = [[0.693 + rng.normal(0, 0.003) for _ in range(30)] for _ in range(1000)]
    # the share rule alone read 148 of these 1,000 as falling (the last quarter's minimum dips below
    # the earlier one by noise); with the noise bound 1 (under 30 allowed)
    assert sum(map(loss_falling, flat)) < 30
    assert epoch_noise(CUT_SHORT) == pytest.approx(0.0, abs=1e-12)  # a steady trend is not noise
    for curve in flat[:50]:
        # the same noise on a curve cut short (still falling 0.01 per epoch at its end)
        assert loss_falling([v - 0.01 * i for i, v in enumerate(curve)])
    # a noise-sized dip at the end of a flat curve: 0.002 below, more than 15 % of its 0.012 "fall",
    # so the share rule alone read it as falling; its noise is about 0.005
    dip = [0.70, 0.69, 0.695, 0.692, 0.697, 0.691, 0.694, 0.696, 0.693, 0.695, 0.692, 0.688]
    assert not loss_falling(dip)


def test_a_seed_of_too_few_steps_is_not_converged_and_steps_unknown_are_not_held_against_it() -> None:
    record = _record(FLAT, "patience")
    for s in record["seeds"]:
        s["steps"] = MIN_STEPS - 1
    assert not_converged(record).detail == (f"5 of 5 seeds not converged (5 trained fewer than {MIN_STEPS} steps; "
                                            "stopped by patience)")
    for s in record["seeds"]:
        s["steps"] = MIN_STEPS
    assert not_converged(record) is None
    for s in record["seeds"]:
        s["steps"] = None  # a record from before steps were counted
    assert not_converged(record) is None


def test_edge_of_a_log_and_a_linear_range() -> None:
    assert edge({"lr": 0.0098}, {"lr": LR_LOG}) == Mark(EDGE, "lr at the upper bound (0.0098 of [0.0001, 0.01])")
    assert edge({"lr": 1e-3}, {"lr": LR_LOG}) is None  # the middle in log space
    # 5e-4 is 4% of the linear range from its low end, 35% of the log range
    assert edge({"lr": 5e-4}, {"lr": LR_LOG}) is None
    assert "lr at the lower bound" in edge({"lr": 5e-4}, {"lr": {**LR_LOG, "log": False}}).detail
    hidden = {"type": "int", "low": 16, "high": 256, "log": False}
    assert edge({"hidden_size": 64}, {"hidden_size": hidden}) is None
    assert edge({"hidden_size": 250}, {"hidden_size": hidden}).detail == "hidden_size at the upper bound (250 of [16, 256])"
    # a handful of integers is a choice, not a range: [1, 4] has four values, [32, 512] in 32s seventeen
    steps = {"type": "int", "low": 1, "high": 4, "log": False}
    assert edge({"solver_steps": 4}, {"solver_steps": steps}) is None
    assert edge({"solver_steps": 5}, {"solver_steps": {**steps, "high": 5}}) is not None
    wide = {"type": "int", "low": 32, "high": 512, "log": False, "step": 32}
    assert edge({"hidden_size": 32}, {"hidden_size": wide}).detail == "hidden_size at the lower bound (32 of [32, 512])"
    assert edge({"hidden_size": 32}, {"hidden_size": {**wide, "high": 128}}) is None  # 4 values
    categorical = {"solver": {"type": "categorical", "choices": ["euler", "rk4"]}}
    assert edge({"solver": "euler"}, categorical) is None
    assert edge({}, {"lr": LR_LOG}) is None  # an inactive conditional key


def test_a_seed_cut_by_the_time_limit_is_marked_with_its_epochs() -> None:
    from pipeline.reporting.marks import SYMBOLS, TIME_LIMITED, cell_marks

    record = _record(FLAT, "patience", max_epochs=104, time_limit_s=900.0)
    assert not [m for m in cell_marks(record) if m.mark == TIME_LIMITED]
    record["seeds"][3].update(stop="time_limit", epochs_trained=62)
    [mark] = [m for m in cell_marks(record) if m.mark == TIME_LIMITED]
    assert mark.detail == "1 of 5 seeds cut by final.time_limit_s (900 s): seed 3 at epoch 62 of 104"
    assert SYMBOLS[TIME_LIMITED] == "τ"


def test_mostly_failed_and_failed() -> None:
    assert mostly_failed(12, 7) == Mark(MOSTLY_FAILED, "7 of 12 trials failed")
    assert mostly_failed(12, 6) is None and mostly_failed(0, 0) is None
    failed = {"status": "failed", "n_trials": 4, "n_failed": 4, "errors": ["NaN loss (3 trials)", "OOM (1 trials)"]}
    assert cell_marks(failed) == [Mark(FAILED, "NaN loss (3 trials); OOM (1 trials)")]
    # the space of the search record counts when the final record has none (older files)
    marks = cell_marks({**_record(RISING), "config": {"lr": 0.0099}, "n_failed": 5}, {"space": {"lr": LR_LOG}})
    assert [m.mark for m in marks] == [NOT_CONVERGED, EDGE, MOSTLY_FAILED]


def test_a_search_of_one_completed_trial_gets_no_edge_mark() -> None:
    # num_samples 1 (the reference alone): a bound value was never compared with anything
    record = {**_record(FLAT), "config": {"lr": 0.0099}, "space": {"lr": LR_LOG}}
    assert [m.mark for m in cell_marks({**record, "n_trials": 1, "n_failed": 0})] == []
    assert [m.mark for m in cell_marks({**record, "n_trials": 3, "n_failed": 2})] == [MOSTLY_FAILED]
    assert [m.mark for m in cell_marks({**record, "n_trials": 2, "n_failed": 0})] == [EDGE]
    assert [m.mark for m in cell_marks({k: v for k, v in record.items() if k != "n_trials"})] == [EDGE]


# ----------------------------------------------------------------------------------------- report


def _ok_final(family: str, vals: list[float], curve: list[float], stop: str = "patience", **extra) -> dict:
    mean = sum(vals) / len(vals)
    return {"dataset": "d", "family": family, "metric": "accuracy", "mode": "max", "n_seeds": len(vals),
            "config": {"lr": 1e-3}, "val_mean": mean, "val_std": 0.01, "test_mean": mean, "test_std": 0.01,
            "params": 100, "seconds_per_epoch": 0.1, "n_trials": 4, "n_failed": 0, "status": "ok",
            "seeds": [{"seed": i, "val": v, "test": v, "curve": curve, "stop": stop} for i, v in enumerate(vals)],
            **extra}


def _failed_final(dataset: str, family: str) -> dict:
    return {"status": "failed", "dataset": dataset, "family": family, "metric": "accuracy", "mode": "max",
            "n_trials": 4, "n_failed": 4, "errors": ["non-finite loss (4 trials)"], "reason": "every search trial failed"}


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
def failing(tmp_path: Path) -> Path:
    """Dataset d: a (not converged, lr at the edge), b (failed, the better paper figure), c (fine);
    dataset e: its only family failed."""
    robust = [{"lr_factor": 0.5, "lr": 5e-4, "val_mean": 0.7, "val_std": 0.0}]
    _write(final_result_path(tmp_path, "d", A), _ok_final(A, [0.9, 0.92, 0.91], RISING, "max_epochs",
                                                            config={"lr": 0.0098}, space={"lr": LR_LOG},
                                                            robustness=robust))
    _write(final_result_path(tmp_path, "d", B), _failed_final("d", B))
    _write(final_result_path(tmp_path, "d", C), _ok_final(C, [0.8, 0.82, 0.81], FLAT, robustness=robust))
    for family in FAMILIES:
        _write(final_result_path(tmp_path, "e", family), _failed_final("e", family))
    for family in (A, C):
        _write(search_result_path(tmp_path, "d", family), {"status": "ok", "trials": [{"config": {"lr": 1e-3}, "best_val": 0.8}]})
    for dataset, family in (("d", B), *(("e", f) for f in FAMILIES)):  # failed: nothing to plot
        _write(search_result_path(tmp_path, dataset, family), {"status": "failed", "best_config": None, "best_val": None})
    (tmp_path / "references.yaml").write_text(
        "sources:\n  p1: {citation: 'Someone 2022'}\nfigures:\n  - {dataset: d, family: ncde, metric: accuracy, "
        "mean: 99.0, unit: percent, source: p1, where: Table 1}\n")
    xor = default_params()["prepare"]["xor_event"]
    write_params(tmp_path, {**default_params(), "datasets": ["d", "e"], "families": FAMILIES,
                            "prepare": {"d": xor, "e": xor}})
    return tmp_path


def test_a_failed_cell_is_reported_as_failed_and_left_out_of_the_rest(failing: Path) -> None:
    metrics = report(failing, ["d", "e"], FAMILIES)
    assert metrics["d"][B] == {"dataset": "d", "family": B, "metric": "accuracy", "n_trials": 4, "n_failed": 4,
                                 "errors": ["non-finite loss (4 trials)"], "status": "failed",
                                 "marks": [{"mark": "failed", "detail": "non-finite loss (4 trials)"}]}
    a = metrics["d"][A]
    assert a["status"] == "ok" and a["best"] and [m["mark"] for m in a["marks"]] == ["not_converged", "edge"]
    assert metrics["d"][C]["marks"] == [] and metrics["d"][C]["p_vs_best"] is not None
    assert metrics["e"][A]["status"] == "failed"
    assert json.loads((failing / "reports" / "metrics.json").read_text()) == metrics
    md = (failing / "reports" / "results.md").read_text()
    assert f"| **{A}** (best) †‡ | 91.00 ± 1.00 |" in md and f"| {C} | 81.00 ± 1.00 |" in md
    assert f"| {B} | failed | failed | 99.00 [1] | — | 0 | — | — | 4 (4) |" in md
    assert "† Not converged: more than half of the final seeds trained fewer than 100 optimiser steps" in md
    assert "‡ At the edge: the best configuration lies in the outer 5% of a searched range" in md
    assert f"{A}: lr at the upper bound (0.0098 of [0.0001, 0.01])." in md
    assert f"Failed: every search trial failed, so the family has no scores. {B}: non-finite loss (4 trials)." in md
    assert "## e (accuracy, %)" in md and f"| {A} | failed |" in md and "![e test]" not in md
    plots = failing / "reports" / "plots"
    assert (plots / "d_lr.png").exists() and not list(plots.glob("e_*"))
    with (failing / "reports" / "curves" / "d.csv").open() as f:
        curves = list(csv.DictReader(f))
    assert curves and {row["family"] for row in curves} == {A, C}  # the failed family has no curve


def test_report_command_ends_with_the_failed_and_unconverged_cells(failing: Path) -> None:
    result = RUNNER.invoke(app, ["report", "--root", str(failing)])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().splitlines()[-1] == (
        f"ctsweep report: 4 cells failed (d/{B}, e/{A}, e/{B}, e/{C}), 1 not converged (d/{A})")


# ----------------------------------------------------------------------------------------- status


def test_status_exits_1_on_a_failed_cell_and_0_on_marks_alone(failing: Path) -> None:
    report(failing, ["d", "e"], FAMILIES)
    result = RUNNER.invoke(app, ["status", "--root", str(failing)])
    assert result.exit_code == 1
    verdict, *lines = result.output.splitlines()  # the verdict of the one dataset with scores, first
    assert verdict.startswith(f"d: {A} ")
    assert lines[:3] == [f"d/{A}: not_converged: 3 of 3 seeds not converged (3 still improving at the budget; "
                         "stopped by max_epochs); "
                         "edge: lr at the upper bound (0.0098 of [0.0001, 0.01])",
                         f"d/{B}: failed: non-finite loss (4 trials)", f"e/{A}: failed: non-finite loss (4 trials)"]
    assert len(lines) == 6
    assert lines[-1] == "ctsweep status: 6 cells, 4 failed, 1 marked"
    metrics = json.loads((failing / "reports" / "metrics.json").read_text())
    for dataset in datasets(metrics).values():  # not its comparison across datasets
        for cell in dataset.values():
            cell.update(status="ok", marks=[m for m in cell["marks"] if m["mark"] != "failed"])
    (failing / "reports" / "metrics.json").write_text(json.dumps(metrics))
    result = RUNNER.invoke(app, ["status", "--root", str(failing)])
    assert result.exit_code == 0 and result.output.splitlines()[-1] == "ctsweep status: 6 cells, 0 failed, 1 marked"


def test_status_shows_only_the_cells_of_this_params_yaml(failing: Path) -> None:
    """Issue 73, item 3: a report of other datasets or families (committed by another project, or
    written before params.yaml changed) was listed as this project's, and its failed cell set
    the exit status. Only this params.yaml's cells count; one line above says what was left out."""
    report(failing, ["d", "e"], FAMILIES)
    xor = default_params()["prepare"]["xor_event"]
    write_params(failing, {**default_params(), "datasets": ["d"], "families": [A, C], "prepare": {"d": xor, "e": xor}})
    before = (failing / "reports" / "metrics.json").read_bytes()
    result = RUNNER.invoke(app, ["status", "--root", str(failing)])
    assert result.exit_code == 0, result.output  # d/ncde and e's cells failed, but are not this project's
    note, verdict, *lines = result.output.splitlines()
    assert note == ("ctsweep status: 4 cells of reports/metrics.json not shown: not in params.yaml (datasets e; "
                    "families ncde); `ctsweep report` writes the report of this params.yaml")
    assert verdict.startswith("d: ") and not any(line.startswith("e") for line in lines)
    assert lines == [f"d/{A}: not_converged: 3 of 3 seeds not converged (3 still improving at the budget; stopped by "
                     "max_epochs); edge: lr at the upper bound (0.0098 of [0.0001, 0.01])",
                     "ctsweep status: 2 cells, 0 failed, 1 marked"]
    assert (failing / "reports" / "metrics.json").read_bytes() == before


def test_status_of_a_clean_report_and_of_a_missing_or_corrupt_file(tmp_path: Path) -> None:
    result = RUNNER.invoke(app, ["status", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "metrics.json does not exist" in result.output
    assert "ctsweep report" in result.output and len(result.output.strip().splitlines()) == 1
    path = tmp_path / "reports" / "metrics.json"
    path.parent.mkdir()
    path.write_text('{"d": {"a": {"status": "ok", "marks": []}')
    result = RUNNER.invoke(app, ["status", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "truncated JSON" in result.output
    path.write_text('{"d": {"a": {"status": "maybe"}}}')
    result = RUNNER.invoke(app, ["status", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "d.a.status is 'maybe'" in result.output
    path.write_text('{"d": {"a": {"status": "ok", "marks": []}, "b": {"val_mean": 0.5}}}')  # b: an older file
    result = RUNNER.invoke(app, ["status", "--root", str(tmp_path)])
    assert result.exit_code == 0 and result.output == "ctsweep status: all 2 cells ok, none marked\n"


# ---------------------------------------------------------------------------------------- promote


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    params = default_params()
    write_params(tmp_path, {**params, "datasets": [DATASET], "families": [A, B],
                            "prepare": {DATASET: params["prepare"]["xor_event"]}})
    return tmp_path


def _with_curves(root: Path, family: str, stop: str, curve: list[float]) -> None:
    """Give a written final record's seeds a validation curve and the reason they stopped."""
    path = final_result_path(root, DATASET, family)
    record = json.loads(path.read_text())
    for s in record["seeds"]:
        s.update(curve=curve, stop=stop)
    path.write_text(json.dumps(record))


def test_promote_refuses_a_not_converged_candidate_unless_forced(root: Path) -> None:
    _promotable(root, A, 0.9)
    _promotable(root, B, 0.5)
    _with_curves(root, A, "max_epochs", RISING)
    _with_curves(root, B, "patience", FLAT)
    refused = promote(root, [DATASET], [A, B], PromoteParams())[0]
    assert refused["candidate_family"] == A and refused["refused"] == "not_converged"
    assert not refused["alias_moved"] and refused["candidate_version"] is None
    assert f"{A} is not converged (5 of 5 seeds" in refused["reason"] and "--force" in refused["reason"]
    written = json.loads((root / "reports" / "promotion.json").read_text())[0]
    assert written["refused"] == "not_converged" and written["reason"] == refused["reason"]
    with pytest.raises(Exception, match="RESOURCE_DOES_NOT_EXIST|not found"):
        _champion(root)  # nothing was registered or aliased

    result = RUNNER.invoke(app, ["promote", "--root", str(root)])
    assert result.exit_code == 0, result.output  # a refusal is a decision: `dvc repro` goes on
    assert result.output.rstrip().splitlines()[-1].startswith(f"ctsweep promote: {DATASET}: not promoted: refused: {A} is")

    forced = promote_dataset(root, DATASET, [A, B], PromoteParams(), force=True)
    assert forced["alias_moved"] and forced["by_force"] and forced["refused"] is None
    assert "not converged (5 of 5 seeds" in forced["reason"] and "promoted by --force" in forced["reason"]
    champion = _champion(root)
    assert champion.tags["family"] == A and "promoted by --force" in champion.tags["promoted_by_force"]
    again = promote(root, [DATASET], [A, B], PromoteParams())[0]  # the forced champion is not refused again
    assert again["refused"] is None and again["reason"] == "the candidate is already the champion"


def test_a_failed_family_is_never_the_candidate(root: Path) -> None:
    _promotable(root, B, 0.5)
    _write(final_result_path(root, DATASET, A), _failed_final(DATASET, A))
    decision = promote(root, [DATASET], [A, B], PromoteParams())[0]
    assert decision["candidate_family"] == B and decision["alias_moved"] and not decision["by_force"]
    _write(final_result_path(root, DATASET, B), _failed_final(DATASET, B))
    nothing = promote(root, [DATASET], [A, B], PromoteParams())[0]
    assert nothing["candidate_family"] is None and not nothing["alias_moved"] and nothing["refused"] == "failed"
    assert nothing["reason"].startswith(f"nothing promoted: every family failed ({A}: non-finite loss")
    assert nothing["champion_version"] == 1  # the earlier champion stays
    result = RUNNER.invoke(app, ["promote", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().splitlines()[-1].startswith(
        f"ctsweep promote: {DATASET}: not promoted: nothing promoted: every family failed")
    by_hand = RUNNER.invoke(app, ["promote", "--root", str(root), "--dataset", DATASET, "--family", A])
    assert by_hand.exit_code == 2 and "every search trial failed" in by_hand.output


def test_promote_refuses_a_mostly_failed_candidate_unless_forced(root: Path) -> None:
    _promotable(root, A, 0.9)
    _promotable(root, B, 0.5)
    path = final_result_path(root, DATASET, A)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "n_trials": 6, "n_failed": 4}))  # ltc on a small dataset, issue 29
    refused = promote(root, [DATASET], [A, B], PromoteParams())[0]
    assert refused["candidate_family"] == A and refused["refused"] == MOSTLY_FAILED
    assert f"{A} is mostly failed (4 of 6 trials failed)" in refused["reason"] and "--force" in refused["reason"]
    assert not refused["alias_moved"] and refused["candidate_version"] is None
    forced = promote_dataset(root, DATASET, [A, B], PromoteParams(), force=True)
    assert forced["alias_moved"] and forced["by_force"] and "mostly failed (4 of 6" in forced["reason"]
    assert _champion(root).tags["family"] == A


# ---------------------------------------------------------------------- not causal (issue 30)

HEAT, CDR = "cdr_nde_heat", "cdr_nde"


@pytest.fixture
def per_step(tmp_path: Path) -> Path:
    """Dataset w, per step: cdr_nde_heat (its final record says it reads later steps; a paper figure
    beside it) and cdr_nde (causal, the best)."""
    from pipeline.final.stage import reads_later_steps

    reason = reads_later_steps(HEAT, [{"lr": 1e-3}], per_step=True)
    _write(final_result_path(tmp_path, "w", HEAT),
           _ok_final(HEAT, [0.8, 0.82, 0.81], FLAT, reads_later_steps=reason))
    _write(final_result_path(tmp_path, "w", CDR), _ok_final(CDR, [0.9, 0.92, 0.91], FLAT))
    for family in (HEAT, CDR):
        _write(search_result_path(tmp_path, "w", family),
               {"status": "ok", "trials": [{"config": {"lr": 1e-3}, "best_val": 0.8}]})
    (tmp_path / "references.yaml").write_text(
        "sources:\n  p1: {citation: 'Someone 2023'}\nfigures:\n  - {dataset: w, family: cdr_nde_heat, "
        "metric: accuracy, mean: 97.0, unit: percent, source: p1, where: Table 3}\n")
    xor = default_params()["prepare"]["xor_event"]
    write_params(tmp_path, {**default_params(), "datasets": ["w"], "families": [HEAT, CDR], "prepare": {"w": xor}})
    return tmp_path


LATER = ("reads later steps: not comparable on next-step prediction (the heat Laplacian of Eq. 14 couples h(t_i) "
         "with h(t_{i+1}) in depth)")


def test_a_family_that_reads_later_steps_is_marked_in_metrics_json_and_the_report(per_step: Path) -> None:
    assert cell_marks(_ok_final(CDR, [0.9], FLAT)) == []  # records without the field: unmarked, as before
    metrics = report(per_step, ["w"], [HEAT, CDR])
    assert metrics["w"][HEAT]["marks"] == [{"mark": NOT_CAUSAL, "detail": LATER}]
    assert metrics["w"][CDR]["marks"] == [] and metrics["w"][CDR]["best"]
    md = (per_step / "reports" / "results.md").read_text()
    assert f"| {HEAT} ¶ | 81.00 ± 1.00 | 81.00 ± 1.00 | 97.00 [1] ¶ (Δ -16.00; outside our 95 % CI) |" in md  # ours and the paper's figure
    assert f"| **{CDR}** (best) | 91.00 ± 1.00 |" in md
    assert "¶ Not causal: on this per-step task the family's output at a step reads inputs after that step" in md
    assert f"{HEAT}: {LATER}." in md


def test_status_names_a_family_that_reads_later_steps(per_step: Path) -> None:
    report(per_step, ["w"], [HEAT, CDR])
    result = RUNNER.invoke(app, ["status", "--root", str(per_step)])
    assert result.exit_code == 0  # a mark, not a failure
    verdict, *lines = result.output.splitlines()
    assert verdict.startswith("w: ") and (" is best" in verdict or " tied at the top" in verdict)
    assert lines == [f"w/{HEAT}: not_causal: {LATER}", "ctsweep status: 2 cells, 0 failed, 1 marked"]
