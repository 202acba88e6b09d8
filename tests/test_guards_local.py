"""A local CSV that was accepted or badly reported (issue 31, item 5): 'nan' text, a NUL byte, a
30 MB cell, a UTF-8 byte-order mark, a ';' or tab separator. Each refusal is exactly one line on
stderr with exit status 2, echoes at most a short prefix of a value, and leaves every file a
previous good `fetch`/`prepare` wrote (data/raw, data/raw.lock, data/processed) as it was; the
byte-order mark is read as UTF-8."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.data.contract import load_dataset
from pipeline.data.kinds.local.long_csv import read_long_csv
from pipeline.errors import DataError, excerpt
from tests.conftest import default_params, write_params
from tests.test_local_data import csv_rows

HEADER = "series,time,a,b,label"
CTSWEEP = Path(sys.executable).with_name("ctsweep")


def _text(rows: list[str], header: str = HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def _cell(rows: list[str], line: int, column: int, value: str) -> list[str]:
    """rows with the cell at CSV line `line` (the header is line 1), field `column`, set to value."""
    rows = list(rows)
    fields = rows[line - 2].split(",")
    fields[column] = value
    rows[line - 2] = ",".join(fields)
    return rows


GOOD = csv_rows()
SERIES_AT_9 = GOOD[7].split(",")[0]  # the series of CSV line 9
# case -> (the file's bytes, the one error line after "ctsweep: error: <file>: ")
BAD: dict[str, tuple[bytes, str]] = {
    "nan_channel": (_text(_cell(GOOD, 9, 3, "nan")).encode(),
                    rf"line 9, series '{SERIES_AT_9}', column 'b': 'nan' is not a finite number; leave the cell empty "
                    r"when not observed: an empty cell is the one missing value \('nan', 'NA' and 'inf' are refused\)"),
    "NaN_cells": (_text(_cell(_cell(GOOD, 9, 3, "NaN"), 12, 3, "NaN")).encode(),
                  r"line 9, .*column 'b': 'NaN' is not a finite number \(2 such cells in this column\); leave the cell"),
    "inf_channel": (_text(_cell(GOOD, 9, 3, "-inf")).encode(), r"line 9, .*column 'b': '-inf' is not a finite number"),
    "nan_time": (_text(_cell(GOOD, 9, 1, "nan")).encode(), r"line 9, .*column 'time': 'nan' is not a finite number$"),
    "nan_label": (_text(_cell(GOOD, 9, 4, "NaN")).encode(),
                  rf"line 9, series '{SERIES_AT_9}': label 'NaN' reads as a missing or infinite number \(1 such label "
                  r"cell\(s\)\); every row names its label: a class name, or a finite number"),
    "nul_in_label": (_text(_cell(GOOD, 9, 4, "wa\x00lk")).encode(),
                     r"line 9, column 'label': a NUL byte \(\\x00\) in the cell, which would be cut short there; "
                     r"allowed: UTF-8 text without NUL bytes"),
    "nul_in_number": (_text(_cell(GOOD, 30, 2, "1.5\x00")).encode(), r"line 30, column 'a': a NUL byte"),
    "huge_cell": (_text(_cell(GOOD, 9, 2, "7" * 30_000_000)).encode(),
                  r"line 9, .*column 'a': '7{40}\.\.\.' \(30000000 characters\) is not a finite number"),
    "huge_series_name": (_text(_cell(_cell(GOOD, 9, 0, "s" * 30_000_000), 9, 2, "high")).encode(),
                         r"line 9, series 's{40}\.\.\.' \(30000000 characters\), column 'a': 'high' is not a finite"),
    "semicolons": (_text([r.replace(",", ";") for r in GOOD], HEADER.replace(",", ";")).encode(),
                   r"line 1: the header 'series;time;a;b;label' is separated by ';', not by commas; allowed: "
                   r"comma-separated values with '\.' as the decimal mark"),
    "tabs": (_text([r.replace(",", "\t") for r in GOOD], HEADER.replace(",", "\t")).encode(),
             r"line 1: the header 'series\\ttime\\ta\\tb\\tlabel' is separated by tabs, not by commas"),
    "utf16": (_text(GOOD).encode("utf-16"), r"UTF-16 text \(its byte-order mark b'\\xff\\xfe' begins the file\); "
                                            r"allowed: UTF-8"),
}


def _project(root: Path) -> Path:
    params = default_params()
    params["prepare"]["mine"] = {"kind": "local", "path": "mine.csv"}
    write_params(root, params)
    return root / "mine.csv"


def _data(root: Path) -> dict[str, bytes]:
    """Every file under data/ (what fetch and prepare wrote), by path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "data").rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose dataset `mine` was prepared from a good CSV (the files a refusal must keep)."""
    root = tmp_path_factory.mktemp("prepared")
    _project(root).write_text(_text(GOOD))
    result = CliRunner().invoke(app, ["prepare", "mine", "--root", str(root)])
    assert result.exit_code == 0, result.output
    return root


@pytest.mark.parametrize("command", ["prepare", "fetch"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_csv_is_one_line_and_keeps_what_was_written(prepared: Path, case: str, command: str) -> None:
    source = prepared / "mine.csv"
    before = _data(prepared)
    data, message = BAD[case]
    source.write_bytes(data)
    try:
        result = CliRunner().invoke(app, [command, "mine", "--root", str(prepared)])
    finally:
        source.write_text(_text(GOOD))
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert re.fullmatch(rf"ctsweep: error: {re.escape(str(source))}: {message}.*", lines[0]), lines[0][:2000]
    assert len(lines[0]) < 600  # a value is echoed as a short prefix and its length
    assert _data(prepared) == before  # the copy, data/raw.lock and the processed dataset are unchanged


def test_a_utf8_byte_order_mark_is_read_as_utf8(tmp_path: Path) -> None:
    source = _project(tmp_path)
    source.write_bytes(b"\xef\xbb\xbf" + _text(GOOD).encode())
    result = CliRunner().invoke(app, ["prepare", "mine", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    with_bom = load_dataset(tmp_path / "data" / "processed" / "mine")
    plain = read_long_csv(_write(tmp_path / "plain.csv", _text(GOOD)), "label", "split")
    assert with_bom.meta.channels == plain.channels == ["a", "b"]
    assert sum(with_bom.meta.sizes.values()) == len(plain.ids) == 30
    quoted = read_long_csv(_write(tmp_path / "q.csv", '\ufeff"series",time,a,b,label\n' + "\n".join(GOOD) + "\n"),
                           "label", "split")
    assert quoted.ids == plain.ids


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_an_empty_cell_is_still_the_missing_value(tmp_path: Path) -> None:
    part = read_long_csv(_write(tmp_path / "d.csv", _text(_cell(GOOD, 9, 3, ""))), "label", "split")
    assert np.isnan(np.concatenate(part.values)).sum() > 0


def test_fetch_reads_a_changed_csv_once_for_prepare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fetch reads a changed file before copying it; prepare's build then takes that read."""
    import pipeline.data.kinds.local.long_csv as long_csv

    calls: list[str] = []
    real = long_csv.check_csv_bytes
    monkeypatch.setattr(long_csv, "check_csv_bytes", lambda path, where: (calls.append(str(path)), real(path, where)))
    _project(tmp_path).write_text(_text(GOOD))
    assert CliRunner().invoke(app, ["prepare", "mine", "--root", str(tmp_path)]).exit_code == 0
    assert calls == [str(tmp_path / "mine.csv")]  # parsed once: the source, before it was copied
    assert CliRunner().invoke(app, ["prepare", "mine", "--root", str(tmp_path)]).exit_code == 0
    assert calls[1:] == [str(tmp_path / "data" / "raw" / "mine" / "mine.csv")]  # unchanged: not copied, the copy read


