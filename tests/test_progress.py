"""Progress of a running stage (pipeline.progress): the estimate on hand-made timings, the plain
lines on a recorded sequence of trial and seed events, the display's choice of form, and the
progress read back from a real MLflow store as `ctsweep status` reads it from another terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.progress import display
from pipeline.progress.estimate import expected_epochs, time_left
from pipeline.progress.model import DONE, FAILED, FINAL, RUNNING, SEARCH, STOPPED, Snapshot, Unit, Work
from pipeline.progress.read import ENDED_TAG, mark_parent, snapshot
from pipeline.progress.render import plain_line, unit_text
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
    assert line.startswith("ctsweep final: 3 of 5 seeds ended, 1 running · 30 s elapsed, about ")


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
    mark_parent(client, parent, started, total=6, max_epochs=4, mode="max", round_size=2, rounds=3)
    _trial(client, exp, parent, 0, 4, 0.9, "finished")      # closed by its record: stopped early
    _trial(client, exp, parent, 1, 2, 0.95, STOPPED)        # Tune ended it; its run still RUNNING
    _trial(client, exp, parent, 2, 1, 0.4, "failed")
    _trial(client, exp, parent, 3, 3, 0.7)                  # running
    snap = snapshot(client, [exp], SEARCH, since=started)
    assert snap is not None
    [unit] = snap.units
    assert (unit.name, unit.total, unit.ended, len(unit.running), unit.count(STOPPED), unit.count(FAILED)) == (
        "xor/cfc", 6, 3, 1, 2, 1)
    assert unit.best == 0.95 and unit.round == (2, 3)
    assert snapshot(client, [exp], SEARCH, since=started + 60) is None  # another attempt's parents only
    assert snapshot(client, [exp], FINAL) is None
    tracking.finish(client, parent)
    assert snapshot(client, [exp], SEARCH) is None  # closed: not running


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
