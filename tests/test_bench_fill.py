"""The cluster-fill benchmark (benchmarks/fill.py): its arithmetic on hand-made busy intervals,
the seeded workload, and a --quick run through the real driver (real Ray, Optuna and MLflow in
tmp dirs). Timings are machine-dependent and never asserted; what every mode ran, the fill's
definition and the overlap of families are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks import fill  # noqa: E402


def _busy(family: str, start: float, end: float, pid: int = 1, slept: float = 0.5) -> dict:
    return {"trial_id": f"{family}-{start}", "family": family, "pid": pid, "start": start, "end": end, "epochs": 2,
            "slept_s": slept, "report_s": 0.1, "mlflow_s": 0.1}


def _records(epochs_by_family: dict[str, list[int]]) -> dict[str, dict]:
    return {f: {"status": "ok", "trials": [{"status": "ok", "epochs": e} for e in epochs]}
            for f, epochs in epochs_by_family.items()}


def test_concurrency_and_families_at_once_follow_the_intervals() -> None:
    busy = [_busy("a", 0, 4), _busy("a", 1, 2), _busy("b", 3, 5), _busy("c", 5, 6)]
    assert fill.concurrency([(b["start"], b["end"]) for b in busy])[-1] == (6, 0)
    assert max(n for _, n in fill.concurrency([(b["start"], b["end"]) for b in busy])) == 2
    assert fill.families_at_once(busy) == 2  # a and b at 3; c starts as b ends: not at once
    assert fill.families_at_once([_busy("a", 0, 1), _busy("b", 1, 2)]) == 1
    assert fill.family_switches(busy) == 2 and fill.family_switches([_busy("a", 0, 1), _busy("b", 1, 2),
                                                                     _busy("a", 2, 3)]) == 2


def test_summary_fill_is_busy_over_slots_times_wall() -> None:
    w = fill.Workload(families=("a", "b"), slots=2, num_samples=2, epochs=4)
    busy = [_busy("a", 10, 14, pid=1), _busy("a", 14.5, 16, pid=1), _busy("b", 11, 15, pid=2),
            _busy("b", 15, 30, pid=2)]  # past the wall's end: clipped
    out = fill.summarise(busy, _records({"a": [4, 2], "b": [4, 4]}), t0=10, t1=20, workload=w)
    assert out["wall_s"] == 10 and out["busy_s"] == pytest.approx(4 + 1.5 + 4 + 5)
    assert out["fill"] == pytest.approx(14.5 / 20)
    assert out["n_trials"] == out["expected_trials"] == 4 and out["asha_stopped"] == 1 and out["epochs"] == 14
    assert out["trial_processes"] == 2 and out["reuse_gap_median_s"] == pytest.approx(0.25)  # 0.5 and 0
    assert out["all_slots_busy_s"] == 1 and out["peak_running"] == 2 and out["after_last_trial_s"] == 0
    assert out["timeline"][0] == 1 and len(out["timeline"]) == 11  # 1 s steps over 10 s
    # The idle slot time, 20 - 14.5: process 2 starts 1 s late, process 1 waits 0.5 s between its
    # trials and has nothing to run for the last 4 s.
    assert out["idle_slot_s"] == {"start_up": 1, "between": 0.5, "drain": 4, "unused": 0}
    assert sum(out["idle_slot_s"].values()) == pytest.approx(2 * out["wall_s"] - out["busy_s"])
    three = fill.idle_slot_time({1: [_busy("a", 12, 20)]}, t0=10, t1=20, slots=3)
    assert three == {"start_up": 2, "between": 0, "drain": 0, "unused": 20}  # two slots never taken


def test_render_lists_every_mode_with_its_fill() -> None:
    w = fill.Workload(families=("a", "b"), slots=2, num_samples=2, epochs=4)
    summary = fill.summarise([_busy("a", 10, 14), _busy("b", 11, 15, pid=2)], _records({"a": [4], "b": [2]}),
                             t0=10, t1=20, workload=w)
    modes = [{"mode": name, "sequential": name == "before", "environment": env, "load_average": [1.0, 2.0],
              "worker_processes_started": 5, **summary}
             for name, env in (("before", {}), ("after-pending", {"TUNE_MAX_PENDING_TRIALS_PG": "2"}))]
    machine = {"date": "d", "cpu": "c", "cores": 2, "memory_gib": 1.0, "ray": "r", "optuna": "o", "mlflow": "m",
               "python": "p", "git_commit": "g", "load_average": [1.0, 2.0]}
    report = {"quick": True, "machine": machine, "workload": {**fill.asdict(w), "medians": w.medians()},
              "modes": modes, "total_seconds": 1.0, "command": "c"}
    text = fill.render(report)
    assert "QUICK SMOKE RUN" in text and "TUNE_MAX_PENDING_TRIALS_PG=2" in text
    assert text.count(f"**{summary['fill']:.3f}**") == 2 and text.count("| before |") == 3  # all three tables


def test_workload_is_seeded_and_scores_follow_the_learning_rate() -> None:
    w = fill.Workload()
    assert len(w.families) >= 12 and w.num_samples >= 16 and w.slots == 32
    assert w.medians() == fill.Workload().medians()  # the same in every mode
    assert all(w.epoch_min_s <= m <= w.epoch_max_s for m in w.medians().values())
    assert len(set(w.medians().values())) > 1  # varied
    a, b = fill._rng(1, "cfc", {"lr": 0.01}), fill._rng(1, "cfc", {"lr": 0.01})
    assert a.random() == b.random() and fill._rng(1, "ncde", {"lr": 0.01}).random() != fill._rng(
        1, "cfc", {"lr": 0.01}).random()
    near, far = fill.score({"lr": 1e-3}, 4, 1e-3, 0.0), fill.score({"lr": 1e-1}, 4, 1e-3, 0.0)
    assert near > far and fill.score({"lr": 1e-3}, 8, 1e-3, 0.0) > near  # rising with epochs
    w.params()  # valid SearchParams (grace within epochs)
    fill.QUICK.params()


@pytest.mark.slow
def test_quick_run_through_the_real_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(ROOT)  # Ray's workers import benchmarks.fill from the driver's working directory
    report = fill.main(["--quick", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "fill.json").read_text())["modes"] == json.loads(json.dumps(report["modes"]))
    assert "QUICK SMOKE RUN" in (tmp_path / "fill.md").read_text()
    w = fill.QUICK
    modes = {m["mode"]: m for m in report["modes"]}
    assert list(modes) == ["before", "after"] and modes["before"]["sequential"] and not modes["after"]["sequential"]
    for m in modes.values():
        # every trial of every family ran, once, and its function recorded its interval
        assert m["n_trials"] == m["expected_trials"] == len(w.families) * w.num_samples == m["n_busy_records"]
        assert m["n_failed"] == 0 and m["families_ok"] == len(w.families)
        assert m["fill"] == pytest.approx(m["busy_s"] / (w.slots * m["wall_s"]))
        assert 0 < m["fill"] <= 1 and 0 < m["work_fill"] <= m["fill"]
        assert 0 <= m["first_trial_s"] < m["wall_s"] and m["peak_running"] <= w.slots
    before, after = modes["before"], modes["after"]
    assert len(before["calls"]) == len(w.families)  # one search() per family
    # One search after another: never two families at once, the trials grouped by family.
    assert before["families_at_once"] == 1 and before["family_switches"] == len(w.families) - 1
    # One search_many: the families take turns in one Tune run ...
    assert after["family_switches"] >= len(w.families)
    # ... and trials of different families run at the same time (the driver lets Tune start as
    # many trials at once as there are slots: pipeline.sweep.cluster.pending_trials).
    assert after["peak_running"] >= 2 and after["families_at_once"] >= 2
    assert before["environment"] == {"TUNE_MAX_PENDING_TRIALS_PG": "1"}  # the driver as it was