def test_the_real_process_prints_one_short_line_for_a_30_mb_cell(prepared: Path) -> None:
    source = prepared / "mine.csv"
    before = _data(prepared)
    source.write_bytes(BAD["huge_cell"][0])
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONWARNINGS")}
    command = [str(CTSWEEP)] if CTSWEEP.exists() else [sys.executable, "-m", "pipeline.cli.app"]
    try:
        done = subprocess.run([*command, "prepare", "mine", "--root", str(prepared)], capture_output=True, text=True,
                              env=env, timeout=300)
    finally:
        source.write_text(_text(GOOD))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and len(done.stderr) < 600, done.stderr[:2000]
    assert "(30000000 characters) is not a finite number" in done.stderr
    assert _data(prepared) == before


@pytest.mark.parametrize("value, shown", [
    ("abc", "'abc'"),
    ("x" * 50, "'" + "x" * 40 + "...' (50 characters)"),
    (b"\x00" * 41, repr(b"\x00" * 40)[:-1] + "...' (41 bytes)"),
    ("it's" * 20, '"' + ("it's" * 10) + '..." (80 characters)'),
    (list(range(30)), "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (30 items)]"),
    (["y" * 41, [1]], "['" + "y" * 40 + "...' (41 characters), <list of 1>]"),
    ({"a": 1}, "<dict of 1>"),
    (12345, "12345"),
])
def test_excerpt_shows_a_short_prefix_and_the_length(value: object, shown: str) -> None:
    assert excerpt(value) == shown


def test_a_long_column_name_is_echoed_as_a_prefix(tmp_path: Path) -> None:
    """A 5000-character channel name, echoed by the channels-differ error of a folder of splits."""
    write_params(tmp_path, {**default_params(), "prepare": {**default_params()["prepare"],
                                                             "f": {"kind": "local", "path": "f"}}})
    (tmp_path / "f").mkdir()
    _write(tmp_path / "f" / "train.csv", _text(GOOD))
    _write(tmp_path / "f" / "test.csv", _text(csv_rows(9, first=30), header="series,time,a," + "c" * 5000 + ",label"))
    result = CliRunner().invoke(app, ["prepare", "f", "--root", str(tmp_path)])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "'" + "c" * 40 + "...' (5000 characters)" in result.stderr and len(result.stderr) < 600, result.stderr[:2000]
    assert not (tmp_path / "data" / "processed" / "f").exists()
