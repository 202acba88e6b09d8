"""The provenance stamp calls a run dirty for the user's edits only: DVC's own bookkeeping (the
outputs it adds to a folder's .gitignore, dvc.lock, data/raw.lock) is not an uncommitted change."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.reporting.provenance import git_commit


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_dvc_gitignore_edits_and_lock_files_are_not_uncommitted_changes(tmp_path: Path) -> None:
    (tmp_path / "results" / "d").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "results" / "d" / ".gitignore").write_text("/search\n")
    (tmp_path / "data" / "raw.lock").write_text("{}\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (tmp_path / "params.yaml").write_text("a: 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "x")
    head = _git(tmp_path, "rev-parse", "HEAD")
    # What `dvc repro` writes: its outputs in the folder's .gitignore, dvc.lock, raw.lock's checksums.
    (tmp_path / "results" / "d" / ".gitignore").write_text("/search\n/final\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  final@d:\n    outs:\n"
                                       "    - path: results/d/final\n      md5: 1.dir\n")
    (tmp_path / "data" / "raw.lock").write_text('{"local:d/x.csv": {"sha256": "0"}}\n')
    assert git_commit(tmp_path) == head
    # The user's own line in the same .gitignore is an edit, as is a line naming no DVC output.
    (tmp_path / "results" / "d" / ".gitignore").write_text("/search\n/final\n*.tmp\n")
    assert git_commit(tmp_path) == f"{head} (uncommitted changes: results/d/.gitignore)"
    (tmp_path / "results" / "d" / ".gitignore").write_text("/search\n/final\n/notes\n")
    assert git_commit(tmp_path) == f"{head} (uncommitted changes: results/d/.gitignore)"
    (tmp_path / "results" / "d" / ".gitignore").write_text("/search\n/final\n")
    (tmp_path / "params.yaml").write_text("a: 2\n")
    assert git_commit(tmp_path) == f"{head} (uncommitted changes: params.yaml)"
