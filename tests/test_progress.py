"""Progress of a running stage (pipeline.progress): the estimate on hand-made timings, the plain
lines on a recorded sequence of trial and seed events, the display's choice of form, and the
progress read back from a real MLflow store as `ctsweep status` reads it from another terminal."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.progress import asha, display
from pipeline.progress.estimate import (Range, epoch_time, expected_epochs, expected_total, load_factor,
                                        time_left, time_range)
from pipeline.progress.model import DONE, FAILED, FINAL, RUNNING, SEARCH, STOPPED, Rungs, Snapshot, Unit, Work
from pipeline.progress.read import ENDED_TAG, mark_parent, snapshot
from pipeline.progress.render import plain_line, span_text, unit_text
from pipeline.stores import tracking


# ----------------------------------------------------------------------------------- the estimate


def _simulated(t: int, trials: int = 8, slots: int = 2, epochs: int = 4, budget: int = 8,
               start_up: float = 0.0) -> Snapshot:
    """`trials` trials of `epochs` one-second epochs (of a `budget` of 8: ASHA stops them at 4),
    `slots` at a time from t = 0, each slot taking the next trial as soon as one ends; the stage
    started `start_up` seconds before the first trial."""
    work = []
    for i in range(trials):
        start = (i // slots) * epochs
        if start > t or (start == t and i >= slots * (t // epochs) + slots):
            continue
        trained = min(epochs, t - start)
        work.append(Work(i, STOPPED if trained == epochs else RUNNING, trained, 1.0 if trained else None, 0.5,
                         float(start)))
    return Snapshot(SEARCH, -start_up, float(t), (Unit("d", "f", trials, budget, "max", 2, 4, tuple(work)),))


def test_the_estimate_follows_a_hand_made_timing_sequence() -> None:
    # 8 trials of 4 s on 2 slots: 16 s in all
    assert time_left(_simulated(0)) is None  # no epoch trained yet: no estimate
    # Before any trial ended, a trial is expected to run its whole budget (8 epochs): 2 x too long
    # at t = 2 (running 2 of 8 epochs each: 6 + 6 left, 6 trials x 8 queued = 60 epoch-s at 2 per s).
    assert time_left(_simulated(2)) == pytest.approx((6 + 6 + 6 * 8) / 2)
    # Once trials have ended, the mean of their epochs (4) replaces the budget: exact from then on.
    for t in range(4, 16):
        assert time_left(_simulated(t)) == pytest.approx(16 - t), t
        # the stage's start-up before the first trial (Ray, the data) does not slow the pace
        assert time_left(_simulated(t, start_up=30.0)) == pytest.approx(16 - t), t
    assert time_left(_simulated(16)) == 0


def test_the_estimate_waits_for_a_unit_without_timings_and_uses_the_stage_s_share() -> None:
    timed = Unit("d", "a", 4, 10, work=(Work(0, STOPPED, 5, 2.0), Work(1, RUNNING, 1, 2.0)))
    untimed = Unit("d", "b", 4, 20, work=(Work(0, RUNNING, 0),))
    snap = Snapshot(SEARCH, 0.0, 12.0, (timed, untimed))
    assert time_left(snap) is None  # b has work left and no epoch time
    # A final unit falls back to its search's epoch time; it has no ended seed, so the stage's
    # ended work's share of its budget (5 of 10) scales its own budget: 10 epochs a seed.
    prior = Unit("d", "b", 4, 20, work=(Work(0, RUNNING, 0),), prior_epoch_s=1.0)
    assert expected_epochs(prior, 0.5) == 10 and expected_epochs(timed, 0.5) == 5
    left = time_left(Snapshot(SEARCH, 0.0, 12.0, (timed, prior)))
    # a: 2 queued x 5 + (5 - 1) running = 14 epochs x 2 s; b: 3 x 10 + 10 = 40 x 1 s; pace 12 / 12
    assert left == pytest.approx((14 * 2 + 40 * 1) / (12 / 12))


def test_a_final_seed_still_improving_is_counted_on_for_a_patience_more() -> None:
    ended = (Work(0, DONE, 40, 1.0), Work(1, DONE, 50, 1.0))
    unit = Unit("d", "f", 4, 100, work=ended, patience=15)
    # ended seeds that got at least as far trained 45 on average; a seed at 30 with no progress for
    # 10 epochs stops at 35 at the soonest, so 45 stands
    assert expected_total(unit, 30, None, stale=10) == 45
    # one at 38 that progressed at its last epoch trains at least 38 + 15
    assert expected_total(unit, 38, None, stale=0) == 53
    assert expected_total(unit, 38, None, stale=None) == 45  # no count logged: the ended seeds alone
    assert expected_total(replace(unit, patience=None), 38, None, stale=0) == 45
    # never past the budget; a unit none of whose seeds ended: the stage's share or the floor
    assert expected_total(unit, 95, None, stale=0) == 100
    alone = Unit("d", "f", 4, 100, work=(Work(0, RUNNING, 30, 1.0, stale=2),), patience=15)
    assert expected_total(alone, 30, 0.3, stale=2) == 43
    # the floor reaches the seeds not started too (the mean over the started ones)
    assert expected_epochs(alone, 0.3) == 43


def _final(work: tuple[Work, ...], total: int = 4, most: int | None = None, prior_epochs: float | None = 25.0,
           prior_epoch_s: float | None = 1.0) -> Unit:
    """A final unit of a 100-epoch budget and a patience of 15 whose search measured a seed's stop
    at `prior_epochs` and its epoch at `prior_epoch_s` seconds."""
    return Unit("d", "f", total, 100, work=work, patience=15, prior_epochs=prior_epochs, prior_epoch_s=prior_epoch_s,
                most=most)


def test_before_any_seed_ended_the_range_spans_the_patience_case_and_the_budget_case() -> None:
    # two seeds at epoch 10 (1 s an epoch, both improving at their last epoch), two queued, and
    # the race may add two more; 20 epoch-seconds in 10 s: a pace of 2
    running = (Work(0, RUNNING, 10, 1.0, started=0.0, stale=0), Work(1, RUNNING, 10, 1.0, started=0.0, stale=0))
    snap = Snapshot(FINAL, 0.0, 10.0, (_final(running, most=6),))
    span = time_range(snap)
    assert span is not None
    # low: the search's measure (25 epochs) for all four, no race seed: 15 + 15 + 2 x 25 = 80 epoch-s
    assert span.low == pytest.approx(80 / 2)
    # high: all four to the budget and the race's two more: 90 + 90 + 4 x 100 = 580 epoch-s
    assert span.high == pytest.approx(580 / 2)
    assert span.single is None and span_text(span) == "40 s-5 min"
    # without the race, the high end has the four seeds only
    assert time_range(replace(snap, units=(_final(running),))).high == pytest.approx(380 / 2)


def test_the_search_s_measure_replaces_the_budget_before_the_first_seed_ends() -> None:
    running = (Work(0, RUNNING, 10, 1.0, started=0.0), Work(1, RUNNING, 10, 1.0, started=0.0))
    measured, unmeasured = _final(running), _final(running, prior_epochs=None)
    # the expectation: each seed to the search's 25 epochs (15 + 15 + 2 x 25), not the budget
    assert time_left(Snapshot(FINAL, 0.0, 10.0, (measured,))) == pytest.approx(80 / 2)
    assert time_left(Snapshot(FINAL, 0.0, 10.0, (unmeasured,))) == pytest.approx((90 + 90 + 200) / 2)
    # a seed already past the search's measure is not counted as stopping there
    assert expected_total(measured, 30, None) == 100
    # a family not timed yet takes its search's epoch time scaled by how much slower the timed
    # families train here than their searches said (20 epochs at 3 s where the search said 1 s)
    slow = _final((Work(0, RUNNING, 20, 3.0, started=0.0),))
    waiting = _final((), prior_epoch_s=0.5)
    assert load_factor(Snapshot(FINAL, 0.0, 10.0, (slow, waiting))) == pytest.approx(3.0)
    assert epoch_time(waiting, 3.0) == pytest.approx(1.5)


def test_the_range_narrows_as_seeds_end() -> None:
    before = (Work(0, RUNNING, 20, 1.0, started=0.0, stale=0), Work(1, RUNNING, 20, 1.0, started=0.0, stale=0))
    early = time_range(Snapshot(FINAL, 0.0, 20.0, (_final(before, total=3),)))
    # seed 0 ended by patience at 40, seed 1 is at 40 and still improving, seed 2 waits
    after = (Work(0, DONE, 40, 1.0, started=0.0), Work(1, RUNNING, 40, 1.0, started=0.0, stale=0))
    late = time_range(Snapshot(FINAL, 0.0, 40.0, (_final(after, total=3),)))
    assert early is not None and late is not None
    # the ended seed is known exactly; its 40 epochs are the low end of the one queued (not the
    # search's 25), and seed 1 at 40 stops no sooner than patience lets it (55)
    assert late.low == pytest.approx((15 + 40) / 2)
    assert late.high == pytest.approx((60 + 100) / 2)
    assert late.high / late.low < early.high / early.low


def test_one_figure_when_the_ends_come_together() -> None:
    # the one seed left is in its budget's last epochs: the ends come close, then meet
    work = (Work(0, DONE, 30, 1.0, started=0.0), Work(1, RUNNING, 95, 1.0, started=0.0, stale=12))
    span = time_range(Snapshot(FINAL, 0.0, 62.5, (_final(work, total=2),)))
    assert span is not None
    # low: patience stops seed 1 at 98 (3 more epochs); high: its budget, 5 more; pace 2
    assert (span.low, span.high) == (pytest.approx(1.5), pytest.approx(2.5))
    assert span.single is None  # 1.5 to 2.5 s: still a range
    # at 99 of 100 and improving: patience cannot stop it before its budget, so both ends agree
    close = time_range(Snapshot(FINAL, 0.0, 64.5, (_final((work[0], replace(work[1], epochs=99, stale=0)), total=2),)))
    assert close is not None and close.low == close.high == pytest.approx(0.5)
    assert close.single == pytest.approx(0.5)
    assert close.low <= close.single <= close.high and span_text(close).startswith("about ")
    assert span_text(Range(100.0, 110.0, 105.0)) == "about 1 min 45 s"
    assert span_text(Range(720.0, 1790.0)) == "12-30 min"


def test_a_search_s_range_stops_trials_at_the_next_rung_or_runs_them_to_the_budget() -> None:
    rules = Rungs((5,), 1 / 3, free=2)
    work = (Work(0, DONE, 15, 1.0, started=0.0), Work(1, RUNNING, 10, 1.0, started=0.0),
            Work(2, RUNNING, 2, 1.0, started=5.0))
    unit = Unit("d", "f", 5, 15, "max", 2, 3, work, asha=rules)
    span = time_range(Snapshot(SEARCH, 0.0, 13.5, (unit,)))  # 27 epoch-seconds in 13.5 s: pace 2
    assert span is not None
    # low: trial 1 (first round) runs its 15 (5 left), trial 2 stops at the rung (3), the two
    # queued at the rung (5 each); high: 5 + 13 + 2 x 15
    assert span.low == pytest.approx((5 + 3 + 10) / 2)
    assert span.high == pytest.approx((5 + 13 + 30) / 2)


def test_a_search_s_estimate_counts_epochs_by_asha_s_rungs() -> None:
    # 6 trials of a 15-epoch budget, one rung at 5 keeping 1 in 3; trials 0 and 1 (the first round)
    # are never stopped. Every epoch takes 1 s; two slots, so 2 epoch-seconds a second.
    rules = Rungs((5,), 1 / 3, free=2)
    work = (Work(0, DONE, 15, 1.0, started=0.0), Work(1, DONE, 15, 1.0, started=0.0),
            Work(2, STOPPED, 5, 1.0, started=15.0), Work(3, RUNNING, 2, 1.0, started=16.5))
    unit = Unit("d", "f", 6, 15, "max", 2, 3, work, asha=rules)
    # one trial decided at the rung, stopped: p = (0 + 1) / (1 + 3) = 1/4
    assert asha.survival(Snapshot(SEARCH, 0.0, 18.5, (unit,))) == {5: 0.25}
    # trial 3 (2 epochs): 3 more to the rung, then 10 with chance 1/4 -> 5.5 left; the 2 queued: 5 + 2.5 each
    assert asha.expected_total(rules, 15, 2, {5: 0.25}) == pytest.approx(7.5)
    done = 15 + 15 + 5 + 2  # epoch-seconds in 18.5 s
    assert time_left(Snapshot(SEARCH, 0.0, 18.5, (unit,))) == pytest.approx((5.5 + 2 * 7.5) / (done / 18.5))
    # the same trials as the first round's: never stopped, so the budget for each
    first = Unit("d", "f", 6, 15, "max", 2, 3, work, asha=Rungs((5,), 1 / 3, free=6))
    assert time_left(Snapshot(SEARCH, 0.0, 18.5, (first,))) == pytest.approx((13 + 2 * 15) / (done / 18.5))
    # past the rung a trial has survived it: the budget
    assert asha.expected_total(rules, 15, 7, {5: 0.25}) == 15
    # trials not started are proposals: the reference's (trial 0) epoch time is left out once one is timed
    slow_reference = (replace(work[0], epoch_seconds=4.0), *work[1:])
    assert epoch_time(replace(unit, work=slow_reference)) == 1.0
    assert epoch_time(replace(unit, work=slow_reference[:1])) == 4.0  # no proposal timed yet
    assert epoch_time(replace(unit, work=slow_reference, asha=None)) == pytest.approx(7 / 4)  # a final unit: all
    # two rungs (5, 15 of 45): to 5, then 10 more with p, then 30 more with p * p2
    assert asha.expected_total(Rungs((5, 15), 1 / 3), 45, 0, {5: 0.5, 15: 0.2}) == pytest.approx(5 + 5 + 0.1 * 30)


@pytest.mark.parametrize("epochs, grace, factor", [(15, 5, 3), (50, 5, 3), (200, 1, 2), (10, 3, 2.5), (15, 15, 3),
                                                    (100, 10, 4), (4, 2, 2)])
def test_the_rungs_the_estimate_reads_are_ray_s_own(epochs: int, grace: int, factor: float) -> None:
    from ray.tune.schedulers import ASHAScheduler

    from pipeline.config import SearchParams
    from pipeline.sweep.tuner import asha_rules

    p = SearchParams(epochs=epochs, round_size=3, rounds_in_flight=2, repeats=2,
                     asha={"grace_period": grace, "reduction_factor": factor})
    ray_s = ASHAScheduler(time_attr="epoch", max_t=epochs, grace_period=grace, reduction_factor=factor, brackets=1)
    milestones = sorted(math.ceil(m) for m, _ in ray_s._brackets[0]._rungs if m < epochs)  # Ray's bookkeeping
    assert asha_rules(p) == Rungs(tuple(milestones), 1 / factor, free=6, repeats=2)


# ---------------------------------------------------------------------------------- the plain lines


def _events() -> list[tuple[float, Snapshot]]:
    """A recorded sequence of a two-family search: (seconds since the start, snapshot)."""
    def snap(t: float, cfc: tuple[Work, ...], ncde: tuple[Work, ...]) -> tuple[float, Snapshot]:
        return t, Snapshot(SEARCH, 100.0, 100.0 + t, (Unit("xor", "cfc", 2, 4, "max", 1, 2, cfc),
                                                       Unit("xor", "ncde", 2, 4, "max", 1, 2, ncde)))
    return [
        snap(5, (Work(0, RUNNING, 0),), ()),
        snap(15, (Work(0, RUNNING, 1, 1.0, 0.6),), ()),
        snap(25, (Work(0, RUNNING, 2, 1.0, 0.7),), (Work(0, RUNNING, 1, 3.0, 0.5),)),  # ncde starts
        snap(35, (Work(0, RUNNING, 3, 1.0, 0.7),), (Work(0, RUNNING, 1, 3.0, 0.5),)),
        snap(90, (Work(0, DONE, 4, 1.0, 0.75), Work(1, RUNNING, 2, 1.0, 0.8)), (Work(0, FAILED, 1, 3.0, 0.5),)),
        snap(95, (Work(0, DONE, 4, 1.0, 0.75), Work(1, STOPPED, 2, 1.0, 0.8)),
             (Work(0, FAILED, 1, 3.0, 0.5), Work(1, RUNNING, 2, 3.0, 0.55))),  # cfc ends
    ]


def test_plain_lines_go_out_at_each_change_of_family_and_otherwise_at_the_cadence() -> None:
    lines: list[str] = []
    clock = iter(t for t, _ in _events())
    plain = display.Plain(lines.append, every_s=60.0, clock=lambda: next(clock))
    for _, snap in _events():
        plain.show(snap)
    # 5: the first; 15, 35: nothing new within the minute; 25: ncde starts; 90: nothing new, but
    # 65 s since the line at 25; 95: cfc ended
    assert [line.split(" · ")[1].split(" elapsed")[0] for line in lines] == ["5 s", "25 s", "1 min 30 s", "1 min 35 s"]
    assert lines[0] == ("ctsweep search: 0 of 4 trials ended, 1 running · 5 s elapsed, time left: estimated after "
                        "the first epochs · xor/cfc 0/2 (1 running), round 1/2 · xor/ncde 0/2")
    assert lines[-1].startswith("ctsweep search: 3 of 4 trials ended, 1 running · 1 min 35 s elapsed, about ")
    assert lines[-1].endswith(" · xor/cfc 2/2 (1 stopped early), best 0.8 · xor/ncde 1/2 (1 running, 1 failed), "
                              "best 0.55, round 2/2")
    assert all("\n" not in line for line in lines)


def test_a_final_stage_line_names_the_running_seed_and_its_epoch() -> None:
    unit = Unit("xor", "cfc", 5, 30, "max", work=(Work(-1, DONE), Work(0, DONE, 12, 0.5, 0.9),
                                                  Work(1, RUNNING, 7, 0.5, 0.8), Work(2, FAILED, 1, 0.5)))
    assert unit_text(unit, FINAL) == "xor/cfc 3/5 (seed 1 at epoch 7, 1 failed), best 0.9"
    line = plain_line(Snapshot(FINAL, 0.0, 30.0, (unit,)))
    # seed 1 may stop where seed 0 did (12) or run its 30, the queued one the same: 8.5 or 26.5
    # epoch-seconds at 10 / 30 a second; the failed one counts for neither
    assert line.startswith("ctsweep final: 3 of 5 seeds ended, 1 running · 30 s elapsed, 26 s-2 min left · ")


# ------------------------------------------------------------------------------------- the display


@pytest.mark.parametrize(("env", "width", "expected"), [
    ({}, 120, "live"), ({"NO_COLOR": "1"}, 120, "plain"), ({"TERM": "dumb"}, 120, "plain"), ({}, 60, "plain"),
    ({display.ENV: "off"}, 120, "off"), ({display.ENV: "plain"}, 120, "plain"), ({display.ENV: "bogus"}, 120, "plain"),
])
def test_the_form_follows_the_terminal_and_the_environment(env: dict[str, str], width: int, expected: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("NO_COLOR", display.ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", str(width))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert display.mode(_Terminal()) == expected
    assert display.mode(io.StringIO()) == ("off" if expected == "off" else "plain")  # not a terminal


def test_a_bad_progress_setting_is_one_warning_line_in_ctsweep_s_form(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 73, item 4: it was a line in Python's logging format ("pipeline.progress.display:
    WARNING: ..."), unlike every other warning."""
    monkeypatch.setenv(display.ENV, "bogus")
    assert display.mode(io.StringIO()) == "plain"
    assert capsys.readouterr().err.splitlines() == [
        "ctsweep: warning: CTSWEEP_PROGRESS='bogus' is not one of auto, live, plain, off: showing plain lines"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_table_lets_an_error_line_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(display.ENV, "live")
    out = _Terminal()
    with display.shown(f"sqlite:///{tmp_path / 'mlflow.db'}", [], SEARCH, stream=out):
        print("ctsweep: error: something a user must see", file=sys.stderr)
    assert "ctsweep: error: something a user must see" in out.getvalue()


# ------------------------------------------------------------------------- read from a real store


def _store(tmp_path: Path) -> tuple[tracking.MlflowClient, str, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ensure_store(uri)
    client = tracking.MlflowClient(uri)
    exp = client.create_experiment("ctsweep/xor")
    return client, uri, exp


def _trial(client: tracking.MlflowClient, exp: str, parent: str, number: int, epochs: int, best: float,
           end: str | None = None) -> str:
    run = tracking.start_run(client, exp, f"trial-{number}/search/cfc",
                             {"stage": "search", "family": "cfc", "dataset": "xor", "optuna_trial_number": number},
                             parent_run_id=parent)
    for e in range(1, epochs + 1):
        tracking.log_metrics(client, run, {"epoch": e, "epoch_seconds": 0.5, "best_val_metric": best}, step=e)
    if end == "finished":
        tracking.finish(client, run, outcome=tracking.STOPPED_EARLY)
    elif end == "failed":
        tracking.finish(client, run, RuntimeError("NaN loss"), outcome=tracking.FAILED_OUTCOME)
    elif end:
        tracking.set_tags(client, run, {ENDED_TAG: end})
    return run


def test_progress_is_read_back_from_the_mlflow_store(tmp_path: Path) -> None:
    import time

    client, _, exp = _store(tmp_path)
    started = time.time()
    parent = tracking.start_run(client, exp, "search/cfc", {"stage": "search", "family": "cfc", "dataset": "xor"})
    mark_parent(client, parent, started, total=6, max_epochs=4, mode="max", round_size=2, rounds=3,
                asha=Rungs((2,), 0.5, free=2))
    _trial(client, exp, parent, 0, 4, 0.9, "finished")      # closed by its record: stopped early
    _trial(client, exp, parent, 1, 2, 0.95, STOPPED)        # Tune ended it; its run still RUNNING
    _trial(client, exp, parent, 2, 1, 0.4, "failed")
    _trial(client, exp, parent, 3, 3, 0.7)                  # running
    snap = snapshot(client, [exp], SEARCH, since=started)
    assert snap is not None
    [unit] = snap.units
    assert (unit.name, unit.total, unit.ended, len(unit.running), unit.count(STOPPED), unit.count(FAILED)) == (
        "xor/cfc", 6, 3, 1, 2, 1)
    assert unit.best == 0.95 and unit.round == (2, 3) and unit.asha == Rungs((2,), 0.5, free=2)
    assert [w.stale for w in unit.work] == [None] * 4  # none logged here
    assert snapshot(client, [exp], SEARCH, since=started + 60) is None  # another attempt's parents only
    assert snapshot(client, [exp], FINAL) is None
    tracking.finish(client, parent)
    assert snapshot(client, [exp], SEARCH) is None  # closed: not running


def test_a_final_unit_s_patience_and_a_seed_s_epochs_without_progress_are_read_back(tmp_path: Path) -> None:
    import time

    client, _, exp = _store(tmp_path)
    started = time.time()
    parent = tracking.start_run(client, exp, "final/cfc", {"stage": "final", "family": "cfc", "dataset": "xor"})
    mark_parent(client, parent, started, total=3, max_epochs=10, mode="max", patience=4, prior_epochs=7.5, most=5)
    seed = tracking.start_run(client, exp, "seed-0/final/cfc", {"stage": "final", "family": "cfc", "dataset": "xor",
                                                                  "seed": 0}, parent_run_id=parent)
    tracking.log_metrics(client, seed, {"epoch": 3, "epoch_seconds": 0.5, "stale_epochs": 2}, step=3)
    snap = snapshot(client, [exp], FINAL, since=started)
    assert snap is not None
    [unit] = snap.units
    assert unit.patience == 4 and [(w.label, w.epochs, w.stale) for w in unit.work] == [(0, 3, 2)]
    assert (unit.prior_epochs, unit.most) == (7.5, 5)


def test_a_seed_s_epochs_by_patience_come_from_the_chosen_configuration_s_search_trials() -> None:
    from pipeline.final.plans import patience_epochs

    chosen, other = {"lr": 0.01}, {"lr": 0.1}
    searched = {"best_config": chosen, "trials": [
        {"config": chosen, "best_epoch": 6, "epochs": 15, "status": "ok"},
        {"config": other, "best_epoch": 2, "epochs": 5, "status": "ok"},  # ASHA's stop at the rung: not read
        {"config": chosen, "best_epoch": None, "epochs": 0, "status": "failed"}]}
    assert patience_epochs(searched, 15, 100) == 21
    assert patience_epochs(searched, 15, 18) == 18  # within the final's budget
    assert patience_epochs(searched, None, 100) is None
    assert patience_epochs({**searched, "trials": searched["trials"][1:]}, 15, 100) is None


def test_a_seed_ray_started_again_counts_once_at_its_latest_attempt(tmp_path: Path) -> None:
    import time

    client, _, exp = _store(tmp_path)
    started = time.time()
    parent = tracking.start_run(client, exp, "final/cfc", {"stage": "final", "family": "cfc", "dataset": "xor"})
    mark_parent(client, parent, started, total=3, max_epochs=10, mode="max")

    def seed(n: int, epoch: int) -> str:
        run = tracking.start_run(client, exp, f"seed-{n}/final/cfc", {"stage": "final", "family": "cfc",
                                                                       "dataset": "xor", "seed": n,
                                                                       "search_repeat": 0}, parent_run_id=parent)
        tracking.log_metrics(client, run, {"epoch": epoch, "epoch_seconds": 0.5}, step=epoch)
        time.sleep(0.01)  # distinct start times
        return run

    abandoned = seed(0, 7)  # its worker died: the run stays RUNNING, Ray runs the seed again
    seed(0, 2)
    seed(1, 4)
    snap = snapshot(client, [exp], FINAL, since=started)
    assert snap is not None
    [unit] = snap.units
    assert [(w.label, w.state, w.epochs, w.retried) for w in unit.work] == [(0, RUNNING, 2, True),
                                                                           (1, RUNNING, 4, False)]
    assert len(unit.running) == 2
    from pipeline.progress.render import unit_text

    assert unit_text(unit, FINAL) == "xor/cfc 0/3 (seed 0 at epoch 2 (retried), seed 1 at epoch 4)"
    tracking.finish(client, abandoned)  # a finished earlier run is a result, not superseded: never dropped
    [unit] = snapshot(client, [exp], FINAL, since=started).units
    assert sorted((w.label, w.state) for w in unit.work) == [(0, DONE), (0, RUNNING), (1, RUNNING)]


def test_status_from_another_terminal_shows_a_live_run_and_skips_a_dead_driver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from pipeline.reporting.status import status

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client, _, exp = _store(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    parent = tracking.start_run(client, exp, "final/cfc", {"stage": "final", "family": "cfc", "dataset": "xor"})
    mark_parent(client, parent, time.time(), total=3, max_epochs=10, mode="max", kept=1)
    tracking.set_tags(client, parent, {"progress_pid": pid})  # its driver has exited
    with pytest.raises(Exception, match="metrics.json"):  # nothing running, no report: the usual error
        status(tmp_path)
    tracking.set_tags(client, parent, {"progress_pid": os.getpid()})  # a live driver
    lines, code = status(tmp_path)
    assert code == 0 and len(lines) == 2
    assert lines[0].startswith("ctsweep final: 1 of 3 seeds ended, 0 running · ")
    assert lines[0].endswith(" elapsed, time left: estimated after the first epochs · xor/cfc 1/3")
    assert lines[1] == "ctsweep status: a run is in progress; no report yet"


# ------------------------------------------------------------------ the replay of a finished stage


def test_the_replay_rebuilds_a_finished_search_and_its_exact_estimate(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.commands import progress_replay

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client, _, exp = _store(tmp_path)  # tmp_path/mlflow.db: the project's own store
    t0 = 1_800_000_000.0  # 4 trials of 4 one-second epochs on 2 slots, every one to its budget: 8 s in all
    parent = client.create_run(exp, start_time=int(t0 * 1000), tags={
        "stage": "search", "family": "cfc", "dataset": "xor", tracking.RUN_LEVEL_TAG: tracking.PARENT_LEVEL}).info.run_id
    mark_parent(client, parent, t0, total=4, max_epochs=4, mode="max", round_size=2, rounds=2,
                asha=Rungs((), 0.5, free=4))
    for key, value in {"search.num_samples": 4, "search.epochs": 4, "search.round_size": 2}.items():
        client.log_param(parent, key, value)
    for number in range(4):
        start = t0 + 4 * (number // 2)
        child = client.create_run(exp, start_time=int(start * 1000), tags={
            tracking.PARENT_TAG: parent, tracking.RUN_LEVEL_TAG: tracking.CHILD_LEVEL,
            "optuna_trial_number": str(number)}).info.run_id
        for e in range(1, 5):
            for key, value in {"epoch": e, "epoch_seconds": 1.0, "val_metric": 0.5}.items():
                client.log_metric(child, key, value, timestamp=int((start + e) * 1000), step=e)
        client.set_terminated(child, "FINISHED", end_time=int((start + 4.5) * 1000))
    client.set_terminated(parent, "FINISHED", end_time=int((t0 + 9) * 1000))

    report = progress_replay.replay(tmp_path, SEARCH)
    assert report["wall_s"] == 8.0 and len(report["rows"]) == progress_replay.POINTS - 1
    # at whole seconds every running trial has just logged an epoch, and the estimate is exact
    whole = [r for r in report["rows"] if float(r["elapsed_s"]).is_integer()]
    assert [r["elapsed_s"] for r in whole] == [1, 2, 3, 4, 5, 6, 7]
    assert [r["ratio"] for r in whole] == pytest.approx([1.0] * 7)
    assert report["at_half"]["ratio"] == pytest.approx(1.0) and report["at_half_ended"]["ended"] == 2
    assert "At half the wall time: 1.00; when half the trials had ended: 1.00" in progress_replay.render(report)


def test_the_replay_reads_asha_s_rules_from_the_parameters_of_a_search_from_before_the_tag() -> None:
    from benchmarks.commands.progress_replay import _rules_from_params

    logged = {"search.epochs": "15", "search.round_size": "2", "search.rounds_in_flight": "1", "search.repeats": "1",
              "search.asha": "{'grace_period': 5, 'reduction_factor': 3}"}
    assert _rules_from_params(logged) == Rungs((5,), 1 / 3, free=2, repeats=1)
    assert _rules_from_params({**logged, "search.asha": "not a dict"}) is None


def test_the_replay_counts_epochs_without_progress_by_the_trainer_s_rule() -> None:
    from benchmarks.commands.progress_replay import _stale

    at = [float(t) for t in range(6)]
    scores = list(zip(at, [0.5, 0.6, 0.6, 0.6, 0.7, 0.7]))
    losses = list(zip(at, [1.0, 0.9, 0.8999, 0.5, 0.5, 0.5]))  # 0.8999: less than 0.1 % lower, no progress
    assert [c for _, c in _stale(scores, losses, "max")] == [0, 0, 1, 0, 0, 1]
    assert _stale(scores, losses[:3], "max") == []  # histories that do not line up: no count


@pytest.mark.parametrize("stage", [SEARCH, FINAL])
def test_the_live_table_fits_80_columns_without_cutting_a_family_name(stage: str) -> None:
    from rich.console import Console

    from pipeline.progress.render import table

    work = (Work(0, RUNNING, 71, 1.0), Work(1, RUNNING, 34, 1.0), Work(2, DONE, 50, 1.0, best=0.9286))
    units = tuple(Unit("italy_power_demand", family, 8, 100, work=work, round_size=2 if stage == SEARCH else None,
                       rounds=3 if stage == SEARCH else None) for family in ("cde_fwp_delta", "ode_rnn_tw"))
    console = Console(width=80, file=io.StringIO(), record=True)
    console.print(table(Snapshot(stage, 1000.0, 1600.0, units)))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 80
    for family in ("cde_fwp_delta", "ode_rnn_tw"):
        assert any(f"italy_power_demand/{family} " in line for line in lines), lines
    assert not any("…" in line for line in lines), lines  # no header or cell shortened either


def test_a_run_stopped_by_a_signal_is_stopped_not_failed() -> None:
    from types import SimpleNamespace

    from pipeline.progress.read import _state

    def run(status: str, tags: dict, start_s: float = 100.0) -> SimpleNamespace:
        return SimpleNamespace(data=SimpleNamespace(tags=tags), info=SimpleNamespace(status=status, start_time=start_s * 1000))

    for stage in (SEARCH, FINAL):
        assert _state(run("KILLED", {"interrupted": "SIGINT"}), stage, 90.0) == STOPPED
        assert _state(run("KILLED", {}), stage, 90.0) == STOPPED
        assert _state(run("FAILED", {"interrupted": "SIGTERM"}), stage, 90.0) == STOPPED  # closed on its way out
        assert _state(run("FAILED", {}), stage, 90.0) == FAILED  # the trial's own error
        assert _state(run("KILLED", {}, start_s=10.0), stage, 90.0) is None  # an earlier attempt's
