"""A Snapshot as text: one plain line (logs, CI, `ctsweep status`) or a rich table (a terminal).

    ctsweep search: 5 of 12 trials ended, 2 running · 3 min 10 s elapsed, about 6 min left · xor/cfc 3/6 (1 running, 1 stopped early), best 0.9375, round 1/2 · xor/ncde 2/6 (1 running), best 0.875, round 1/2
    ctsweep final: 3 of 10 seeds ended, 2 running · 1 min 2 s elapsed, 4-11 min left · xor/cfc 2/5 (seed 2 at epoch 14), best 0.95 · xor/ncde 1/5 (seed 1 at epoch 3)

The time left is a range while its ends differ (pipeline.progress.estimate.Range: seeds stopped
by patience or run to their budget), one figure once they come close.
"""

from __future__ import annotations

import math

from rich.table import Table

from pipeline.progress.estimate import Range, time_range
from pipeline.progress.model import FAILED, SEARCH, STOPPED, Snapshot, Unit


def duration(seconds: float) -> str:
    """"45 s", "12 min 5 s", "2 h 03 min"."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def score(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _noun(stage: str) -> str:
    return "trials" if stage == SEARCH else "seeds"


def span_text(span: Range) -> str:
    """"about 6 min" (one figure: Range.single), else the range: "12-30 min", "40 s-3 min",
    "1 h 10 min-2 h 05 min"; a range whose ends read alike at the unit shown is one figure."""
    if span.single is not None:
        return f"about {duration(span.single)}"
    low, high = int(round(span.low)), int(round(span.high))
    if high < 60:
        text = f"{low}-{high} s"
    elif high < 3600:  # whole minutes: the low end rounded down, the high end up (both stay ends)
        text = f"{low // 60}-{-(-high // 60)} min" if low >= 60 else f"{low} s-{-(-high // 60)} min"
    else:
        text = f"{_minutes(low)}-{_minutes(high)}"
    return text if duration(low) != duration(high) else f"about {duration(low)}"


def _minutes(seconds: int) -> str:
    """"45 s", "12 min", "2 h 03 min": a range's end in whole minutes past one."""
    return duration(seconds) if seconds < 60 or seconds >= 3600 else f"{seconds // 60} min"


def clock(snapshot: Snapshot) -> str:
    """"3 min 10 s elapsed, 6-14 min left" or "..., about 6 min left" (span_text; no estimate
    yet: "time left: estimated after the first epochs")."""
    if snapshot.total and snapshot.ended >= snapshot.total:
        return f"{duration(snapshot.elapsed)} elapsed, all ended"
    span = time_range(snapshot)
    tail = f"{span_text(span)} left" if span is not None else "time left: estimated after the first epochs"
    return f"{duration(snapshot.elapsed)} elapsed, {tail}"


def headline(snapshot: Snapshot) -> str:
    running = sum(len(u.running) for u in snapshot.units)
    return (f"ctsweep {snapshot.stage}: {snapshot.ended} of {snapshot.total} {_noun(snapshot.stage)} ended, "
            f"{running} running · {clock(snapshot)}")


def _state_parts(unit: Unit, stage: str) -> list[str]:
    if stage == SEARCH:
        parts = [f"{len(unit.running)} running"] if unit.running else []
    else:
        parts = [(f"seed {w.label} at epoch {w.epochs}" if w.epochs else f"seed {w.label} starting") + w.tag
                 for w in unit.running]
    parts += [f"{n} {what}" for what in (STOPPED, FAILED) if (n := unit.count(what)) and (stage == SEARCH or what == FAILED)]
    return parts


def unit_text(unit: Unit, stage: str) -> str:
    """"xor/cfc 3/6 (1 running, 1 stopped early), best 0.9375, round 1/2"."""
    parts = _state_parts(unit, stage)
    text = f"{unit.name} {min(unit.ended, unit.total)}/{unit.total}" + (f" ({', '.join(parts)})" if parts else "")
    if unit.best is not None:
        text += f", best {score(unit.best)}"
    if unit.round is not None and unit.work and not unit.finished:
        text += f", round {unit.round[0]}/{unit.round[1]}"
    return text


def plain_line(snapshot: Snapshot) -> str:
    """The whole snapshot in one line (the form for logs)."""
    return " · ".join([headline(snapshot), *(unit_text(u, snapshot.stage) for u in snapshot.units)])


def table(snapshot: Snapshot) -> Table:
    """The live display's table: a row per (dataset, family)."""
    search = snapshot.stage == SEARCH
    out = Table(title=headline(snapshot), title_justify="left", expand=False, pad_edge=False)
    # The name is what a row is read by: never cut (at 80 columns a 33-character
    # "italy_power_demand/cde_fwp_delta" fits); the other columns wrap or shorten first.
    longest = max((len(u.name) for u in snapshot.units), default=0)
    out.add_column("dataset/family", no_wrap=True, min_width=longest)
    out.add_column("ended", justify="right", no_wrap=True)
    if search:  # counts: short headers (the legend is the headline's words)
        for header in ("run", "stop", "fail"):
            out.add_column(header, justify="right", no_wrap=True)
        out.add_column("best", justify="right", no_wrap=True)
        out.add_column("round", justify="right", no_wrap=True)
    else:  # the running seeds and their epochs: the column that wraps
        out.add_column("running")
        out.add_column("failed", justify="right", no_wrap=True)
        out.add_column("best val", justify="right", no_wrap=True)
    for u in snapshot.units:
        running = (str(len(u.running)) if search else
                   ", ".join((f"seed {w.label}: epoch {w.epochs}" if w.epochs else f"seed {w.label}: starting") + w.tag
                             for w in u.running)) or ""
        row = [u.name, f"{min(u.ended, u.total)}/{u.total}", running]
        if search:
            row.append(str(u.count(STOPPED)))
        row += [str(u.count(FAILED)), score(u.best)]
        if search:
            row.append("" if u.round is None or not u.work or u.finished else f"{u.round[0]}/{u.round[1]}")
        out.add_row(*row)
    return out
