"""A dataset with nothing to download (generated, or a copy aeon ships) leaves data/raw/<dataset>/
SOURCE.txt, so `dvc repro` no longer warns "'data/raw/<dataset>' is empty" (four times per run, issue
31, item 4) and the folder's hash follows the data's source: the bundled files' checksums."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config.datasets import UeaParams, XorParams
from pipeline.data.prepare import fetch
from pipeline.data.raw_note import NOTE, note_text
from tests.conftest import REPO, default_params, write_params


def test_a_generated_dataset_gets_a_constant_note_written_once(tmp_path: Path) -> None:
    raw = tmp_path / "raw" / "xor_event"
    p = XorParams(kind="xor")
    assert fetch(p, raw, tmp_path / "raw.lock") == []  # the note is no raw file
    note = raw / NOTE
    assert [f.name for f in raw.iterdir()] == [NOTE]
    assert note.read_text() == "xor_event: nothing to download; prepare builds it from params.yaml's prepare.xor_event.\n"
    before = note.stat().st_mtime_ns
    fetch(p, raw, tmp_path / "raw.lock")  # fetch runs on every repro (always_changed): same text, file untouched
    assert note.stat().st_mtime_ns == before


def test_a_bundled_dataset_s_note_holds_the_checksums_of_aeon_s_files() -> None:
    spec = importlib.util.find_spec("aeon")
    assert spec is not None and spec.origin is not None
    folder = Path(spec.origin).parent / "datasets" / "data" / "JapaneseVowels"
    lines = note_text("jv", UeaParams(kind="uea", name="JapaneseVowels")).splitlines()
    assert lines[0] == "jv: nothing to download; prepare reads the copy the installed aeon ships:"
    assert lines[1:] == [f"aeon/datasets/data/JapaneseVowels/{name} sha256 "
                         f"{hashlib.sha256((folder / name).read_bytes()).hexdigest()}"
                         for name in ("JapaneseVowels_TEST.ts", "JapaneseVowels_TRAIN.ts")]


@pytest.mark.slow
def test_dvc_repro_of_a_dataset_with_nothing_to_download_warns_nothing(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    params = default_params()
    params["datasets"] = ["xor_event"]
    params["prepare"]["xor_event"].update(n_train=100, n_test=100)
    write_params(root, params)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(*cmd: str) -> str:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout + done.stderr

    run("git", "init", "-q")
    run("dvc", "init", "-q")
    first = run("dvc", "repro", "prepare@xor_event")
    assert "Running stage 'prepare@xor_event'" in first
    assert "WARNING" not in first and "is empty" not in first, first
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    [out] = lock["fetch@xor_event"]["outs"]
    assert out["path"] == "data/raw/xor_event" and out["nfiles"] == 1
    again = run("dvc", "repro", "prepare@xor_event")  # fetch reruns (always_changed); its output did not change
    assert "Stage 'prepare@xor_event' didn't change, skipping" in again and "WARNING" not in again, again
