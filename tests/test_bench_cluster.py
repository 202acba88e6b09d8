"""The cluster benchmark (benchmarks/cluster/run.py): replay planning, the plain path's trial, flags,
and a --quick run through real Ray, Optuna, MLflow and a spawned worker pool.

Timings are machine-dependent and never asserted; their arithmetic and the replay are.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import ray

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster import run as cluster  # noqa: E402
from pipeline.config import AshaParams, SearchParams, XorParams  # noqa: E402
from pipeline.data.contract import Dataset, Split, save_dataset  # noqa: E402
from pipeline.data.kinds.xor import build as build_xor  # noqa: E402
from pipeline.errors import ConfigError  # noqa: E402
from pipeline.spaces import load_space, space_path  # noqa: E402


def test_asha_stop_points_follow_rays_rungs() -> None:
    assert cluster.asha_stop_points(SearchParams(epochs=4)) == {2, 4}  # params.yaml: grace 2, factor 2
    assert cluster.asha_stop_points(SearchParams(epochs=2)) == {2}
    assert cluster.asha_stop_points(SearchParams(epochs=1, asha=AshaParams(grace_period=1))) == {1}
    three = SearchParams(epochs=10, asha=AshaParams(grace_period=1, reduction_factor=3))
    assert cluster.asha_stop_points(three) == {1, 3, 9, 10}


def test_units_group_a_dataset_s_families_unless_sequential() -> None:
    pairs = [("a", "x"), ("a", "y"), ("b", "x")]
    assert cluster.units_of(pairs, sequential=False) == [("a", ["x", "y"]), ("b", ["x"])]  # one Tune run each
    assert cluster.units_of(pairs, sequential=True) == [("a", ["x"]), ("a", ["y"]), ("b", ["x"])]


def _search(epochs_status: list[tuple[int, str]]) -> dict:
    trials = [{"config": {"lr": 0.01, "batch_size": 32, "i": i}, "epochs": e, "status": s, "best_val": 0.5}
              for i, (e, s) in enumerate(epochs_status)]
    return {"dataset": "d", "family": "cfc", "status": "ok", "trials": trials}


def test_plan_replay_reads_early_stops_time_limits_and_failures() -> None:
    p = SearchParams(epochs=4, trial_time_limit_s=30)
    record = _search([(4, "ok"), (2, "ok"), (1, "ok"), (3, "ok"), (0, "error"), (2, "error")])
    jobs = cluster.plan_replay(record, Path("/data/d"), p)
    # max_t and the ASHA rung replay as they are; 1 and 3 are no stop point: cut by the limit
    assert [j.epochs for j in jobs] == [4, 2, 1, 3, 1, 3]  # a failed trial: one epoch past its last report
    assert [j.past_limit for j in jobs] == [False, False, True, True, False, False]
    assert [j.config["i"] for j in jobs] == list(range(6))  # in record order, configs unchanged
    assert {(j.seed, j.time_limit_s, j.dataset_dir) for j in jobs} == {(p.trial_seed, 30, "/data/d")}
    no_limit = cluster.plan_replay(record, Path("/data/d"), SearchParams(epochs=4))
    assert not any(j.past_limit for j in no_limit)  # without a limit nothing can have been cut


@pytest.fixture
def xor_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "xor"
    save_dataset(folder, build_xor("xor", XorParams(kind="xor", n_train=60, n_test=20, seed=1)))
    return folder


def _reference(family: str) -> dict:
    space = load_space(space_path(ROOT, family), family)
    return {**space.reference, **space.fixed, "batch_size": 16}


def _job(folder: Path, family: str, epochs: int, past_limit: bool = False, limit: float | None = None,
         status: str = "ok") -> cluster.TrialJob:
    return cluster.TrialJob("xor", family, str(folder), _reference(family), epochs, past_limit, 0, limit, status)


def test_replay_trial_trains_the_reported_epochs(xor_dir: Path) -> None:
    out = cluster.replay_trial(_job(xor_dir, "cfc", epochs=2))
    assert (out["status"], out["epochs"], out["error"]) == ("ok", 2, None)
    assert out["seconds"] > 0 and 0 <= out["best_val"] <= 1  # accuracy of the better epoch


def test_replay_trial_gives_the_trainer_the_search_budget(xor_dir: Path) -> None:
    # CDR-NDE's protocol steps its learning rate at a fraction of the run (Sec. 5): the replay
    # must hand the Trainer the search's `epochs`, as run_trial does, or it cannot start.
    assert "lr_step_fraction" in _reference("cdr_nde")
    job = _job(xor_dir, "cdr_nde", epochs=1)
    out = cluster.replay_trial(cluster.TrialJob(**{**job.__dict__, "max_epochs": 4}))
    assert (out["status"], out["epochs"]) == ("ok", 1), out["error"]


def test_plain_split_replays_trials_and_splits_their_seconds(xor_dir: Path) -> None:
    from benchmarks.cluster.plain_split import replay

    # cdr_nde stopped early: 1 reported epoch of a 4-epoch budget, so its replay must stop at 1
    stopped = dataclasses.replace(_job(xor_dir, "cdr_nde", epochs=1), max_epochs=4)
    parts = replay([_job(xor_dir, "cfc", epochs=2), stopped])
    assert parts["epochs"] == 3  # every reported epoch of both trials, nothing more
    assert min(parts["setup"], parts["training"], parts["validation"]) > 0


def test_replay_trial_stops_at_the_time_limit(xor_dir: Path) -> None:
    # A cut trial: its reported epoch, then on into the next until the limit (here at once).
    out = cluster.replay_trial(_job(xor_dir, "cfc", epochs=0, past_limit=True, limit=1e-6))
    assert (out["status"], out["epochs"], out["best_val"]) == ("time_limited", 0, None)


def test_replay_trial_fails_where_the_trial_failed(tmp_path: Path) -> None:
    d = build_xor("bad", XorParams(kind="xor", n_train=60, n_test=20, seed=3))
    train = d.splits["train"]
    x = train.x.copy()
    x[:, 0, 0] = np.inf  # as tests/test_search.py: every NCDE trial fails in epoch 1
    save_dataset(tmp_path / "bad", Dataset(d.meta, {**d.splits, "train": Split(x, train.t, train.mask, train.y)}))
    out = cluster.replay_trial(_job(tmp_path / "bad", "ncde", epochs=1, status="error"))
    assert out["status"] == "error" and out["epochs"] == 0
    assert "non-finite" in out["error"] or "solver failed" in out["error"], out["error"]


@pytest.mark.parametrize("flags, key", [
    (["--families", "cfc,nope"], "--families"),
    (["--datasets", "xor_event,nope"], "--datasets"),
    (["--throughput-workers", "0,2"], "--throughput-workers"),
    (["--trials-per-gpu", "two"], "--trials-per-gpu"),
    (["--workers", "0"], "--workers"),
    (["--workers", "4096"], "cores"),
    (["--num-samples", "1"], "--num-samples"),  # below params.yaml's round of 2
    (["--min-steps", "0"], "--min-steps"),
])
def test_bad_flags_are_one_clear_error(flags: list[str], key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match=key):
        cluster.parse_args(flags)


@pytest.mark.timeout(600)
@pytest.mark.slow  # Ray twice, MLflow, a spawned pool: about 45 s on the 2-core machine
def test_quick_run_replays_the_same_trials_and_writes_both_outputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    report = cluster.main(["--quick", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    assert not ray.is_initialized()
    assert not (tmp_path / "work").exists()  # scratch removed without --keep
    saved = json.loads((tmp_path / "out" / "cluster.json").read_text())
    assert saved == json.loads(json.dumps(report, default=str))
    assert {"date", "cpu", "cores", "load_average", "ray", "mlflow", "optuna"} <= set(saved["machine"])

    (run,) = saved["overhead"]
    ctsweep, plain = run["ctsweep"], run["plain"]
    assert ctsweep["ray_resources"]["CPU"] == 2  # the local Ray offers as many slots as the plain pool's workers
    (search,) = ctsweep["searches"]
    assert search["status"] == "ok" and search["n_trials"] == 2
    # The plain path trained exactly the epochs each ctsweep trial reported.
    assert [t["epochs"] for t in plain["searches"][0]["trials"]] == [t["epochs"] for t in search["trials"]]
    assert all(t["status"] == "ok" for t in plain["searches"][0]["trials"]) and run["mismatches"] == []
    assert run["same_best_val"] == [2, 2]  # same seed, config and epochs: the same validation scores
    assert ctsweep["total_s"] == pytest.approx(ctsweep["ray_startup_s"] + ctsweep["mlflow_store_s"]
                                               + ctsweep["searches_s"] + ctsweep["ray_shutdown_s"])
    assert run["ratio"] == pytest.approx(ctsweep["total_s"] / plain["total_s"])
    assert run["overhead_per_trial_s"] == pytest.approx((ctsweep["total_s"] - plain["total_s"]) / 2)
    assert saved["summary"]["ratio"] == pytest.approx(run["ratio"])
    # CPU by process kind: both paths' trials trained in processes of their own, apart from the driver
    for path in (ctsweep, plain):
        assert path["cpu"]["cpu_s"]["trials"] > 0 and path["cpu"]["processes"]["trials"] >= 1
    assert ctsweep["cpu"]["cpu_s"]["helpers"] > 0  # Ray's GCS and raylet at least

    rows = saved["throughput"]
    assert [(r["label"], r["max_concurrent"], r["n_trials"]) for r in rows] == [
        ("1 worker(s)", 1, 2), ("2 worker(s)", 2, 2)]
    assert rows[1]["searches_s"] == ctsweep["searches_s"]  # the overhead run, reused
    assert rows[0]["trials_per_hour"] == pytest.approx(2 * 3600 / rows[0]["searches_s"])

    markdown = (tmp_path / "out" / "cluster.md").read_text()
    for text in ("QUICK SMOKE RUN", "## Overhead: ctsweep against a plain loop", "## Throughput of the ctsweep path",
                 "| xor_event | cfc | 2 |", "| 1 worker(s) | 1 |",
                 "Trial processes' CPU, ctsweep ÷ plain"):
        assert text in markdown, text
