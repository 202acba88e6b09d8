"""The repository as a fresh clone sees it: DVC refuses to reproduce a stage whose cached output
holds a file git tracks ("output ... is already tracked by SCM"), which no test on a copied
project can see. A folder output that once was a list of files kept the .gitignore files DVC
had written inside it, and `make run` failed in a fresh clone at its first search stage."""

from __future__ import annotations

import subprocess
from pathlib import PurePosixPath

import yaml

from tests.conftest import REPO


def _cached_outputs() -> list[PurePosixPath]:
    """Every cached output path of dvc.yaml, `foreach: ${datasets}` expanded with params.yaml's."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    datasets = yaml.safe_load((REPO / "params.yaml").read_text())["datasets"]
    paths = []
    for stage in stages.values():
        body, items = (stage["do"], datasets) if "foreach" in stage else (stage, [None])
        for section in ("outs", "metrics", "plots"):
            for out in body.get(section, []):
                path, options = (out, {}) if isinstance(out, str) else next(iter(out.items()))
                if (options or {}).get("cache", True):
                    paths += [PurePosixPath(path.replace("${item}", item) if item else path) for item in items]
    return paths


def test_no_file_git_tracks_lies_inside_a_cached_dvc_output() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    files = [PurePosixPath(line) for line in tracked.stdout.splitlines()]
    outputs = _cached_outputs()
    assert PurePosixPath("results/japanese_vowels/search") in outputs  # the expansion works
    inside = [str(f) for f in files for out in outputs if f == out or out in f.parents]
    assert not inside, f"git tracks files inside DVC outputs (dvc repro refuses them): {inside}"

