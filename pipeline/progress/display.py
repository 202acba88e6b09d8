"""The progress of the stage a driver runs, shown while it runs (`shown`): a live table on a
terminal, plain lines otherwise.

`CTSWEEP_PROGRESS` chooses: `auto` (the default) shows the live table when standard error is a
terminal at least MIN_WIDTH columns wide, `TERM` is not `dumb` and `NO_COLOR` is unset, and plain
lines otherwise; `live`, `plain` or `off` force one. Plain lines go to standard error every
PLAIN_EVERY_S seconds and whenever a (dataset, family) starts or ends, never more often than
the store is read (POLL_S). The live table lets every other line print above it (Ray's, the
stage's warnings and errors), so it never hides one.

The display reads the stores in a thread of its own (pipeline.progress.read); a store that cannot
be read for a moment (a busy SQLite file, a server restarting) skips that reading: progress is
never a reason for a stage to fail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

from rich.console import Console
from rich.live import Live

from pipeline.errors import excerpt
from pipeline.progress.model import Snapshot
from pipeline.progress.read import snapshot as read_snapshot
from pipeline.progress.render import plain_line, table
from pipeline.stores import tracking

log = logging.getLogger(__name__)

ENV = "CTSWEEP_PROGRESS"
MODES = ("auto", "live", "plain", "off")
MIN_WIDTH = 80  # narrower: plain lines (the table's columns would wrap)
POLL_S = {"live": 2.0, "plain": 10.0}
PLAIN_EVERY_S = 60.0


def mode(stream: Any = None) -> str:
    """"live", "plain" or "off", from CTSWEEP_PROGRESS and the terminal (see the module)."""
    chosen = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if chosen not in MODES:
        # the form of every other warning (not logging's "pipeline.progress.display: WARNING: ...")
        print(f"ctsweep: warning: {ENV}={excerpt(chosen)} is not one of {', '.join(MODES)}: showing plain lines",
              file=sys.stderr)
        return "plain"
    if chosen != "auto":
        return chosen
    stream = stream or sys.stderr
    tty = hasattr(stream, "isatty") and stream.isatty()
    if not tty or os.environ.get("TERM") == "dumb" or "NO_COLOR" in os.environ:
        return "plain"
    return "live" if Console(file=stream).width >= MIN_WIDTH else "plain"


def phases(snap: Snapshot) -> tuple[tuple[str, str], ...]:
    """Each unit's phase (waiting, running, ended): a plain line goes out when one changes."""
    return tuple((u.name, "ended" if u.finished else "running" if u.work else "waiting") for u in snap.units)


def counts(snap: Snapshot) -> tuple:
    """What a line says apart from the clock: each unit's work and its states and epochs."""
    return tuple((u.name, tuple((w.label, w.state, w.epochs) for w in u.work)) for u in snap.units)


class Plain:
    """Plain lines: at a phase change, else every PLAIN_EVERY_S seconds."""

    def __init__(self, write: Callable[[str], None], every_s: float = PLAIN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._write, self._every, self._clock = write, every_s, clock
        self._last: tuple[float, tuple] | None = None
        self._counts: tuple = ()

    def show(self, snap: Snapshot, final: bool = False) -> None:
        """`final`: the stage's last line, unless the last one said the same counts."""
        now, seen = self._clock(), phases(snap)
        if final:
            if self._last is None or counts(snap) != self._counts:
                self._write(plain_line(snap))
            return
        if self._last is None or seen != self._last[1] or now - self._last[0] >= self._every:
            self._write(plain_line(snap))
            self._last, self._counts = (now, seen), counts(snap)


class _Poller(threading.Thread):
    def __init__(self, read: Callable[[], Snapshot | None], show: Callable[[Snapshot], None], every_s: float) -> None:
        super().__init__(name="ctsweep-progress", daemon=True)
        self._read, self._show, self._every = read, show, every_s
        self.stopped = threading.Event()
        self.last: Snapshot | None = None

    def poll(self) -> None:
        try:
            snap = self._read()
        except Exception as exc:  # a store busy or restarting: skip this reading
            log.debug("progress: store not readable now: %s", exc)
            return
        if snap is not None:
            self.last = snap
            self._show(snap)

    def run(self) -> None:
        while not self.stopped.wait(self._every):
            self.poll()


@contextlib.contextmanager
def shown(tracking_uri: str, exp_ids: list[str], stage: str, stream: Any = None) -> Iterator[float]:
    """Show `stage`'s progress over the MLflow experiments `exp_ids` while the block runs; yields
    the time the block started, which the driver tags its parents with
    (pipeline.progress.read.mark_parent): the display reads those of this attempt only."""
    since = time.time()
    chosen = mode(stream)
    if chosen == "off":
        yield since
        return
    stream = stream or sys.stderr
    client = tracking.MlflowClient(tracking_uri)  # the display's own: it reads from another thread

    def read(closed: bool = False) -> Snapshot | None:
        return read_snapshot(client, exp_ids, stage, since, closed=closed)

    if chosen == "plain":
        plain = Plain(lambda line: print(line, file=stream, flush=True))
        with _polling(read, plain.show, POLL_S["plain"], lambda snap: plain.show(snap, final=True)):
            yield since
        return
    with Live(console=Console(file=stream), refresh_per_second=1, redirect_stdout=True, redirect_stderr=True,
              transient=False) as live:
        with _polling(read, lambda snap: live.update(table(snap)), POLL_S["live"],
                      lambda snap: live.update(table(snap))):
            yield since


@contextlib.contextmanager
def _polling(read: Callable[..., Snapshot | None], show: Callable[[Snapshot], None], every_s: float,
             at_end: Callable[[Snapshot], None]) -> Iterator[None]:
    """Show a reading every `every_s` seconds while the block runs, then the stage as it ended
    (`read(closed=True)`: its parents may be closed by now) through `at_end`."""
    poller = _Poller(read, show, every_s)
    poller.start()
    try:
        yield
    finally:
        poller.stopped.set()
        poller.join(timeout=5)
        with contextlib.suppress(Exception):
            if (last := read(closed=True) or poller.last) is not None:
                at_end(last)
