"""Dataset and family names are identifiers, never paths: `.`, `..`, `''`, a slash or an absolute
path is refused by every stage before anything is read, written or removed, inside the project
or outside it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import FinalParams, SearchParams, XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError
from pipeline.final.stage import final
from pipeline.names import check_name, inside, is_name, shown
from pipeline.stores.paths import final_result_path, processed_dir, raw_dir, search_result_path
from pipeline.sweep.search import search

BAD = [".", "..", "", "a/b", "../x", "/", "/tmp/elsewhere", "-x", "x" * 65, "a b", "a\nb", "ümlaut", "a.b"]
GOOD = ["xor", "xor_event", "japanese_vowels_drop30", "cde-fwp", "X", "a" * 64]


@pytest.mark.parametrize("name", GOOD)
def test_identifiers_are_names(name: str) -> None:
    assert is_name(name) and check_name(name, "x") == name


@pytest.mark.parametrize("name", BAD + [None, 3, ["a"]])
def test_anything_else_is_refused_naming_what_is_allowed(name: object) -> None:
    assert not is_name(name)
    with pytest.raises(ConfigError, match="is not a valid name; allowed: a letter followed by"):
        check_name(name, "argument DATASET")


def test_errors_echo_a_short_prefix_of_a_long_value() -> None:
    assert len(shown("x" * 10_000)) <= 40
    assert shown(list(range(10**6))) == "<list of 1000000>"


def test_a_path_outside_its_folder_or_the_folder_itself_is_refused(tmp_path: Path) -> None:
    (tmp_path / "project" / "data").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "project" / "data" / "link").symlink_to(tmp_path / "elsewhere")
    assert inside(tmp_path / "project" / "data" / "x", tmp_path / "project", "p") == tmp_path / "project" / "data" / "x"
    for bad in (tmp_path / "project", tmp_path / "project" / ".." / "elsewhere", tmp_path / "project" / "data" / "link"):
        with pytest.raises(ConfigError, match="lies outside"):
            inside(bad, tmp_path / "project", "p")


def test_paths_built_from_names_check_them(tmp_path: Path) -> None:
    for bad in BAD:
        for build in (lambda n: processed_dir(tmp_path, n), lambda n: raw_dir(tmp_path, n),
                      lambda n: search_result_path(tmp_path, n, "cfc"), lambda n: final_result_path(tmp_path, "xor", n)):
            with pytest.raises(ConfigError, match="not a valid name"):
                build(bad)
    (tmp_path / "data" / "processed").mkdir(parents=True)
    (tmp_path / "data" / "processed" / "xor").symlink_to(tmp_path.parent)  # a name that is a link out
    with pytest.raises(ConfigError, match="lies outside"):
        processed_dir(tmp_path, "xor")


def _tree(*folders: Path) -> dict[str, str]:
    """Every file under the folders with its content hash (links as their target)."""
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink():
                out[str(path)] = "-> " + str(path.readlink())
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[str(path)] = "dir"
    return out


@pytest.fixture
def filled(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A project with processed data, raw files, results and reports, and a folder beside it."""
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=200, n_test=20, seed=3)))
    (project / "data" / "raw" / "xor").mkdir(parents=True)
    (project / "data" / "raw.lock").write_text("{}\n")
    for stage in ("search", "final"):
        (project / "results" / "xor" / stage).mkdir(parents=True)
        (project / "results" / "xor" / stage / "cfc.json").write_text('{"kept": true}\n')
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("must survive\n")
    return project, outside


COMMANDS = {
    "prepare": lambda n: ["prepare", n],
    "fetch": lambda n: ["fetch", n],
    "search-dataset": lambda n: ["search", n, "cfc"],
    "search-family": lambda n: ["search", "xor", n],
    "final-dataset": lambda n: ["final", n, "cfc"],
    "final-family": lambda n: ["final", "xor", n],
    "promote": lambda n: ["promote", "--dataset", n, "--dry-run"],
    "predict": lambda n: ["predict", n, "series.csv"],
}
REFUSED = [".", "..", "", "a/b", "../../results", "/", "/tmp/x"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_name_that_is_a_path_and_touches_nothing(filled: tuple[Path, Path],
                                                                          command: str) -> None:
    project, outside = filled
    before = _tree(project, outside)
    for name in REFUSED:
        result = CliRunner().invoke(app, [*COMMANDS[command](name), "--root", str(project)])
        assert result.exit_code == 2, (name, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not a valid name; allowed:" in lines[0], (name, result.stderr)
        assert _tree(project, outside) == before, name


def test_a_params_file_naming_a_path_as_dataset_is_refused_before_prepare(filled: tuple[Path, Path]) -> None:
    project, outside = filled
    (project / "params.yaml").write_text(
        "datasets: ['..']\nfamilies: [cfc]\nprepare:\n  '..': {kind: xor}\n")
    before = _tree(project, outside)
    result = CliRunner().invoke(app, ["prepare", "..", "--root", str(project)])
    assert result.exit_code == 2 and "not a valid name" in result.stderr
    assert _tree(project, outside) == before


@pytest.mark.parametrize("name", REFUSED)
def test_the_stage_functions_refuse_them_too(filled: tuple[Path, Path], name: str) -> None:
    project, outside = filled
    before = _tree(project, outside)
    with pytest.raises(ConfigError, match="not a valid name"):
        search(project, name, "cfc", SearchParams())
    with pytest.raises(ConfigError, match="not a valid name"):
        search(project, "xor", name, SearchParams())
    with pytest.raises(ConfigError, match="not a valid name"):
        final(project, name, "cfc", FinalParams())
    with pytest.raises(ConfigError, match="not a valid name"):
        final(project, "xor", name, FinalParams())
    assert _tree(project, outside) == before
