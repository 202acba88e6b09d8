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
from collections.abc import Iterator
from pathlib import Path

from pipeline.errors import CtsweepError
from pipeline.names import check_name


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
