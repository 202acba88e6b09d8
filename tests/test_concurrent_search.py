"""Several families searched at once (pipeline.sweep.families): each keeps its own study, budget,
concurrency cap and ASHA rungs, results go only to their own family, the families' trials share
the cluster at the same time, and the state survives a save and restore. The end-to-end part
runs real Ray Tune, Optuna and MLflow on a tiny XOR dataset; the final stage's seeds of two
families train at once too, and a rerun skips the families whose inputs did not change."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
from pathlib import Path

import pytest
import ray
from mlflow.tracking import MlflowClient
from ray.tune.search import Searcher

from pipeline.stores import staleness
from pipeline.stores import tracking
from pipeline.config import FinalParams, Resources, SearchParams, XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.final.stage import final_many
from pipeline.stores.paths import final_result_path, processed_dir, search_result_path
from pipeline.sweep.cluster import PENDING_TRIALS_ENV, SNAPSHOT_WARNING_ENV, local_options, pending_trials, ray_session, trial_slots
from pipeline.sweep.early_records import EarlyRecords
from pipeline.sweep.families import FAMILY_KEY, REPEAT_KEY, TRIAL_NUMBER_KEY, FamilySearcher
from pipeline.sweep.scheduling import make_searcher
from pipeline.sweep.search import search_many
import yaml

REPO = Path(__file__).resolve().parents[1]


def _space(trial) -> None:
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)


def _family_searcher(budgets: dict[str, int], max_concurrent: int = 2, round_size: int = 2,
                     rounds_in_flight: int = 1) -> FamilySearcher:
    searchers = {f: make_searcher(_space, None, "val_metric", "max", seed=i, n_startup_trials=1, max_epochs=3)
                 for i, f in enumerate(budgets)}
    return FamilySearcher(searchers, budgets, max_concurrent, "val_metric", "max", round_size=round_size,
                          rounds_in_flight=rounds_in_flight)


def test_families_share_the_slots_within_their_budgets_and_rounds() -> None:
    s = _family_searcher({"a": 3, "b": 1}, max_concurrent=2)
    given = [s.suggest(f"t{i}") for i in range(4)]
    # a first (3 trials left against b's 1, no run time known yet), its round of 2; then b; then b is spent
    assert [g[FAMILY_KEY] for g in given[:3]] == ["a", "a", "b"] and given[3] is None
    assert [g[TRIAL_NUMBER_KEY] for g in given[:3]] == [0, 1, 0]  # each family's own study numbers its trials
    s.on_trial_complete("t0", {"val_metric": 0.5, "epoch": 3})
    assert s.suggest("t4") is None  # a's round has not ended: t1 still runs, and nothing was told yet
    assert [t.state.name for t in s.study_searcher("a")._ot_study.get_trials(deepcopy=False)] == ["RUNNING"] * 2
    s.on_trial_complete("t1", {"val_metric": 0.6, "epoch": 3})  # the round ends: both told, in number order
    again = s.suggest("t4")
    assert again[FAMILY_KEY] == "a" and set(again) == {FAMILY_KEY, REPEAT_KEY, TRIAL_NUMBER_KEY, "lr"}
    assert s.suggest("t5") == Searcher.FINISHED and s.total_samples == 4  # every budget given out
    for trial in ("t2", "t4"):  # the live trials are still told to their studies
        s.on_trial_complete(trial, {"val_metric": 0.4, "epoch": 3})
    assert [len(s.study_searcher(f)._ot_study.get_trials(deepcopy=False)) for f in "ab"] == [3, 1]


def _serve(s: FamilySearcher, seconds: dict[str, float] | None, slots: int = 2) -> list[tuple[str, float]]:
    """Drive a searcher with `slots` trials at once, the oldest live trial ending first; each
    trial reports `seconds[family]` as its run time (None: no run time). Returns every proposal
    as (family, lr), in the order given."""
    given, live, n = [], [], 0
    while True:
        got = s.suggest(f"t{n}") if len(live) < slots else None
        if isinstance(got, dict):
            given.append((got[FAMILY_KEY], got["lr"]))
            live.append((f"t{n}", got[FAMILY_KEY]))
            n += 1
            continue
        if not live:
            return given
        trial_id, family = live.pop(0)
        s.on_trial_complete(trial_id, {"val_metric": 0.5, "epoch": 3,
                                       **({"time_total_s": seconds[family]} if seconds else {})})


def test_the_family_with_the_most_work_left_takes_the_free_slot_first() -> None:
    # One slot; a's trials take 10 s, b's 1 s, same budgets: once each has a run time, a is served
    # first (its trials are what the search's end waits for); without run times, they take turns.
    budgets = {"a": 6, "b": 6}
    timed = _serve(_family_searcher(budgets, max_concurrent=1, round_size=1), {"a": 10.0, "b": 1.0}, slots=1)
    turns = _serve(_family_searcher(budgets, max_concurrent=1, round_size=1), None, slots=1)
    assert [f for f, _ in turns] == ["a", "b"] * 6
    assert [f for f, _ in timed] == ["a", "b"] + ["a"] * 5 + ["b"] * 5  # b only when a cannot propose
    # ... and each family proposed exactly what it proposed in turns: the order is not a result
    for family in budgets:
        assert [lr for f, lr in timed if f == family] == [lr for f, lr in turns if f == family]


def test_results_reach_only_their_own_family_s_study() -> None:
    s = _family_searcher({"a": 2, "b": 2}, round_size=1)  # rounds of one: each result is told as it ends
    assert s.suggest("t0")[FAMILY_KEY] == "a" and s.suggest("t1")[FAMILY_KEY] == "b"
    s.on_trial_complete("t0", {"val_metric": 0.9, "epoch": 3})
    s.on_trial_complete("t1", {"val_metric": 0.2, "epoch": 1})  # stopped early: pruned, not complete
    s.on_trial_complete("t1", {"val_metric": 0.2, "epoch": 1})  # told twice: counted once
    a, b = (s.study_searcher(f)._ot_study.get_trials(deepcopy=False) for f in "ab")
    assert [(t.state.name, t.value) for t in a] == [("COMPLETE", 0.9)]
    assert [t.state.name for t in b] == ["PRUNED"]


def test_save_and_restore_keep_every_study_the_live_trials_and_the_held_results(tmp_path: Path) -> None:
    s = _family_searcher({"a": 2, "b": 2})
    for i in range(3):
        s.suggest(f"t{i}")  # a: t0, t2 (its first round); b: t1
    s.on_trial_complete("t0", {"val_metric": 0.7, "epoch": 3})  # held until a's round ends
    s.save(str(tmp_path / "state.pkl"))
    restored = _family_searcher({"a": 2, "b": 2})
    restored.restore(str(tmp_path / "state.pkl"))
    assert restored.live_trials() == {"a": 1, "b": 1} == s.live_trials()
    restored.on_trial_complete("t2", {"val_metric": 0.3, "epoch": 3})  # a trial from before the restore ends the round
    assert [t.value for t in restored.study_searcher("a")._ot_study.get_trials(deepcopy=False)] == [0.7, 0.3]
    assert restored.suggest("t3")[FAMILY_KEY] == "b" and restored.suggest("t4") == Searcher.FINISHED


def _run_rounds(order: list[str], round_size: int, max_concurrent: int, rounds_in_flight: int = 1,
                budget: int = 6) -> list[dict]:
    """Drive one family's searcher: trials end in `order`'s sense (scores fixed per trial number,
    arrival order as given); returns every proposal."""
    s = _family_searcher({"a": budget}, max_concurrent=max_concurrent, round_size=round_size,
                         rounds_in_flight=rounds_in_flight)
    proposals, live, n = [], {}, 0
    while True:
        got = s.suggest(f"t{n}")
        if isinstance(got, dict):
            proposals.append(got)
            live[f"t{n}"] = got
            n += 1
            continue
        if got == Searcher.FINISHED and not live:
            return proposals
        # no proposal now: one live trial ends, the first or the last by `order`
        trial_id = sorted(live)[0 if order[len(proposals) % len(order)] == "first" else -1]
        config = live.pop(trial_id)
        s.on_trial_complete(trial_id, {"val_metric": (config[TRIAL_NUMBER_KEY] * 7919) % 13 / 13, "epoch": 3})


def test_proposals_do_not_depend_on_arrival_order_or_concurrency() -> None:
    # The same round size proposes the same configurations whichever trial ends first and however
    # many run at once: results are told per round, in trial-number order.
    runs = [_run_rounds(order, 3, cap) for order in (["first"], ["last"], ["first", "last"]) for cap in (1, 2, 3)]
    assert all(r == runs[0] for r in runs[1:]) and len(runs[0]) == 6


def test_rounds_in_flight_propose_the_same_whatever_ends_first_and_however_many_run() -> None:
    # Two rounds in flight: round k is proposed from rounds 0..k-2, whenever their trials ended.
    orders = (["first"], ["last"], ["first", "last"], ["last", "last", "first"])
    runs = [_run_rounds(order, 2, cap, rounds_in_flight=2, budget=10) for order in orders for cap in (1, 2, 3, 4)]
    assert all(r == runs[0] for r in runs[1:]) and len(runs[0]) == 10
    # TPE learned one round later than with one round in flight, so from round 1 on it proposed otherwise
    one = _run_rounds(["first"], 2, 2, rounds_in_flight=1, budget=10)
    assert one[:2] == runs[0][:2] and one[2:] != runs[0][2:]


def test_tune_may_start_every_round_in_flight_at_once() -> None:
    from pipeline.sweep.plans import start_limit

    def limit(**kw: int) -> int:  # an autoscaling cluster: only the families' caps count, no Ray asked
        return start_limit(SearchParams(num_samples=12, autoscaling=True, **kw), [object(), object()])
    assert limit(round_size=2, max_concurrent=8) == 4  # one round of 2 per family
    assert limit(round_size=2, max_concurrent=8, rounds_in_flight=3) == 12
    assert limit(round_size=2, max_concurrent=5, rounds_in_flight=3) == 10  # the cap still holds


def _states(s: FamilySearcher) -> list[str]:
    return [t.state.name for t in s.study_searcher("a")._ot_study.get_trials(deepcopy=False)]


def test_a_round_is_told_only_once_the_rounds_after_it_in_flight_are_proposed() -> None:
    s = _family_searcher({"a": 6}, max_concurrent=4, round_size=2, rounds_in_flight=2)
    assert all(isinstance(s.suggest(f"t{i}"), dict) for i in range(3))  # round 0 and half of round 1, none ended
    for trial in ("t0", "t1"):
        s.on_trial_complete(trial, {"val_metric": 0.5, "epoch": 3})
    assert _states(s) == ["RUNNING"] * 3  # round 0 ended, but round 1 is not all proposed: held
    assert s.live_trials() == {"a": 1}
    assert isinstance(s.suggest("t3"), dict)  # round 1's last proposal, from nothing told ...
    assert _states(s) == ["COMPLETE"] * 2 + ["RUNNING"] * 2  # ... and then round 0 is told
    assert s.suggest("t4")[TRIAL_NUMBER_KEY] == 4 and isinstance(s.suggest("t5"), dict)  # round 2, from round 0
    assert s.suggest("t6") == Searcher.FINISHED
    s.on_trial_complete("t5", {"val_metric": 0.9, "epoch": 3})  # round 2 ends before round 1: held
    s.on_trial_complete("t4", {"val_metric": 0.8, "epoch": 1})
    assert _states(s)[4:] == ["RUNNING"] * 2
    s.on_trial_complete("t2", {"val_metric": 0.1, "epoch": 3})
    assert not s.finished("a")  # every trial proposed, round 2 ended, but round 1 (t3) still runs
    s.on_trial_complete("t3", {"val_metric": 0.2, "epoch": 3})  # round 1 ends: it and the held round 2 are told
    assert _states(s) == ["COMPLETE"] * 4 + ["PRUNED", "COMPLETE"]
    assert s.finished("a") and not s.finished("b")  # its study will not change again; b is no family of it


def test_early_records_pickle_inert_for_tuner_restore() -> None:
    """Tune pickles the run config, this callback in it, for Tuner.restore: what comes back holds
    no thread pool, no searcher and no build function, and builds nothing."""
    s = _family_searcher({"a": 1}, round_size=1)
    built: list[str] = []
    callback = EarlyRecords(lambda key, outcomes: built.append(key) or {}, {"a": 1}, workers=2)
    callback.bind(s)
    restored = pickle.loads(pickle.dumps(callback))
    assert restored._searcher is None and restored.futures == {}
    restored.on_step_end(0, [])
    assert built == [] and restored.futures == {}


def test_a_searcher_saved_before_rounds_in_flight_restores_with_one(tmp_path: Path) -> None:
    import pickle

    s = _family_searcher({"a": 4})
    s.suggest("t0")
    state = s.__dict__.copy()
    for name in ("_in_flight", "_round_of", "_seconds"):  # what an experiment saved by an earlier version holds
        del state[name]
    old = FamilySearcher.__new__(FamilySearcher)
    old.__dict__.update(state)
    restored = pickle.loads(pickle.dumps(old))
    assert restored._in_flight == 1 and restored._seconds == {("a", 0): []}  # no run time known: turns
    assert isinstance(restored.suggest("t1"), dict) and restored.suggest("t2") is None
    for trial in ("t0", "t1"):  # trials with no round recorded belong to the round in flight
        restored.on_trial_complete(trial, {"val_metric": 0.5, "epoch": 3})
    assert isinstance(restored.suggest("t2"), dict)


def _ray_workers() -> list[str]:
    """The Ray worker processes under this process, starting (default_worker.py) or named (ray::...)."""
    import psutil

    names = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = child.cmdline()
            if line and (line[0].startswith("ray::") and "Agent" not in line[0]
                         or any(arg.endswith("default_worker.py") for arg in line[1:3])):
                names.append(line[0])
    return names


@pytest.mark.slow
def test_a_local_session_starts_no_worker_that_no_trial_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """ray_session's local instance prestarts no idle workers: Ray would start one per CPU for the
    first driver, and the trials, actors with processes of their own, would not use them. With one
    actor running on a 2-CPU instance, its process is the only worker (with Ray's default, an idle one too)."""
    from tests.shared_ray import held_ray

    class _Trial:  # an actor, as a Tune trial is (local: pickled by value, Ray's workers cannot import tests)
        def pid(self) -> int:
            return os.getpid()

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with held_ray(), ray_session():
        assert ray.cluster_resources()["CPU"] >= 2
        trial = ray.remote(num_cpus=1)(_Trial).remote()
        assert ray.get(trial.pid.remote()) != os.getpid()
        assert _ray_workers() == ["ray::_Trial"]


@pytest.mark.slow
def test_trial_slots_count_what_the_cluster_runs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray.init(address="local", num_cpus=6, num_gpus=2, log_to_driver=False, **local_options(dashboard=False))
    try:
        assert trial_slots([Resources(cpu=1)]) == 6
        assert trial_slots([Resources(cpu=1, gpu=0.25)]) == 6  # 8 GPU shares, but 6 CPUs
        assert trial_slots([Resources(cpu=2, gpu=1)]) == 2
        assert trial_slots([Resources(cpu=2, gpu=1), Resources(cpu=1)]) == 6  # the family that packs best
        assert trial_slots([Resources(cpu=1, workers=3)]) == 2  # a data-parallel trial holds 3 CPUs
        assert trial_slots([Resources(cpu=4, gpu=4)]) == 1  # never 0: check_fits refuses that one
    finally:
        ray.shutdown()


def test_pending_trials_sets_tune_s_limit_for_the_run_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PENDING_TRIALS_ENV, raising=False)
    monkeypatch.delenv(SNAPSHOT_WARNING_ENV, raising=False)
    with pending_trials(12):
        assert os.environ[PENDING_TRIALS_ENV] == "12" and os.environ[SNAPSHOT_WARNING_ENV] == "0"
    assert PENDING_TRIALS_ENV not in os.environ and SNAPSHOT_WARNING_ENV not in os.environ
    with pending_trials(0):
        assert os.environ[PENDING_TRIALS_ENV] == "1"
    monkeypatch.setenv(PENDING_TRIALS_ENV, "5")  # the user's own settings win, and stay
    monkeypatch.setenv(SNAPSHOT_WARNING_ENV, "3")
    with pending_trials(12):
        assert os.environ[PENDING_TRIALS_ENV] == "5" and os.environ[SNAPSHOT_WARNING_ENV] == "3"
    assert os.environ[PENDING_TRIALS_ENV] == "5" and os.environ[SNAPSHOT_WARNING_ENV] == "3"


