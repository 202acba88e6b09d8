"""`ctsweep check` and the storage checks a search runs before Ray starts (issue 14)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.cli.check import check_project
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.sweep.sensitivity import check_optuna_storage
from pipeline.stores.ray_storage import check_storage_path
from tests.conftest import REPO, write_params

DVC = Path(sys.executable).with_name("dvc")


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def test_check_passes_the_project_and_writes_nothing(project: Path) -> None:
    before = _tree(project)
    summary = check_project(project)
    assert summary.startswith(f"ok: {project / 'params.yaml'}: 1 dataset(s)") and "6 family" in summary
    assert _tree(project) == before, "check must not create optuna.db, ray_results or anything else"


def test_check_command_prints_one_line_and_exits_2(project: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["check", "--root", str(project)])
    assert ok.exit_code == 0 and ok.stdout.startswith("ok: ")
    (project / "search_spaces" / "cfc.yaml").write_text(
        (project / "search_spaces" / "cfc.yaml").read_text().replace("step: 32}", "step: 0}", 1))
    bad = runner.invoke(app, ["check", "--root", str(project)])
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "cfc.yaml: key `params.hidden_size.step`" in bad.stderr


def test_a_deleted_space_file_names_its_family_and_where_a_new_one_comes_from(project: Path) -> None:
    """Issue 73, item 6: it said only that the file "does not exist"."""
    space = project / "search_spaces" / "cfc.yaml"
    space.unlink()
    before = _tree(project)
    bad = CliRunner().invoke(app, ["check", "--root", str(project)])
    assert (bad.exit_code, bad.stdout) == (2, "")
    assert bad.stderr.splitlines() == [
        f"ctsweep: error: {space} does not exist: it is the search space of the built-in family 'cfc' that "
        f"params.yaml `families` lists; restore the file from ctsweep's repository (`git checkout -- "
        f"search_spaces/cfc.yaml` in a clone, or copy its search_spaces/cfc.yaml), or remove 'cfc' from `families`"]
    assert _tree(project) == before


def _without_classical(project: Path) -> str:
    """The project with the repository's dvc.yaml and a params.yaml from before the `classical`
    section; the one line that names it."""
    shutil.copy(REPO / "dvc.yaml", project / "dvc.yaml")
    raw = yaml.safe_load((project / "params.yaml").read_text())
    del raw["classical"]
    write_params(project, raw)
    [dataset] = raw["datasets"][:1]
    return (f"ctsweep: error: {project / 'params.yaml'}: no `classical` section, which dvc.yaml's stage "
            f"`classical@{dataset}` lists under `params:` (`dvc repro` would stop at that stage with DVC's "
            f"\"Parameters 'classical' are missing\", after the stages before it had run); add it to params.yaml "
            f"(`classical: {{}}` takes its defaults; the keys: docs/reference/params.md)")


def test_a_section_dvc_yaml_lists_and_params_yaml_lacks_is_one_line(project: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 73, item 8: ctsweep takes the defaults of a missing section, DVC refuses the stage that
    lists it, after the stages before it ran. `check` names it; so does every command DVC runs."""
    line = _without_classical(project)
    before = _tree(project)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    checked = CliRunner().invoke(app, ["check", "--root", str(project)])
    assert (checked.exit_code, checked.stdout, checked.stderr.splitlines()) == (2, "", [line])
    outside = CliRunner().invoke(app, ["classical", "nosuch", "--root", str(project)])  # by hand: the defaults serve
    assert "'nosuch' is not in params.yaml `prepare`" in outside.stderr
    monkeypatch.setenv("DVC_STAGE", "fetch@japanese_vowels")
    fetched = CliRunner().invoke(app, ["fetch", "japanese_vowels", "--root", str(project)])
    assert (fetched.exit_code, fetched.stdout, fetched.stderr.splitlines()) == (2, "", [line])
    assert _tree(project) == before
    (project / "params.yaml").write_text((project / "params.yaml").read_text() + "classical: {}\n")
    assert check_project(project).startswith("ok: ")  # the defaults, as DVC accepts them


def test_dvc_repro_stops_at_its_first_stage_with_ctsweep_s_line(project: Path) -> None:
    """DVC checks a stage's params only when it reaches it: without this line a repro ran fetch,
    prepare, search and final before DVC's own error at the classical stage."""
    line = _without_classical(project)
    for command in (["git", "init", "-q"], [str(DVC), "init", "-q"]):
        subprocess.run(command, cwd=project, check=True, capture_output=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "MLFLOW_TRACKING_URI")}
    env["PATH"] = f"{DVC.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([str(DVC), "repro"], cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode != 0
    assert line in (done.stdout + done.stderr).splitlines(), done.stdout + done.stderr
    assert "are missing from" not in done.stdout + done.stderr
    assert not (project / "data").exists()  # nothing fetched


