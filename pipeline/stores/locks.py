"""One driver per output: a second `ctsweep search D F` (or `final D F`) started while the first is
running is refused at once, instead of both resuming the same unfinished MLflow parent run and
Ray experiment and overwriting each other's results.

The lock is an flock on a file under `<root>/.ctsweep/locks/`: the kernel releases it when its
process ends in any way (SIGKILL included), so a crashed driver never leaves a stale lock.
It guards drivers on one machine (or on hosts sharing the project over a filesystem with
working flock); the Ray cluster itself is shared freely.

The file holds its holder's pid and is removed when the holder lets go (and the folders with it,
when empty), so a finished or refused command leaves nothing behind. Only a killed holder's file
stays, with its pid, until the next run of that stage takes it over and removes it. Removing a
lock file while another process may have it open is safe because a taker checks, once it holds
the lock, that the path still names the file it locked, and starts again if not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TypeVar

from pipeline.errors import CtsweepError, OutputError
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
    path = folder / f"{'-'.join((stage, *names))}.lock"
    handle = _locked(folder, path, f"`ctsweep {stage} {' '.join(names)}`")
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # still holding the lock: a taker that opened it meanwhile sees it gone (_locked)
        handle.close()  # and lets the lock go
        for empty in (folder, folder.parent):
            with contextlib.suppress(OSError):  # not empty: another lock, logs, or a taker's new file
                empty.rmdir()


def _check_folders(folder: Path) -> None:
    """OutputError when a file stands where the lock folder or its parent must be."""
    for place in (folder.parent, folder):
        try:
            mode = place.stat().st_mode  # one look: a folder removed meanwhile is no file in its place
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(mode):
            raise OutputError(f"{place} is a file, not a folder: ctsweep keeps its stage locks in {folder}; "
                              f"move the file away, then run this again")


def _locked(folder: Path, path: Path, command: str) -> IO[str]:
    """`path` opened and flocked; BusyError naming the holder's pid when another process holds it.
    A file removed by its last holder between our open and our flock is not the lock any more:
    open the path again."""
    while True:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(path, "a+")
        except (FileNotFoundError, FileExistsError, NotADirectoryError):
            # A holder letting go removed a folder meanwhile (mkdir raises FileExistsError when that
            # happens between its own two attempts): make it again. A file in a folder's place is
            # the user's to move.
            _check_folders(folder)
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise BusyError(f"{command} is already running (pid {holder}, lock {path}); "
                            f"wait for it or stop it, then run this again") from None
        try:
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()


def take_datasets(locks: contextlib.ExitStack, root: Path, stage: str, families: Sequence[str],
                  datasets: Sequence[str], optional: Sequence[str], build: Callable[[str, bool], T],
                  left: list[str] | None = None) -> list[T]:
    """The parts of a stage run over several datasets: `build(name, optional)` of each of `datasets`,
    then of each of `optional` that can be taken (`share_datasets`), each (dataset, family) locked
    for `stage` until `locks` closes. A dataset of `datasets` that is busy or fails its checks
    raises; one of `optional` is left, with one line, to its own `ctsweep <stage> <name>`: printed
    now, or appended to `left` for a stage with checks still to come, so that a later refusal of
    one of `datasets` is the only line."""
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
            line = f"ctsweep: {stage}: {name} left to `ctsweep {stage} {name}`: {exc}"
            if left is None:
                print(line, file=sys.stderr)
            else:
                left.append(line)
            continue
        parts.append(part)
    return parts
