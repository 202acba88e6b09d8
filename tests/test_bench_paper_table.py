"""benchmarks/papers/paper_table.py: a paper's rows beside our final records, with the verdict the
reproduction pages use (the paper's mean inside our 95 % t-interval, or wholly on one side)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.papers import paper_table
from benchmarks.papers.paper_table import BETTER, NOT_RUN, REPRODUCED, WORSE, best_run_verdict, verdict

ROOT = Path(__file__).resolve().parents[1]


def test_the_verdict_follows_the_interval_and_the_metric_s_direction() -> None:
    scores = [0.60, 0.62, 0.64]  # mean 0.62, sample std 0.02: t(0.975, 2) = 4.303, half-width 0.0497
    found, interval = verdict(scores, 0.643, "min")
    assert found == REPRODUCED and interval == pytest.approx((0.5703, 0.6697), abs=1e-4)
    assert verdict(scores, 0.70, "min")[0] == BETTER and verdict(scores, 0.70, "max")[0] == WORSE
    assert verdict(scores, 0.50, "min")[0] == WORSE and verdict(scores, 0.50, "max")[0] == BETTER
    assert verdict([0.6], 0.6, "min") == (NOT_RUN, None)  # one seed has no interval


def _record(root: Path, family: str, tests: list[float], config: dict | None = None) -> None:
    folder = root / "results" / "walker2d" / "final"
    folder.mkdir(parents=True, exist_ok=True)
    seeds = [{"seed": i, "test": t, "seconds_per_epoch": 10.0, "epochs_trained": 50} for i, t in enumerate(tests)]
    (folder / f"{family}.json").write_text(json.dumps({
        "family": family, "mode": "min", "metric": "mse", "epochs": 50, "seeds": seeds,
        "model_config": config or {}, "data_provenance": "local copy, not verified against the publisher"}))


def test_the_table_gives_every_row_of_the_paper_a_verdict_or_a_reason(tmp_path: Path) -> None:
    shutil.copy(ROOT / "references.yaml", tmp_path / "references.yaml")
    _record(tmp_path, "cfc", [0.60, 0.62, 0.64])            # Table 7: 0.643 -> inside
    _record(tmp_path, "cfc_mmrnn", [0.70, 0.71, 0.72])      # 0.617 -> ours higher: worse
    _record(tmp_path, "cfc_no_gate", [0.66])                # one seed: no verdict
    _record(tmp_path, "gru_ode", [1.0, 1.1, 1.2])           # Lechner & Hasani's GRU-ODE: another model
    report = paper_table.main(["--root", str(tmp_path), "--source", "cfc2021", "--dataset", "walker2d",
                               "--not-run", "ltc=13.8 core-hours", "--out", str(tmp_path / "out")])
    assert len(report["rows"]) == 11  # every walker2d row of CfC's Table 7 that the zoo has
    # two of them ct_rnn's: the quoted ODE-RNN (a CT-RNN without leak) and CT-RNN, by `config`
    assert sorted(r["paper_mean"] for r in report["rows"] if r["family"] == "ct_rnn") == [1.198, 1.904]
    rows = {r["family"]: r for r in report["rows"] if r["family"] != "ct_rnn"}
    assert rows["cfc"]["verdict"] == REPRODUCED and rows["cfc"]["diff"] == pytest.approx(0.62 - 0.643)
    assert rows["cfc_mmrnn"]["verdict"] == WORSE
    assert rows["cfc_no_gate"]["verdict"] == NOT_RUN and rows["cfc_no_gate"]["reason"] == "1 seed(s) scored"
    assert rows["gru_ode"]["verdict"] == NOT_RUN  # a record of ours is no figure of another model
    assert rows["gru_ode"]["reason"].startswith("another model under the name: Lechner & Hasani 2020's GRU-ODE")
    assert rows["ltc"] == {**rows["ltc"], "verdict": NOT_RUN, "reason": "13.8 core-hours"}
    assert rows["ode_lstm"]["reason"] == "not in the run"
    text = (tmp_path / "out" / "paper_table.md").read_text()
    assert "| cfc ('CfC') | 0.6200 ± 0.0200 (n = 3) | 0.5703 to 0.6697 | 0.6430 ± 0.0060 | -0.0230 | reproduced |" in text
    assert "Data: local copy, not verified against the publisher" in text
    assert json.loads((tmp_path / "out" / "paper_table.json").read_text())["source"] == "cfc2021"
    with pytest.raises(SystemExit, match="no source 'nope'"):
        paper_table.main(["--root", str(tmp_path), "--source", "nope", "--dataset", "walker2d"])


def test_a_row_that_reads_later_steps_says_so_beside_its_verdict(tmp_path: Path) -> None:
    # CDR-NDE-heat's Laplacian reads the next step, whose input is this step's target on Walker2d:
    # a "better" there is no evidence for the paper's claim, and the table must not say it bare.
    shutil.copy(ROOT / "references.yaml", tmp_path / "references.yaml")
    _record(tmp_path, "cdr_nde_heat", [0.266, 0.2664, 0.2662], {"method": "euler"})
    _record(tmp_path, "cdr_nde", [0.93, 0.94, 0.935], {"method": "euler"})
    path = tmp_path / "results" / "walker2d" / "final" / "cdr_nde_heat.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "reads_later_steps": "the heat Laplacian"}))
    report = paper_table.main(["--root", str(tmp_path), "--source", "anumasa_cdrnde", "--dataset", "walker2d",
                               "--not-run", "cdr_nde_heat=6.2 times the Euler row's epoch"])
    euler = [r for r in report["rows"] if r["family"] == "cdr_nde_heat" and "mean" in r]
    assert [r["paper_mean"] for r in euler] == [0.54]  # the Dopri5 row (0.49) is another configuration
    dopri5 = [r for r in report["rows"] if r["family"] == "cdr_nde_heat" and "mean" not in r]
    assert [(r["verdict"], r["reason"]) for r in dopri5] == [
        (NOT_RUN, "the paper's row has method dopri5, which this run did not train; 6.2 times the Euler row's epoch")]
    assert euler[0]["verdict"] == f"{BETTER}; reads later steps: not comparable on next-step prediction (the heat Laplacian)"
    assert [r["verdict"] for r in report["rows"] if r["family"] == "cdr_nde"] == [BETTER]


def test_a_row_run_again_elsewhere_is_read_from_that_project_and_named(tmp_path: Path) -> None:
    main, again = tmp_path / "main", tmp_path / "again"
    for root in (main, again):
        root.mkdir()
        shutil.copy(ROOT / "references.yaml", root / "references.yaml")
    _record(main, "lstm_dt", [1.132, 1.157, 1.158])  # the subset's 100 epochs: worse than 1.09
    _record(again, "lstm_dt", [1.063, 1.088, 1.08])  # run again at the paper's 200
    _record(main, "ode_lstm", [0.91, 0.95, 0.91])
    args = ["--root", str(main), "--source", "anumasa_cdrnde", "--dataset", "walker2d"]
    before = {r["family"]: r for r in paper_table.main(args)["rows"]}
    report = paper_table.main([*args, "--row-from", f"lstm_dt={again}", "--out", str(tmp_path / "out")])
    rows = {r["family"]: r for r in report["rows"]}
    assert before["lstm_dt"]["verdict"] == WORSE and "root" not in before["lstm_dt"]
    assert rows["lstm_dt"]["verdict"] == REPRODUCED and rows["lstm_dt"]["root"] == str(again.resolve())
    assert rows["ode_lstm"] == before["ode_lstm"]  # every other row from --root
    assert f"training 500, 500, 500 s per seed; run in {again.resolve()}" in (tmp_path / "out" / "paper_table.md").read_text()
    with pytest.raises(SystemExit, match=r"--row-from: \['cfc'\] have no figure of 'anumasa_cdrnde'"):
        paper_table.main([*args, "--row-from", f"cfc={again}"])


def test_a_best_run_figure_is_judged_against_our_best_seed_too() -> None:
    scores = [0.80, 0.82, 0.84]  # mean 0.82, half-width 0.0497: interval 0.770 to 0.870
    assert best_run_verdict(scores, 0.86, "max")[0] == WORSE       # above even our best seed
    assert best_run_verdict(scores, 0.83, "max")[0] == REPRODUCED  # between our mean's interval and best seed
    assert best_run_verdict(scores, 0.76, "max")[0] == BETTER      # our whole interval above it
    assert verdict(scores, 0.86, "max")[0] == REPRODUCED           # the mean's rule alone would call it so
    assert best_run_verdict(scores, 0.79, "min")[0] == WORSE       # lower is better: our best 0.80 > 0.79
    assert best_run_verdict([0.8], 0.8, "max") == (NOT_RUN, None)


def test_the_temporal_weights_rows_compare_our_best_seed_with_the_paper_s_best_run(tmp_path: Path) -> None:
    shutil.copy(ROOT / "references.yaml", tmp_path / "references.yaml")
    folder = tmp_path / "results" / "physionet2012" / "final"
    folder.mkdir(parents=True)
    for family, tests in (("latent_ode", [0.80, 0.82, 0.84]), ("latent_ode_tw", [0.84, 0.86, 0.87])):
        seeds = [{"seed": i, "test": t, "seconds_per_epoch": 20.0, "epochs_trained": 31} for i, t in enumerate(tests)]
        (folder / f"{family}.json").write_text(json.dumps({"family": family, "mode": "max", "metric": "auroc",
                                                           "epochs": 31, "seeds": seeds, "model_config": {}}))
    report = paper_table.table(tmp_path, "kohan2022", "physionet2012", {"gru_d": "not in this test"})
    rows = {r["family"]: r for r in report["rows"]}
    assert rows["latent_ode"]["verdict"] == WORSE and rows["latent_ode"]["best"] == 0.84      # paper 0.857
    assert rows["latent_ode_tw"]["verdict"] == REPRODUCED and rows["latent_ode_tw"]["best"] == 0.87  # 0.861
    assert rows["gru_d"]["verdict"] == NOT_RUN and rows["gru_d"]["reason"] == "not in this test"
    text = paper_table.render(report)
    assert "(n = 3; best seed 0.8700)" in text and "best run" in text
