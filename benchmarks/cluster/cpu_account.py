"""Where a benchmark pass's CPU time goes: trial processes, the driver, Ray's own processes (issue 33).

On a machine whose cores are all trial slots (2 slots on this 2-core machine), every CPU-second
the driver, Ray's daemons (GCS, raylet, agents) or idle workers spend is taken from the trials,
so a wall-time ratio against a plain loop mixes two things: work inside each trial (checkpoints,
reports, MLflow writes) and work beside the trials that a cluster's head node does on cores no
trial uses. `CpuAccount` separates them: a thread polls the process table every `interval_s`
(psutil, a dependency of ray[default]) and keeps each process's last user + system CPU time, by
kind:

- ``trials``: Ray workers that ever ran a Tune trainable (title ``ray::ImplicitFunc...``) and the
  plain loop's spawned pool workers (``multiprocessing.spawn``), among this process's
  descendants; with `cluster` (RAY_ADDRESS set: the workers are the cluster's raylet's children,
  not this process's) any Ray trial process of the machine. Without it, a Tune trial of another
  program running beside the pass (another user's, another test's) is not counted as this pass's;
- ``driver``: this process;
- ``helpers``: every other descendant of this process (Ray's GCS, raylet, dashboard and runtime-env
  agents and idle or pooled workers; the plain loop's resource tracker);
- ``other``: processes that are not this one's descendants (the rest of the machine's load).

What it cannot see: CPU a process spends after the last poll before it exits (at most
`interval_s` each; Tune reuses trial processes, so few exit during a pass), and a process that
lives less than `interval_s`. Processes alive at the start count only what they spend after it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

KINDS = ("trials", "driver", "helpers", "other")
_TRIAL_TITLES = ("ray::ImplicitFunc", "ray::_Inner", "ray::TrainTrainable")  # Tune's trainable actors
_POOL_WORKER = "multiprocessing.spawn"  # the plain loop's spawned workers (spawn_main in their argv)


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def kind_of(title: str, descendant: bool, is_self: bool, cluster: bool = False) -> str:
    """The kind of one process from its command line (`title`: Ray renames its workers);
    `cluster`: this process drives a Ray cluster's trials, whose workers are not its descendants."""
    if is_self:
        return "driver"
    ray_trial = any(title.startswith(t) for t in _TRIAL_TITLES)
    if (ray_trial and (descendant or cluster)) or (descendant and _POOL_WORKER in title):
        return "trials"
    return "helpers" if descendant else "other"


@dataclass
class _Seen:
    start: float  # CPU seconds when first seen (0 for a process born during the pass)
    last: float
    kind: str


@dataclass
class CpuAccount:
    """Context manager: `with CpuAccount() as acc: ...`, then `acc.summary()`."""

    interval_s: float = 0.5
    cluster: bool = field(default_factory=lambda: bool(os.environ.get("RAY_ADDRESS")))  # kind_of's `cluster`
    _seen: dict[tuple[int, float], _Seen] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _wall_s: float = 0.0

    def __enter__(self) -> "CpuAccount":
        self._me = psutil.Process(os.getpid())
        self._started = time.perf_counter()
        self._poll(first=True)
        self._thread = threading.Thread(target=self._run, name="cpu-account", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._poll(first=False)
        self._wall_s = time.perf_counter() - self._started

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll(first=False)

    def _poll(self, first: bool) -> None:
        mine = {c.pid for c in self._me.children(recursive=True)}
        for proc in psutil.process_iter():
            try:
                key = (proc.pid, proc.create_time())  # a pid reused by a new process is a new key
                cpu = _cpu(proc)
                title = " ".join(proc.cmdline()) or proc.name()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            kind = kind_of(title, proc.pid in mine, proc.pid == self._me.pid, self.cluster)
            seen = self._seen.get(key)
            if seen is None:
                self._seen[key] = _Seen(start=cpu if first else 0.0, last=cpu, kind=kind)
                continue
            seen.last = cpu
            if kind == "trials" or (seen.kind == "other" and kind != "other"):
                seen.kind = kind  # a Ray worker that took a trial is a trial process from then on

    def summary(self) -> dict[str, Any]:
        """{"wall_s", "cpu_s": {kind: CPU seconds}, "cores": {kind: mean cores busy}, "processes": {kind: n}}."""
        cpu = dict.fromkeys(KINDS, 0.0)
        count = dict.fromkeys(KINDS, 0)
        for seen in self._seen.values():
            spent = max(0.0, seen.last - seen.start)
            cpu[seen.kind] += spent
            count[seen.kind] += spent > 0
        wall = self._wall_s or (time.perf_counter() - self._started)
        return {"wall_s": round(wall, 2), "cpu_s": {k: round(v, 1) for k, v in cpu.items()},
                "cores": {k: round(v / wall, 3) if wall else None for k, v in cpu.items()},
                "processes": count, "interval_s": self.interval_s}
