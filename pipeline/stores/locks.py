"""One driver per output: a second `ctsweep search D F` (or `final D F`) started while the first is
running is refused at once, instead of both resuming the same unfinished MLflow parent run and
Ray experiment and overwriting each other's results.

The lock is an flock on a file under `<root>/.ctsweep/locks/`: the kernel releases it when its
process ends in any way (SIGKILL included), so a crashed driver never leaves a stale lock.
It guards drivers on one machine (or on hosts sharing the project over a filesystem with
working flock); the Ray cluster itself is shared freely.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from pipeline.errors import CtsweepError
from pipeline.names import check_name


T = TypeVar("T")


class BusyError(CtsweepError):
    """Another process is producing the same output right now."""


@contextlib.contextmanager
def stage_lock(root: Path, stage: str, *names: str) -> Iterator[None]:
    """Hold the lock of `stage` on `names` (for example "search", "xor", "cfc") for the block;
    raise BusyError naming the holder's pid when another process holds it."""
    for name in names:
        check_name(name, f"{stage} lock name")
    folder = root / ".ctsweep" / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{'-'.join((stage, *names))}.lock"
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise BusyError(f"`ctsweep {stage} {' '.join(names)}` is already running (pid {holder}, lock {path}); "
                            f"wait for it or stop it, then run this again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def take_datasets(locks: contextlib.ExitStack, root: Path, stage: str, families: Sequence[str],
                  datasets: Sequence[str], optional: Sequence[str], build: Callable[[str, bool], T]) -> list[T]:
    """The parts of a stage run over several datasets: `build(name, optional)` of each of `datasets`,
    then of each of `optional` that can be taken (`share_datasets`), each (dataset, family) locked
    for `stage` until `locks` closes. A dataset of `datasets` that is busy or fails its checks
    raises; one of `optional` is left, with one line, to its own `ctsweep <stage> <name>`."""
    for name in sorted(datasets):
        for family in sorted(families):
            locks.enter_context(stage_lock(root, stage, name, family))
    parts = [build(name, False) for name in datasets]
    for name in optional:
        try:
            with contextlib.ExitStack() as own:
                for family in sorted(families):
                    own.enter_context(stage_lock(root, stage, name, family))
                part = build(name, True)
                locks.enter_context(own.pop_all())  # held until the stage ends
        except CtsweepError as exc:  # its own stage reports it; this one goes on without it
            print(f"ctsweep: {stage}: {name} left to `ctsweep {stage} {name}`: {exc}", file=sys.stderr)
            continue
        parts.append(part)
    return parts