def test_dvc_yaml_lists_the_code_the_staleness_digest_covers() -> None:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for stage, code in (("search", staleness.SEARCH_CODE), ("final", staleness.FINAL_CODE)):
        deps = [d for d in stages[stage]["do"]["deps"] if d.startswith("pipeline/")]
        assert sorted(d.removeprefix("pipeline/") for d in deps) == sorted(code), stage


def test_code_digest_follows_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "a.py").write_text("x = 1\n")
    (tmp_path / "train.py").write_text("y = 2\n")
    monkeypatch.setattr(staleness, "PACKAGE", tmp_path)
    before = staleness.code_digest(("sweep", "train.py"))
    (tmp_path / "sweep" / "a.py").write_text("x = 3\n")
    after = staleness.code_digest(("sweep", "train.py"))
    assert before != after and staleness.code_digest(("sweep", "train.py")) == after
    digest = staleness.inputs_digest("fp", after)
    assert staleness.is_current({staleness.DIGEST_KEY: digest}, digest)
    assert not staleness.is_current({staleness.DIGEST_KEY: digest}, staleness.inputs_digest("other", after))
    assert not staleness.is_current(None, digest) and not staleness.is_current({}, digest)


def _spans(client: MlflowClient, parent: str) -> list[tuple[int, int]]:
    exp = client.get_run(parent).info.experiment_id
    runs = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'")
    return [(r.info.start_time, r.info.end_time) for r in runs]


