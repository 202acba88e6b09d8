"""A second driver of the same search or final evaluation is refused at once, in one line, while
the first holds the stage; the lock goes with its process, however that process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import SearchParams
from pipeline.errors import OutputError
from pipeline.stores.locks import BusyError, stage_lock
from pipeline.sweep.search import search

HOLD = """
import sys, time
from pathlib import Path
from pipeline.stores.locks import stage_lock
with stage_lock(Path(sys.argv[1]), "search", "xor", "cfc"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(root: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_search_of_the_same_pair_is_refused_naming_the_holder(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        with pytest.raises(BusyError, match=rf"`ctsweep search xor cfc` is already running \(pid {holder.pid},"):
            search(tmp_path, "xor", "cfc", SearchParams())
        with stage_lock(tmp_path, "search", "xor", "ncde"):  # another family is free
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with stage_lock(tmp_path, "search", "xor", "cfc"):  # a killed holder leaves no stale lock
        pass


def test_the_lock_is_reentrant_across_sequential_runs(tmp_path: Path) -> None:
    for _ in range(2):
        with stage_lock(tmp_path, "final", "xor", "cfc"):
            assert (tmp_path / ".ctsweep" / "locks" / "final-xor-cfc.lock").read_text().strip() == str(os.getpid())
    assert not (tmp_path / ".ctsweep").exists()  # nothing left behind: no empty lock file, no empty folders


def test_letting_go_keeps_the_folders_that_hold_something_else(tmp_path: Path) -> None:
    (tmp_path / ".ctsweep" / "logs").mkdir(parents=True)
    with stage_lock(tmp_path, "search", "xor", "cfc"):
        with stage_lock(tmp_path, "search", "xor", "ncde"):
            pass
        assert [p.name for p in (tmp_path / ".ctsweep" / "locks").iterdir()] == ["search-xor-cfc.lock"]
    assert [p.name for p in (tmp_path / ".ctsweep").iterdir()] == ["logs"]


def test_a_file_where_the_lock_folder_goes_is_one_error(tmp_path: Path) -> None:
    (tmp_path / ".ctsweep").write_text("not a folder")
    with pytest.raises(OutputError, match=r"\.ctsweep is a file, not a folder: ctsweep keeps its stage locks in "):
        with stage_lock(tmp_path, "search", "xor", "cfc"):
            pass


def test_a_killed_holder_s_file_is_taken_over_then_removed(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    path = tmp_path / ".ctsweep" / "locks" / "search-xor-cfc.lock"
    assert path.read_text().strip() == str(holder.pid)  # SIGKILL: nothing could remove it
    with stage_lock(tmp_path, "search", "xor", "cfc"):
        assert path.read_text().strip() == str(os.getpid())
    assert not path.exists()


def test_a_taker_racing_a_holder_that_lets_go_never_shares_the_lock(tmp_path: Path) -> None:
    """Many processes taking and letting go of one lock at once: never two inside at the same time
    (the removed file a slow taker had opened is not the lock any more)."""
    code = """
import sys, os, time
from pathlib import Path
from pipeline.stores.locks import BusyError, stage_lock
root, inside = Path(sys.argv[1]), Path(sys.argv[2])
held = 0
for _ in range(200):
    try:
        with stage_lock(root, "search", "xor", "cfc"):
            fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails if another is inside
            os.close(fd)
            held += 1
            os.unlink(inside)
    except BusyError:
        pass
print(held)
"""
    inside = tmp_path / "inside"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(inside)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    assert sum(int(out) for out, _ in results) > 0


def test_a_sweep_over_several_families_is_refused_when_one_of_them_is_running(tmp_path: Path) -> None:
    from pipeline.config import FinalParams
    from pipeline.final.stage import final_many
    from pipeline.sweep.search import search_many

    holder = _holder(tmp_path)
    try:  # two sweeps of one project at once: the second stops before Ray, naming the running search
        with pytest.raises(BusyError, match=rf"`ctsweep search xor cfc` is already running \(pid {holder.pid},"):
            search_many(tmp_path, "xor", ["ncde", "cfc", "ode_rnn"], SearchParams())
        # the refused sweep's own lock files (ncde's, taken first) are gone: only the holder's is left
        assert [p.name for p in (tmp_path / ".ctsweep" / "locks").iterdir()] == ["search-xor-cfc.lock"]
        with stage_lock(tmp_path, "search", "xor", "ncde"):  # the locks it took before the refusal were let go
            pass
        with stage_lock(tmp_path, "final", "xor", "cfc"):
            with pytest.raises(BusyError, match=r"`ctsweep final xor cfc` is already running"):
                final_many(tmp_path, "xor", ["ncde", "cfc"], FinalParams())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_take_datasets_locks_each_part_and_leaves_optional_datasets_it_cannot_take(tmp_path: Path, capsys) -> None:
    """The shared-datasets helper of `search_datasets` and `final_datasets`: a busy or failing optional
    dataset is left to its own stage in one line (its locks let go), a busy required one raises, and
    every dataset taken stays locked until the stage's stack closes."""
    import contextlib

    from pipeline.errors import CtsweepError
    from pipeline.stores.locks import take_datasets

    def build(name: str, optional: bool) -> tuple[str, bool]:
        if name == "broken":
            raise CtsweepError("broken: not prepared")
        return name, optional

    holder = _holder(tmp_path)  # holds search xor/cfc
    try:
        with contextlib.ExitStack() as locks:
            parts = take_datasets(locks, tmp_path, "search", ["cfc", "ncde"], ["a"], ["xor", "broken", "b"], build)
            assert parts == [("a", False), ("b", True)]
            err = capsys.readouterr().err.splitlines()
            assert err[0].startswith("ctsweep: search: xor left to `ctsweep search xor`: `ctsweep search xor cfc` "
                                     f"is already running (pid {holder.pid},")
            assert err[1] == "ctsweep: search: broken left to `ctsweep search broken`: broken: not prepared"
            assert len(err) == 2
            for name in ("a", "b"):  # held while the stage runs
                with pytest.raises(BusyError):
                    with stage_lock(tmp_path, "search", name, "ncde"):
                        pass
            with stage_lock(tmp_path, "search", "broken", "cfc"):  # a left dataset's locks were let go
                pass
        with stage_lock(tmp_path, "search", "b", "ncde"):  # and the taken ones' once the stage ends
            pass
        with pytest.raises(BusyError, match="`ctsweep search xor cfc`"):  # a busy required dataset raises
            with contextlib.ExitStack() as locks:
                take_datasets(locks, tmp_path, "search", ["cfc"], ["xor"], [], build)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
