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
    assert (tmp_path / ".ctsweep" / "locks" / "final-xor-cfc.lock").read_text() == ""


def test_a_sweep_over_several_families_is_refused_when_one_of_them_is_running(tmp_path: Path) -> None:
    from pipeline.config import FinalParams
    from pipeline.final.stage import final_many
    from pipeline.sweep.search import search_many

    holder = _holder(tmp_path)
    try:  # two sweeps of one project at once: the second stops before Ray, naming the running search
        with pytest.raises(BusyError, match=rf"`ctsweep search xor cfc` is already running \(pid {holder.pid},"):
            search_many(tmp_path, "xor", ["ncde", "cfc", "ode_rnn"], SearchParams())
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