@pytest.mark.slow
def test_two_families_search_at_once_and_a_rerun_skips_the_unchanged(project: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      local_ray: None) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "x"), build_xor("x", XorParams(kind="xor", n_train=64, n_test=16, seed=5)))
    p = SearchParams(num_samples=3, max_concurrent=1, epochs=2, n_startup_trials=1)
    families = ["cfc", "lstm_dt"]
    records = search_many(project, "x", families, p)
    client = MlflowClient(tracking.tracking_uri(project))
    for family in families:
        r = records[family]
        assert r["status"] == "ok" and r["n_trials"] == 3 and r["searched_with"] == families
        assert json.loads(search_result_path(project, "x", family).read_text()) == r
        assert all(FAMILY_KEY not in t["config"] for t in r["trials"])
        assert sum(r["optuna_states"].values()) == 3  # its own study: its own three trials only
        assert max(r["asha_rungs"].values(), default=0) <= 3
        parent = client.get_run(r["mlflow_parent_run_id"])
        assert parent.data.tags["family"] == family and parent.info.status == "FINISHED"
        children = client.search_runs([parent.info.experiment_id],
                                      f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert len(children) == 3 and {c.data.tags["family"] for c in children} == {family}
    assert records["cfc"]["optuna_study"] != records["lstm_dt"]["optuna_study"]
    assert records["cfc"]["ray_experiment_path"] == records["lstm_dt"]["ray_experiment_path"]  # one Tune run
    cfc, lstm = (_spans(client, records[f]["mlflow_parent_run_id"]) for f in families)
    # One trial of each family at a time (max_concurrent 1) on two CPUs: they must have overlapped.
    assert any(a0 < b1 and b0 < a1 for a0, a1 in cfc for b0, b1 in lstm), (cfc, lstm)

    before = search_result_path(project, "x", "cfc").read_bytes()
    space = project / "search_spaces" / "lstm_dt.yaml"
    space.write_text(space.read_text() + "\n# changed\n")
    again = search_many(project, "x", families, p, only_stale=True)
    assert again["cfc"].get("up_to_date") and not again["lstm_dt"].get("up_to_date")
    assert search_result_path(project, "x", "cfc").read_bytes() == before
    assert again["lstm_dt"]["searched_with"] == ["lstm_dt"]

    f = FinalParams(seeds=[1, 2], epochs=2, patience=2, lr_factors=[])
    finals = final_many(project, "x", families, f)
    spans = {fam: _spans(client, finals[fam]["mlflow_parent_run_id"]) for fam in families}
    assert all(finals[fam]["n_seeds"] == 2 for fam in families)
    assert any(a0 < b1 and b0 < a1 for a0, a1 in spans["cfc"] for b0, b1 in spans["lstm_dt"]), spans
    kept = final_result_path(project, "x", "lstm_dt").read_bytes()
    rerun = final_many(project, "x", families, f, only_stale=True)
    assert rerun["lstm_dt"].get("up_to_date") and final_result_path(project, "x", "lstm_dt").read_bytes() == kept
