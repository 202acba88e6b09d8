"""SIGINT and SIGTERM: a stage stops, keeps what was already written, and can be resumed.

Every `ctsweep` command runs under `handle_signals()`: SIGINT (Ctrl-C) and SIGTERM (what `kill`,
a scheduler or a CI runner send) raise `Interrupted` in the main thread, so every clean-up on the
way out runs (temporary files removed, MLflow runs closed) and the command exits with 128 + the
signal number, as a shell reports a signal. A bare SIGTERM would end the process at once and
leave temporary files and RUNNING runs behind.

Ray Tune ends its own loop gracefully on SIGINT: it stops the trials, saves the experiment state
and returns the partial results as if the search had finished. That made a Ctrl-C'd search look
complete (it was written as the result and never resumed). Inside `graceful_tune()` the first
signal (SIGINT or SIGTERM) asks Tune to stop in that same graceful way, and the caller learns
afterwards that the stop was an interrupt (`Pending.signum`), so it can refuse to treat the
partial search as a result.

What the command says on the way out is what happened (`stop_message`): a stage that wrote an
output whole before the signal was handled says so with `wrote()`, and the message names it,
instead of claiming that what earlier runs wrote is unchanged (issue 31: a SIGINT landing just
after a search wrote its result).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Tune installs its graceful-stop handler on SIGUSR1 as well as on SIGINT (ray.tune.tune
# `_setup_signal_catching`); with TUNE_DISABLE_SIGINT_HANDLER=1 it leaves SIGINT to us, and we
# reach its handler through SIGUSR1's slot.
_TUNE_SIGNAL = signal.SIGUSR1
_TUNE_HANDLER_NAME = "signal_interrupt_tune_run"


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that
    `except Exception` clean-up code passes it on instead of treating it as a failure."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by this signal


@dataclass
class Pending:
    """The signal that asked a graceful stop, if any (None: the block ended by itself)."""

    signum: int | None = None


class _State:
    graceful: Pending | None = None  # set inside graceful_tune(): the first signal is recorded
    deferred: Pending | None = None  # set inside deferred(): signals wait until the block ends


def _tune_stop_handler() -> Callable[[int, Any], None] | None:
    handler = signal.getsignal(_TUNE_SIGNAL)
    return handler if getattr(handler, "__name__", "") == _TUNE_HANDLER_NAME else None


def _deliver_when_tune_listens(pending: Pending) -> None:
    """A signal came before Tune's loop installed its handler: send Tune the same request once it
    does (from a thread, by SIGUSR1, which Python then handles in the main thread)."""
    def wait() -> None:
        while _State.graceful is pending:
            if _tune_stop_handler() is not None:
                os.kill(os.getpid(), _TUNE_SIGNAL)
                return
            time.sleep(0.05)

    threading.Thread(target=wait, daemon=True, name="ctsweep-interrupt").start()


def _handler(signum: int, frame: FrameType | None) -> None:
    # Never raise inside Ray's loop or a blocking Ray call: an exception thrown into Ray's Cython
    # code surfaces as a SystemError with a traceback, not as our clean stop. There a signal is
    # recorded, and the code that waits checks it (graceful_tune, deferred).
    pending = _State.graceful or _State.deferred
    if pending is None:
        raise Interrupted(signum)
    if pending.signum is not None:
        return  # a second signal: the stop is already under way (SIGKILL stops at once)
    pending.signum = signum
    if pending is _State.graceful:
        stop = _tune_stop_handler()
        if stop is not None:  # Tune's loop is running: let it stop the trials and save its state
            stop(_TUNE_SIGNAL, frame)
        else:
            _deliver_when_tune_listens(pending)


class _Handling:
    active = False  # inside handle_signals()
    written: list[str] = []  # outputs written whole by this command (wrote), in order


def wrote(output: str, detail: str = "") -> None:
    """Record that this command wrote `output` whole (`detail`: what else is final, such as its
    MLflow run), so a later interrupt's message names it (stop_message). Only within
    handle_signals(), which starts each command with nothing written."""
    if _Handling.active:
        _Handling.written.append(f"{output} ({detail})" if detail else output)


def stop_message(stop: Interrupted) -> str:
    """The line a command prints when a signal stopped it: what it had written whole, if anything;
    that nothing was left half-written; and whether running it again resumes anything."""
    if not _Handling.written:
        return (f"{stop}: stopped; what earlier runs wrote is unchanged and nothing half-written was left; "
                f"run the same command again to resume")
    return (f"{stop}: stopped after writing {'; '.join(_Handling.written)} in full; anything else earlier runs "
            f"wrote is unchanged and nothing half-written was left")


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM raise Interrupted (main thread only; elsewhere Python
    cannot install handlers, and the block does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    outer, _Handling.active = _Handling.active, True
    if not outer:  # a new command: nothing written yet
        _Handling.written = []
    try:
        yield
    finally:
        _Handling.active = outer
        for s, h in previous.items():
            signal.signal(s, h)


def reclaim() -> None:
    """Install our handlers again after `ray.init`: Ray's core worker puts a C-level handler on
    SIGTERM in the driver that prints a stack dump and aborts (exit -6), so a `kill` would skip
    every clean-up. Does nothing outside handle_signals() or off the main thread."""
    if _Handling.active and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _handler)


@contextlib.contextmanager
def graceful_tune() -> Iterator[Pending]:
    """Around `Tuner.fit()`: the first SIGINT or SIGTERM makes Tune stop its trials and save the
    experiment (resumable with Tuner.restore) and is recorded in the yielded Pending; the caller
    raises Interrupted after fit returns. Later signals are ignored: cutting the save short
    would only make the resume start from an older state. Needs `handle_signals()` around it."""
    pending = Pending()
    before_env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # SIGINT stays ours; Tune still listens on SIGUSR1
    _State.graceful = pending
    try:
        yield pending
    finally:
        _State.graceful = None
        if before_env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = before_env


@contextlib.contextmanager
def deferred() -> Iterator[Pending]:
    """Signals arriving within the block are recorded (the yielded Pending) and raise Interrupted
    when it ends: around clean-ups that must not be cut in half by a second Ctrl-C, and around
    waits on Ray, which poll `Pending.signum` instead of being interrupted inside Ray's code."""
    outer = _State.deferred
    pending = Pending()
    _State.deferred = pending
    try:
        yield pending
    finally:
        _State.deferred = outer
    if pending.signum is not None:
        if outer is not None:  # an enclosing deferred block raises it when it ends
            outer.signum = outer.signum or pending.signum
        else:
            raise Interrupted(pending.signum)
