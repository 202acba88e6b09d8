"""benchmarks/zoo/speedup.py: each side measured with its own tree's code and malloc, the worktree removed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.zoo import speedup


@pytest.mark.slow
def test_speedup_measures_every_side_and_removes_the_worktree(tmp_path: Path) -> None:
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=speedup.ROOT, capture_output=True, text=True).stdout
    report = speedup.main(["--before", "HEAD", "--families", "ode_rnn", "--repeats", "1", "--epochs", "1",
                           "--warmup", "0", "--sequences", "8", "--length", "5", "--channels", "2",
                           "--out", str(tmp_path)])
    row = report["rows"][0]
    assert row["family"] == "ode_rnn" and row["errors"] == []
    assert all(len(row[f"{side}_s"]) == 1 and row[f"{side}_s"][0] > 0 for side in ("before", "after_system", "after"))
    assert row["ratio"] == row["before_median_s"] / row["after_median_s"]
    assert row["code_ratio"] == row["before_median_s"] / row["after_system_median_s"]
    # the code-only side really ran on glibc's own settings, the after side on the allocator's
    # (what the earlier tree reports depends on the commit: one without the allocator says nothing)
    assert row["malloc"]["after_system"] == ["system"] and row["malloc"]["after"] == ["keep"]
    assert json.loads((tmp_path / "speedup.json").read_text())["rows"][0]["family"] == "ode_rnn"
    assert "| ode_rnn |" in (tmp_path / "speedup.md").read_text()
    after = subprocess.run(["git", "worktree", "list"], cwd=speedup.ROOT, capture_output=True, text=True).stdout
    assert after == worktrees  # the temporary worktree is gone


def test_a_family_the_earlier_code_cannot_build_is_reported_not_raised() -> None:
    job = speedup.job_for(speedup.parse_args(["--before", "HEAD", "--families", "ode_rnn", "--sequences", "8",
                                              "--length", "5", "--channels", "2", "--warmup", "0"]), "ode_rnn")
    job.model_kwargs["no_such_argument"] = 1  # what an older commit's model would refuse
    result = speedup.run_in(speedup.ROOT, job)
    assert result["status"] == "error" and "no_such_argument" in result["error"]