def test_check_refuses_an_unknown_uea_archive_name(project: Path) -> None:
    params = project / "params.yaml"
    params.write_text(params.read_text().replace("name: EigenWorms", "name: " + "EigenWorm" * 100, 1))
    with pytest.raises(ConfigError) as err:
        check_project(project)
    assert "key `prepare.eigenworms.name`: unknown UCR/UEA dataset 'EigenWormEigenWorm" in str(err.value)
    assert "EigenWorm" * 10 not in str(err.value) and "'EigenWorms'" in str(err.value)


# search.storage_path

def test_storage_path_relative_absolute_and_file_uri(tmp_path: Path) -> None:
    assert check_storage_path(tmp_path, "ray_results") == str(tmp_path / "ray_results")
    assert check_storage_path(tmp_path, "new/deeper/ray_results") == str(tmp_path / "new" / "deeper" / "ray_results")
    assert check_storage_path(tmp_path, f"file://{tmp_path}/ray") == f"file://{tmp_path}/ray"
    assert not (tmp_path / "ray_results").exists() and not (tmp_path / "new").exists(), "nothing is created"


def test_remote_uris_are_parsed_without_the_network(tmp_path: Path) -> None:
    start = time.monotonic()
    for uri in ("s3://bucket/ctsweep", "gs://bucket/ctsweep", "s3://bucket/x?region=eu-west-1"):
        assert check_storage_path(tmp_path, uri) == uri
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(("value", "fragment"), [
    ("params.yaml", "is a file, not a folder"),
    ("params.yaml/ray_results", "is a file, not a folder"),
    ("nosuch://bucket/x", "scheme 'nosuch'"),
    ("s3:/bucket", "not a valid URI"),
    ("://x", "not a valid URI"),
    ("http://[::1/x", "not a valid URI"),
    ("file://host/x", "absolute folder"),
    ("a\x00b", "control characters"),
])
def test_bad_storage_paths_are_one_line(tmp_path: Path, value: str, fragment: str) -> None:
    (tmp_path / "params.yaml").write_text("")
    with pytest.raises(ConfigError) as err:
        check_storage_path(tmp_path, value)
    message = str(err.value)
    assert message.startswith("params.yaml: key `search.storage_path`: ") and fragment in message
    assert "\n" not in message and "allowed:" in message


# search.optuna_storage

def test_optuna_sqlite_file_is_read_never_created(tmp_path: Path) -> None:
    assert check_optuna_storage(tmp_path, "optuna.db") == f"sqlite:///{tmp_path / 'optuna.db'}"
    assert not (tmp_path / "optuna.db").exists()
    with sqlite3.connect(tmp_path / "real.db") as db:
        db.execute("create table t (x)")
    before = (tmp_path / "real.db").read_bytes()
    assert check_optuna_storage(tmp_path, "real.db").endswith("real.db")
    assert check_optuna_storage(tmp_path, f"sqlite:///{tmp_path / 'real.db'}").endswith("real.db")
    assert (tmp_path / "real.db").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["real.db"]


@pytest.mark.parametrize(("value", "fragment"), [
    ("notes.txt", "not an SQLite database"),
    ("missing/optuna.db", "does not exist or is not writable"),
    (".", "cannot be read"),
    ("sqlite://", "in-memory"),
    ("://x", "not a database URL"),
    ("nosuch://host/db", "cannot open"),
    ("a\x00b", "control characters"),
])
def test_bad_optuna_storages_are_one_line(tmp_path: Path, value: str, fragment: str) -> None:
    (tmp_path / "notes.txt").write_text("not a database")
    with pytest.raises(ConfigError) as err:
        check_optuna_storage(tmp_path, value)
    message = str(err.value)
    assert message.startswith("params.yaml: key `search.optuna_storage`: ") and fragment in message
    assert "\n" not in message and "allowed:" in message


def test_a_database_url_is_opened_and_its_password_never_echoed(tmp_path: Path) -> None:
    """Port 1 on the loopback refuses at once (or the driver is missing): either way one line."""
    with pytest.raises(ConfigError, match="cannot open 'postgresql://user:\\*\\*\\*@127.0.0.1:1/optuna'") as err:
        check_optuna_storage(tmp_path, "postgresql://user:secret@127.0.0.1:1/optuna")
    assert "secret" not in str(err.value) and "\n" not in str(err.value)
