"""pipeline/data/local_copy.py: a local copy holding only some of a dataset's raw files (PhysioNet
2012's set-a without sets b and c) is said in one line by `ctsweep profile` and `ctsweep check`,
before any stage runs; a copy with all of them or none is not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import profiles
from pipeline.data.local_copy import partial_copies, partial_copy

ROOT = Path(__file__).resolve().parents[1]
SET_A = ("set-a.tar.gz", "Outcomes-a.txt")
SET_B = ("set-b.tar.gz", "Outcomes-b.txt")
LINE = ("physionet2012: 4 of the 6 files params.yaml lists are not in the local copy ({where}): set-b.tar.gz, "
        "Outcomes-b.txt, set-c.tar.gz, Outcomes-c.txt; found: set-a.tar.gz, Outcomes-a.txt; `dvc repro` will download "
        "them from physionet.org; or list under prepare.physionet2012.sets only the sets it holds")


def _files(folder: Path, names: tuple[str, ...]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")  # presence is all that is looked at


def _project(tmp_path: Path) -> Path:
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "search_spaces").symlink_to(ROOT / "search_spaces")
    return tmp_path


def _ctsweep(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "ctsweep"
    return subprocess.run([str(exe), *args, "--root", str(root)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_profile_and_check_name_the_sets_a_copy_of_set_a_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.cli.check import check_project

    monkeypatch.delenv("CTSWEEP_DATA_SOURCE", raising=False)
    root = _project(tmp_path)
    raw = root / "data" / "raw" / "physionet2012"
    _files(raw, SET_A)
    env = {"CTSWEEP_DATA_SOURCE": ""}
    written = _ctsweep(root, "profile", "tw-physionet2012", "--write", env=env)
    assert written.returncode == 0, written.stderr
    warning = f"ctsweep: warning: {LINE.format(where=raw)}"
    assert written.stderr.splitlines()[1:] == [warning]  # after the line saying what was written
    assert check_project(root).startswith("ok: ")  # `ctsweep check`, in this process (its imports are the cost)
    assert capsys.readouterr().err.strip() == warning
    # the set-a profile on the same copy: nothing to say
    shown = _ctsweep(root, "profile", "tw-physionet2012-cpu", env=env)
    assert shown.returncode == 0 and shown.stdout.startswith(profiles.HEADER) and shown.stderr == ""


def test_a_mirror_is_a_local_copy_too_and_fetch_would_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, params = profiles.load("tw-physionet2012", ROOT / "params.yaml")
    p = params.prepare["physionet2012"]
    mirror = tmp_path / "mirror"
    _files(mirror, SET_A + SET_B)
    line = partial_copy(tmp_path, "physionet2012", p, str(mirror))
    assert line == (f"physionet2012: 2 of the 6 files params.yaml lists are not in the local copy "
                    f"({tmp_path / 'data' / 'raw' / 'physionet2012'} or {mirror}): set-c.tar.gz, Outcomes-c.txt; "
                    f"found: set-a.tar.gz, Outcomes-a.txt, set-b.tar.gz, Outcomes-b.txt; `ctsweep fetch physionet2012` "
                    f"will refuse, as the mirror {mirror} lacks them; or list under prepare.physionet2012.sets only "
                    "the sets it holds")
    monkeypatch.setenv("CTSWEEP_DATA_SOURCE", str(mirror))  # the variable the fetch stage reads
    assert partial_copies(tmp_path, params) == [line]
    _files(mirror, ("set-c.tar.gz", "Outcomes-c.txt"))
    assert partial_copies(tmp_path, params) == []  # every file there
    monkeypatch.setenv("CTSWEEP_DATA_SOURCE", "https://mirror.example/physionet")  # a URL: nothing local to look at
    assert partial_copies(tmp_path, params) == []  # and none in data/raw: a plain download


def test_datasets_without_raw_files_or_with_their_own_fetch_have_nothing_to_say(tmp_path: Path) -> None:
    _, params = profiles.load("cfc-xor", ROOT / "params.yaml")
    assert partial_copies(tmp_path, params) == []  # generated: no raw file
