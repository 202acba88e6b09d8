"""Files ctsweep writes are readable like any file the user writes: the umask decides a new
file's mode, and a file written again keeps its own (mkstemp alone would leave 0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pipeline.stores.files import write_json, write_text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_files_follow_the_umask_and_rewritten_files_keep_their_mode(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        write_text(tmp_path / "results.md", "table\n")
        write_json(tmp_path / "metrics.json", {"a": 1})
        assert _mode(tmp_path / "results.md") == 0o644 and _mode(tmp_path / "metrics.json") == 0o644
        os.umask(0o077)
        write_text(tmp_path / "private.md", "x\n")
        assert _mode(tmp_path / "private.md") == 0o600
        shared = tmp_path / "params.yaml"
        shared.write_text("a: 1\n")
        shared.chmod(0o664)
        write_text(shared, "a: 2\n")
        assert _mode(shared) == 0o664 and shared.read_text() == "a: 2\n"
    finally:
        os.umask(previous)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_staged_reports_and_prepared_datasets_follow_the_umask(tmp_path: Path) -> None:
    from pipeline.data.contract import save_dataset
    from pipeline.data.kinds.xor import build as build_xor
    from pipeline.config import XorParams
    from pipeline.stores.staging import staged

    previous = os.umask(0o027)
    try:
        with staged(tmp_path / "reports") as stage:
            (stage / "plots").mkdir()
            (stage / "plots" / "a.png").write_bytes(b"png")
            with open(os.open(stage / "b.md", os.O_CREAT | os.O_WRONLY, 0o600), "w") as f:  # as mkstemp leaves it
                f.write("x")
        assert _mode(tmp_path / "reports" / "plots" / "a.png") == 0o640 and _mode(tmp_path / "reports" / "b.md") == 0o640
        save_dataset(tmp_path / "processed" / "xor", build_xor("xor", XorParams(kind="xor", n_train=20, n_test=5)))
        assert _mode(tmp_path / "processed" / "xor") == 0o750  # mkdtemp made it 0700
        assert {_mode(p) for p in (tmp_path / "processed" / "xor").iterdir()} == {0o640}
    finally:
        os.umask(previous)
