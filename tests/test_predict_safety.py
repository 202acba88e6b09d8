"""`ctsweep predict` refuses, in one line and before anything is written, what would lose a file or
mislead (issue 31, items 1 and 5): `--out` over an existing, project or input file; a processed
(standardised) split; complex values; values beyond the training range; and it neutralises
spreadsheet formulas in the ids it writes.

Each refusal runs the real command (typer's runner, in process) on a real project with a real
registered model, and asserts the one line of error, the exit status 2 and that no file changed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.serving.screening import REFUSE_SIGMAS
from tests.conftest import REPO, params_for_tests
from tests.test_predict import METAS, _register, _series, _write_csv, _write_npz


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project (params.yaml, search spaces, a processed split) with a champion for `toy`."""
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(REPO / "search_spaces", root / "search_spaces")
    (root / "params.yaml").write_text(params_for_tests((REPO / "params.yaml").read_text()))
    processed = root / "data" / "processed" / "toy"
    processed.mkdir(parents=True)
    s = _series()
    np.savez(processed / "train.npz", x=(s.x - 1.0) / 2.0, t=s.t, mask=s.mask, y=np.array([0, 1, 2]))
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        _register(root, METAS["toy"])
        yield root


@pytest.fixture
def root(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(project)
    return project


def _snapshot(*folders: Path) -> dict[str, str]:
    """Every file under `folders` (the MLflow store left out: loading a model may touch it) -> sha256."""
    files = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.name.startswith("mlflow.db") and "mlruns" not in path.parts:
                files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def _predict(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["predict", "toy", *args, "--root", str(root)])
    return result.exit_code, result.stdout, result.stderr


def _refused(root: Path, tmp_path: Path, *args: str) -> str:
    """Run a predict that must be refused: exit status 2, one line, every file as it was; the line."""
    before = _snapshot(root, tmp_path)
    code, stdout, stderr = _predict(root, *args)
    assert code == 2, (code, stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctsweep: error: "), stderr
    assert stdout == ""
    assert _snapshot(root, tmp_path) == before  # nothing written, replaced or left half-written
    return lines[0]


# --------------------------------------------------------------------------------- --version


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5", "", "9" * 5000])
def test_a_version_that_is_no_number_is_one_line(tmp_path: Path, value: str) -> None:
    """Issue 73, item 5: `--version abc` was Typer's six-line usage box."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "params.yaml").write_text(params_for_tests((REPO / "params.yaml").read_text()))
    series = _write_npz(tmp_path / "s.npz", _series())
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, ["predict", "toy", str(series), "--version", value, "--root", str(root)])
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    shown = repr(value) if len(value) <= 40 else "'" + "9" * 40 + "...' (5000 characters)"
    assert result.stderr.splitlines() == [
        f"ctsweep: error: option --version: {shown} is not a version number; allowed: a version of the registered "
        f"model ctsweep-toy, a whole number from 1 (e.g. --version 3), or no --version for the champion"]
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("argv, line", [
    (["compare", "--tolerance", "x", "a", "b"], "option --tolerance of ctsweep compare: Input should be a valid number, "
     "unable to parse string as a number; allowed: a number of at least 0.0"),
    (["optuna-dashboard", "--port", "abc"], "option --port of ctsweep optuna-dashboard: Input should be a valid integer, "
     "unable to parse string as an integer; allowed: a whole number from 1 to 65535"),
    (["optuna-dashboard", "--port", "0"], "option --port of ctsweep optuna-dashboard: Input should be greater than or "
     "equal to 1; allowed: a whole number from 1 to 65535"),
    (["postgres", "start", "--port", "x"], "option --port of ctsweep postgres start: Input should be a valid integer, "
     "unable to parse string as an integer; allowed: a whole number")])
def test_an_option_of_the_wrong_type_or_range_is_one_line(tmp_path: Path, argv: list[str], line: str) -> None:
    """Any command's option Typer cannot take (pipeline.cli.usage): one line, not Typer's usage box."""
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, argv)  # refused while parsing: before any command runs
    assert (result.exit_code, result.stdout, result.stderr.splitlines()) == (2, "", [f"ctsweep: error: {line}"])
    assert _snapshot(tmp_path) == before


# --------------------------------------------------------------------------------- --out


@pytest.mark.parametrize("force", [False, True])
def test_out_never_replaces_params_yaml(root: Path, tmp_path: Path, force: bool) -> None:
    series = _write_csv(tmp_path / "s.csv", _series())
    line = _refused(root, tmp_path, str(series), "--out", "params.yaml", *(["--force"] if force else []))
    assert line == ("ctsweep: error: --out params.yaml: is a file of the project (params.yaml); predictions are "
                    "never written there, --force or not: give a path outside data, results, reports, mlruns, ... "
                    "ending in .csv")


@pytest.mark.parametrize("force", [False, True])
def test_out_never_replaces_a_processed_split(root: Path, tmp_path: Path, force: bool) -> None:
    series = _write_npz(tmp_path / "s.npz", _series())
    train = root / "data" / "processed" / "toy" / "train.npz"
    line = _refused(root, tmp_path, str(series), "--out", str(train), *(["--force"] if force else []))
    assert f"--out {train}: is a file of the project (data/processed/toy/train.npz)" in line
    assert "--force or not" in line


@pytest.mark.parametrize("force", [False, True])
def test_out_never_replaces_its_input(root: Path, tmp_path: Path, force: bool) -> None:
    series = _write_csv(tmp_path / "s.csv", _series())
    line = _refused(root, tmp_path, str(series), "--out", str(series), *(["--force"] if force else []))
    assert line == (f"ctsweep: error: --out {series}: is the input file; predictions never replace their input, "
                    f"--force or not: give another path ending in .csv")


def test_out_through_a_link_to_a_project_file_is_refused(root: Path, tmp_path: Path) -> None:
    link = tmp_path / "innocent.csv"
    link.symlink_to(root / "params.yaml")
    series = _write_npz(tmp_path / "s.npz", _series())
    line = _refused(root, tmp_path, str(series), "--out", str(link), "--force")
    assert "is a file of the project (params.yaml)" in line


def test_an_existing_out_file_is_replaced_only_with_force(root: Path, tmp_path: Path) -> None:
    series, out = _write_npz(tmp_path / "s.npz", _series()), tmp_path / "mine.csv"
    out.write_text("my own notes\n")
    line = _refused(root, tmp_path, str(series), "--out", str(out))
    assert line == (f"ctsweep: error: --out {out}: exists; nothing was written: pass --force to replace it, or "
                    f"give another path")
    code, _, stderr = _predict(root, str(series), "--out", str(out), "--force")
    assert code == 0, stderr
    assert out.read_text().splitlines()[0] == "series,prediction,p_low,p_mid,p_high"


def test_out_must_be_a_csv_file_and_not_a_folder(root: Path, tmp_path: Path) -> None:
    series = _write_npz(tmp_path / "s.npz", _series())
    line = _refused(root, tmp_path, str(series), "--out", str(tmp_path / "notes.txt"))
    assert line.endswith("predictions are written as CSV; give a path ending in .csv (not '.txt')")
    (tmp_path / "folder.csv").mkdir()
    line = _refused(root, tmp_path, str(series), "--out", str(tmp_path / "folder.csv"), "--force")
    assert line.endswith("folder.csv: is a folder; give a file path ending in .csv")


# --------------------------------------------------------------------------------- inputs


def test_a_processed_split_is_refused_naming_original_units(root: Path, tmp_path: Path) -> None:
    train = root / "data" / "processed" / "toy" / "train.npz"
    line = _refused(root, tmp_path, str(train), "--out", str(tmp_path / "p.csv"))
    assert line == (f"ctsweep: error: {train}: refused, nothing was predicted: a processed split of this project "
                    f"(data/processed/), standardised for training, while a model takes series in original units; "
                    f"convert x back with x * norm_std + norm_mean from data/processed/toy/meta.json and save it "
                    f"elsewhere")


def test_standardised_values_elsewhere_are_refused(root: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(40, 6, 2)).astype(np.float32)  # 240 values per channel, mean ~0, std ~1
    path = tmp_path / "standardised.npz"
    np.savez(path, x=z, t=np.tile(np.arange(6, dtype=np.float32), (40, 1)))
    line = _refused(root, tmp_path, str(path))
    assert line.startswith(f"ctsweep: error: {path}: refused, nothing was predicted: the values look standardised "
                           f"(mean ~0 and standard deviation ~1 in each of 2 channel(s)")
    assert "training mean ± std: 'a' 1 ± 2, 'b' -2 ± 0.5" in line and "x * norm_std + norm_mean" in line
    # the same series in original units are predicted
    original = z * np.float32([2.0, 0.5]) + np.float32([1.0, -2.0])
    np.savez(path, x=original, t=np.tile(np.arange(6, dtype=np.float32), (40, 1)))
    code, stdout, stderr = _predict(root, str(path))
    assert code == 0 and len(stdout.splitlines()) == 41, stderr


def test_complex_values_are_refused(root: Path, tmp_path: Path) -> None:
    s = _series()
    path = tmp_path / "complex.npz"
    np.savez(path, x=s.x.astype(np.complex128), t=s.t)
    line = _refused(root, tmp_path, str(path), "--out", str(tmp_path / "p.csv"))
    assert line == (f"ctsweep: error: {path}: array 'x' has dtype complex128; expected real numbers (bool, int or "
                    f"float); complex values are not taken, not even with a zero imaginary part")
    np.savez(path, x=s.x, t=s.t.astype(np.complex64))
    assert "array 't' has dtype complex64" in _refused(root, tmp_path, str(path))
    np.savez(path, x=s.x, t=s.t, mask=s.mask.astype(np.complex64))
    assert "mask has dtype complex64; expected bool" in _refused(root, tmp_path, str(path))


@pytest.mark.parametrize("value", [1e30, -1e30, 1.0 + 2.0 * (REFUSE_SIGMAS + 1)])
def test_values_beyond_the_refusal_range_are_refused_per_series(root: Path, tmp_path: Path, value: float) -> None:
    s = _series()
    x = s.x.copy()
    x[1, 0, 0] = value  # channel a: mean 1, std 2
    path = _write_npz(tmp_path / "s.npz", type(s)(s.ids, x, s.t, s.mask))
    line = _refused(root, tmp_path, str(path), "--out", str(tmp_path / "p.csv"))
    assert line.startswith(f"ctsweep: error: {path}: refused, nothing was predicted: values more than 1000 training "
                           f"standard deviations from the training mean, beyond every training value")
    assert "in 1 of 3 series ('s2') (worst: series 's2', channel 'a' = " in line


def test_values_just_inside_the_refusal_range_are_predicted_with_a_warning(root: Path, tmp_path: Path) -> None:
    s = _series()
    x = s.x.copy()
    x[1, 0, 0] = 1.0 + 2.0 * (REFUSE_SIGMAS - 1)
    path, out = _write_npz(tmp_path / "s.npz", type(s)(s.ids, x, s.t, s.mask)), tmp_path / "p.csv"
    code, _, stderr = _predict(root, str(path), "--out", str(out))
    assert code == 0 and out.exists()
    warning, written = stderr.splitlines()
    # s2's b = 4 is 12 std out too
    assert warning.startswith(f"ctsweep: warning: {path}: 2 value(s) in 1 of 3 series ('s2') lie more than 10")
    assert written == f"3 prediction row(s) -> {out}"


def test_errors_echo_only_a_short_prefix_of_a_value(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("series,time,a,b\ns1,0," + "9" * 5000 + "x,1\n")
    line = _refused(root, tmp_path, str(path))
    assert line.startswith(f"ctsweep: error: {path}: line 2, column 'a': '99999") and "..." in line
    assert len(line) < len(str(path)) + 200
    ids = np.array(["=" + "A" * 5000 + "\nB", "ok", "=" + "A" * 5000 + "\nB"])
    s = _series()
    np.savez(tmp_path / "ids.npz", x=s.x, t=s.t, ids=ids)
    line = _refused(root, tmp_path, str(tmp_path / "ids.npz"))
    assert "appears twice" in line and len(line) < len(str(tmp_path)) + 200


# --------------------------------------------------------------------------------- input files


def test_a_csv_separated_by_semicolons_is_refused_naming_the_separator(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "semi.csv"
    path.write_text("series;time;a;b\ns1;0;1.5;2\n")
    line = _refused(root, tmp_path, str(path))
    assert "is separated by ';', not by commas" in line and "missing columns" not in line


def test_a_time_beyond_float32_is_refused_in_one_line_without_numpy_warnings(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "far.csv"
    path.write_text("series,time,a,b\ns1,0,1,2\ns1,1e300,1,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warnings were printed before the error line
        line = _refused(root, tmp_path, str(path))
    assert line == (f"ctsweep: error: {path}: line 3, column 'time': '1e300' is beyond the float32 range the model "
                    f"reads times in; allowed: finite times of magnitude up to 3.4e+38")


def test_a_fifo_or_a_link_to_a_device_is_named_for_what_it_is(root: Path, tmp_path: Path) -> None:
    """Not "no such file", and never read (a FIFO would block, /dev/zero never end)."""
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    assert _refused(root, tmp_path, str(fifo)) == (
        f"ctsweep: error: {fifo}: a FIFO (named pipe), not a regular file; allowed: a .csv or .npz file")
    link = tmp_path / "zero.csv"
    link.symlink_to("/dev/zero")
    assert _refused(root, tmp_path, str(link)) == (
        f"ctsweep: error: {link}: a character device (a link to /dev/zero), not a regular file; "
        f"allowed: a .csv or .npz file")


def test_csv_series_ids_keep_a_leading_tab_or_carriage_return(root: Path, tmp_path: Path) -> None:
    """As an .npz's ids do (test_formula_ids_are_neutralised_in_the_csv_and_on_stdout): read as
    written, then neutralised in the predictions, never stripped into another series' name."""
    ids = ["\tfoo", "\rbar", "plain"]
    path = tmp_path / "ids.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["series", "time", "a", "b"])
        for i, name in enumerate(ids):
            writer.writerows([[name, 0, 1.0 + i, -2.0], [name, 1, 1.5, -2.5 + i]])
    out = tmp_path / "p.csv"
    code, _, stderr = _predict(root, str(path), "--out", str(out))
    assert code == 0, stderr
    with open(out, newline="") as f:
        assert [r["series"] for r in csv.DictReader(f)] == ["'\tfoo", "'\rbar", "plain"]


# --------------------------------------------------------------------------------- formulas in ids


FORMULAS = ["=cmd|' /C calc'!A0", "+SUM(A1:A2)", "-2+3+cmd|' /C calc'!A0", "@SUM(A1)", "\tfoo", "\rbar"]


def test_formula_ids_are_neutralised_in_the_csv_and_on_stdout(root: Path, tmp_path: Path) -> None:
    ids = [*FORMULAS, "-1", "+2.5e3", "plain"]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(len(ids), 3, 2)).astype(np.float32) * np.float32([2.0, 0.5]) + np.float32([1.0, -2.0])
    path = tmp_path / "ids.npz"
    np.savez(path, x=x, t=np.tile(np.arange(3, dtype=np.float32), (len(ids), 1)), ids=np.array(ids))
    out = tmp_path / "p.csv"
    code, _, stderr = _predict(root, str(path), "--out", str(out))
    assert code == 0, stderr
    with open(out, newline="") as f:
        written = [r["series"] for r in csv.DictReader(f)]
    assert written == ["'" + f for f in FORMULAS] + ["-1", "+2.5e3", "plain"]
    code, stdout, _ = _predict(root, str(path))
    assert code == 0 and [r["series"] for r in csv.DictReader(io.StringIO(stdout, newline=""))] == written


@pytest.mark.slow  # ~10 s: a fresh process importing MLflow, as a user runs it
def test_a_refused_out_is_one_line_in_a_real_process(root: Path, tmp_path: Path) -> None:
    from tests.test_one_line_errors import _run

    series = _write_npz(tmp_path / "s.npz", _series())
    before = _snapshot(root, tmp_path)
    done = _run("predict", "toy", str(series), "--out", "dvc.lock", "--force", "--root", str(root))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "ctsweep: error: --out dvc.lock: is a file of the project (dvc.lock); predictions are never written there, "
        "--force or not: give a path outside data, results, reports, mlruns, ... ending in .csv"], done.stderr
    assert _snapshot(root, tmp_path) == before
