"""The cluster-fill benchmark (benchmarks/fill/run.py): its arithmetic on hand-made busy intervals,
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

from benchmarks.fill import run as fill_run  # noqa: E402
from benchmarks.fill import workload as fill  # noqa: E402
from benchmarks.fill.report import after_start_up, render  # noqa: E402


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
    # The same 5.5 slot-s over the phases: none before the first start (10); up to the last start
    # (15), one slot idle over [10, 11] and [14, 14.5] (trials were still to come); after it, one
    # slot idle over [16, 20].
    assert out["idle_phase_s"] == pytest.approx({"before_first": 0, "waiting": 1.5, "after_last": 4})
    assert out["running_while_waiting"] == pytest.approx((1 * 1 + 2 * 3 + 1 * 0.5 + 2 * 0.5) / 5)
    three = fill.idle_slot_time({1: [_busy("a", 12, 20)]}, t0=10, t1=20, slots=3)
    assert three == {"start_up": 2, "between": 0, "drain": 0, "unused": 20}  # two slots never taken
    # after start-up: from the first trial's start (0 s here, then 4 s in), the same busy time
    assert after_start_up(out, 2) == pytest.approx(14.5 / 20)
    assert after_start_up({**out, "first_trial_s": 4.0}, 2) == pytest.approx(14.5 / (2 * 6))
    assert after_start_up({**out, "first_trial_s": None}, 2) is None


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
    text = render(report)
    assert "QUICK SMOKE RUN" in text and "TUNE_MAX_PENDING_TRIALS_PG=2" in text
    assert text.count(f"**{summary['fill']:.3f}**") == 2 and text.count("| before |") == 4  # all four tables


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


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_quick_run_through_the_real_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(ROOT)  # Ray's workers import benchmarks.fill.workload from the driver's working directory
    report = fill_run.main(["--quick", "--out", str(tmp_path)])
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


# ------------------------------------------------------------------ several datasets (benchmarks/fill/datasets.py)


def _dbusy(dataset: str, family: str, start: float, end: float, pid: int) -> dict:
    return {**_busy(family, start, end, pid=pid), "dataset": dataset}


def test_dataset_modes_keep_the_one_dataset_figures_per_family() -> None:
    from benchmarks.fill import datasets as fill_datasets

    full, quick = fill.Workload(), fill.QUICK
    for base, is_quick in ((full, False), (quick, True)):
        w, names = fill_datasets.setup(base, is_quick)
        assert len(names) >= 2 and len(set(names)) == len(names) and w.slots == base.slots
        assert 0 < len(w.families) < len(base.families)
        # a family sleeps as in the one-dataset modes (a prefix of the seeded draws)
        assert w.medians() == {f: base.medians()[f] for f in w.families}
    w, names = fill_datasets.setup(full, False)
    # one dataset's searches alone hold fewer live trials than there are slots: the serial mode drains
    assert len(w.families) * w.max_concurrent < w.slots <= len(names) * len(w.families) * w.max_concurrent


def test_dataset_summary_counts_idle_time_per_search_call() -> None:
    from benchmarks.fill import datasets as fill_datasets

    w = fill.Workload(families=("a", "b"), slots=2, num_samples=1, epochs=4)
    # Serial: dataset x on [10, 15) (pids 1, 2), dataset y on [15, 20) (pids 3, 4).
    busy = [_dbusy("x", "a", 10, 14, 1), _dbusy("x", "b", 11, 12, 2),
            _dbusy("y", "a", 16, 19, 3), _dbusy("y", "b", 15, 20, 4)]
    records = {d: _records({"a": [4], "b": [4]}) for d in ("x", "y")}
    calls = [{"dataset": "x", "start": 0, "end": 5}, {"dataset": "y", "start": 5, "end": 10}]
    out = fill_datasets.summarise(busy, records, 10, 20, w, calls)
    assert out["busy_s"] == 13 and out["fill"] == pytest.approx(13 / 20)
    assert out["n_trials"] == out["expected_trials"] == 4 and out["families_ok"] == 4  # (dataset, family) units
    assert out["datasets_at_once"] == 1 and out["dataset_switches"] == 1 and out["families_at_once"] == 2
    # per call: x's processes drain 1 and 3 s before its return, y's 1 s late start and 1 s drain
    assert out["idle_slot_s"] == {"start_up": 2, "between": 0, "drain": 5, "unused": 0, "between_calls": 0}
    assert sum(out["idle_slot_s"].values()) == pytest.approx(w.slots * out["wall_s"] - out["busy_s"])
    x, y = out["per_dataset"]
    assert (x["dataset"], x["trials"], x["busy_s"], x["call_wall_s"]) == ("x", 2, 5, 5)
    assert x["call_fill"] == pytest.approx(0.5) and y["call_fill"] == pytest.approx(0.8)
    # Shared: one call over the whole wall, both datasets at once.
    shared = fill_datasets.summarise([_dbusy("x", "a", 10, 14, 1), _dbusy("y", "a", 11, 13, 2)], records, 10, 20,
                                     w, [])
    assert shared["datasets_at_once"] == 2 and "call_fill" not in shared["per_dataset"][0]
    assert shared["idle_slot_s"]["between_calls"] == 0 and shared["idle_slot_s"]["drain"] == 6 + 7
    gap = fill_datasets.idle_by_call([_dbusy("x", "a", 10, 12, 1)], [(10, 12), (14, 16)], 10, 16, 2)
    # one slot unused in the first call, both in the second (it started no trial), both between calls
    assert gap["unused"] == 1 * 2 + 2 * 2 and gap["between_calls"] == 2 * 2


def test_render_adds_the_dataset_modes_and_their_ratio() -> None:
    from benchmarks.fill import datasets as fill_datasets

    w = fill.Workload(families=("a",), slots=2, num_samples=1, epochs=4)
    records = {d: _records({"a": [4]}) for d in ("x", "y")}
    rows = []
    for mode, calls, busy in (
            ("datasets-serial", [{"dataset": "x", "start": 0, "end": 5}, {"dataset": "y", "start": 5, "end": 10}],
             [_dbusy("x", "a", 10, 14, 1), _dbusy("y", "a", 15, 19, 2)]),
            ("datasets-shared", [], [_dbusy("x", "a", 10, 14, 1), _dbusy("y", "a", 10, 14, 2)])):
        t1 = 20 if mode == "datasets-serial" else 15
        rows.append({"mode": mode, "sequential": mode == "datasets-serial", "datasets": ["x", "y"], "families": ["a"],
                     "environment": {}, "load_average": [1.0, 2.0], "calls": calls,
                     **fill_datasets.summarise(busy, records, 10, t1, w, calls)})
    fields = fill_datasets.report_fields(rows)
    assert fields["several_datasets"]["shared_over_serial"] == {"fill": pytest.approx((8 / 10) / (8 / 20)),
                                                                 "wall": pytest.approx(0.5)}
    assert fill_datasets.report_fields([{"mode": "after"}]) == {}
    machine = {"date": "d", "cpu": "c", "cores": 2, "memory_gib": 1.0, "ray": "r", "optuna": "o", "mlflow": "m",
               "python": "p", "git_commit": "g", "load_average": [1.0, 2.0]}
    report = {"quick": False, "machine": machine, "workload": {**fill.asdict(w), "medians": w.medians()},
              "modes": rows, **fields, "total_seconds": 1.0, "command": "c"}
    text = render(report)
    assert "| datasets-serial | `search_many()` per dataset, in turn |" in text and "one `search_datasets()`" in text
    assert "**0.400**" in text and "**0.800**" in text and "fill x2.00, wall x0.50" in text
    assert "| mode | work fill |" not in text  # no one-dataset mode ran: none of their tables


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_quick_dataset_modes_through_the_real_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from benchmarks.fill import datasets as fill_datasets

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(ROOT)  # Ray's workers import benchmarks.fill.workload from the driver's working directory
    report = fill_run.main(["--quick", "--modes", "datasets-serial,datasets-shared", "--out", str(tmp_path), "--keep"])
    work = Path(report["work"])
    try:
        w, names = fill_datasets.setup(fill.QUICK, True)
        modes = {m["mode"]: m for m in report["modes"]}
        assert list(modes) == ["datasets-serial", "datasets-shared"]
        units = len(names) * len(w.families)
        for label, m in modes.items():
            # every trial of every (dataset, family) ran once, under its own dataset, and wrote its result
            assert m["n_trials"] == m["expected_trials"] == units * w.num_samples == m["n_busy_records"]
            assert m["n_failed"] == 0 and m["families_ok"] == units
            assert [(d["dataset"], d["trials"]) for d in m["per_dataset"]] == [(n, len(w.families) * w.num_samples)
                                                                              for n in names]
            assert all((work / label / "results" / n / "search" / f"{f}.json").is_file()
                       for n in names for f in w.families)
            assert m["fill"] == pytest.approx(m["busy_s"] / (w.slots * m["wall_s"])) and 0 < m["fill"] <= 1
            assert sum(m["idle_slot_s"].values()) == pytest.approx(w.slots * m["wall_s"] - m["busy_s"], rel=1e-6)
        serial, shared = modes["datasets-serial"], modes["datasets-shared"]
        # one dataset after another: never two at once, one search_many call each
        assert [c["dataset"] for c in serial["calls"]] == list(names)
        assert serial["datasets_at_once"] == 1 and serial["dataset_switches"] == len(names) - 1
        # one run: the datasets' trials run at the same time
        assert shared["calls"] == [] and shared["datasets_at_once"] >= 2
        ratio = report["several_datasets"]["shared_over_serial"]
        assert ratio["fill"] == pytest.approx(shared["fill"] / serial["fill"])
        assert "datasets-shared / datasets-serial: fill x" in (tmp_path / "fill.md").read_text()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------- the stores (benchmarks/fill/stores.py)


def test_the_long_workload_s_shortest_trial_sleeps_30_s_on_warm_workers() -> None:
    """Issue 33: trials of at least 30 s, as the default's take on a cluster: ASHA's first rung
    (grace_period epochs) at the shortest epoch a family or trial can draw."""
    from benchmarks.fill import stores as fill_stores

    w = fill_stores.LONG
    assert w.warm_workers and w.slots == 32
    assert w.grace_period * w.epoch_floor_s >= 30  # every epoch of every trial sleeps the floor at least
    w.params()  # a valid `search` section


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_quick_store_mode_logs_through_the_server_on_postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The postgres mode through the real driver. (The sqlite mode is the driver's own default
    stores, which test_quick_run_through_the_real_driver runs; the table of both modes is
    test_render_lists_every_mode_with_its_fill's.)"""
    import shutil

    from pipeline.stores.paths import search_result_path

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(ROOT)  # Ray's workers import benchmarks.fill.workload from the driver's working directory
    report = fill_run.main(["--quick", "--workload", "long", "--modes", "postgres", "--out", str(tmp_path), "--keep"])
    work = Path(report["work"])
    try:
        w = fill.QUICK
        assert report["workload"]["warm_workers"] is True  # the long workload's warm workers, the quick sizes
        [m] = report["modes"]
        assert m["mode"] == "postgres" and m["stores"] == "postgres_stores"
        # today's driver: one search_many, every trial ran once
        assert not m["sequential"] and m["environment"] == {}
        assert m["n_trials"] == m["expected_trials"] == len(w.families) * w.num_samples == m["n_busy_records"]
        assert m["n_failed"] == 0 and m["families_ok"] == len(w.families)
        assert 0 < m["fill"] <= 1
        # Where the records went: no SQLite file in the project; its search records name the
        # PostgreSQL study, and the server logged no error.
        assert not list((work / "postgres").glob("*.db"))
        for family in w.families:
            record = json.loads(search_result_path(work / "postgres", fill.DATASET, family).read_text())
            assert record["optuna_storage"].startswith("postgresql://ctsweep@127.0.0.1:")
        assert m["server_errors"] == 0, m.get("server_first_error")
        assert "MLflow through `mlflow server` on PostgreSQL" in (tmp_path / "fill.md").read_text()
    finally:
        shutil.rmtree(work, ignore_errors=True)
