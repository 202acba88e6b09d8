"""All-or-nothing outputs and signals in-process: a stage interrupted half-way through writing its
files leaves every earlier file as it was and no staging folder behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pipeline.runtime.interrupts import Interrupted, deferred, handle_signals
from pipeline.stores.staging import staged


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    (tmp_path / "plots").mkdir()
    (tmp_path / "results.md").write_text("old table\n")
    (tmp_path / "plots" / "a.png").write_bytes(b"old png")
    return tmp_path


def test_a_complete_block_replaces_every_file_readable_by_others(reports: Path) -> None:
    with staged(reports) as stage:
        (stage / "plots").mkdir()
        (stage / "results.md").write_text("new table\n")
        (stage / "plots" / "a.png").write_bytes(b"new png")
        (stage / "metrics.json").write_text("{}\n")
        os.chmod(stage / "results.md", 0o600)
    assert _files(reports) == {"metrics.json": b"{}\n", "plots/a.png": b"new png", "results.md": b"new table\n"}
    assert (reports / "results.md").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_half_way_leaves_the_old_files_and_no_staging_folder(reports: Path, sig: int) -> None:
    before = _files(reports)
    with pytest.raises(Interrupted) as caught, handle_signals(), staged(reports) as stage:
        (stage / "results.md").write_text("new table\n")
        os.kill(os.getpid(), sig)  # delivered at the next bytecode, as a Ctrl-C or `kill` would be
        (stage / "metrics.json").write_text("{}\n")
    assert caught.value.exit_code == 128 + sig
    assert _files(reports) == before and sorted(p.name for p in reports.iterdir()) == ["plots", "results.md"]


def test_an_error_half_way_leaves_the_old_files(reports: Path) -> None:
    before = _files(reports)
    with pytest.raises(ZeroDivisionError), staged(reports) as stage:
        (stage / "results.md").write_text("new table\n")
        1 / 0
    assert _files(reports) == before and sorted(p.name for p in reports.iterdir()) == ["plots", "results.md"]


def test_a_signal_in_a_deferred_block_waits_for_its_end() -> None:
    done = []
    with pytest.raises(Interrupted), handle_signals():
        with deferred() as pending:
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("the clean-up ran to its end")
            assert pending.signum == signal.SIGTERM
    assert done == ["the clean-up ran to its end"]
