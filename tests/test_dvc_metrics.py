"""What DVC prints of a report (issue 31, item 3): `dvc metrics show` and `dvc metrics diff` see
numbers only, every number the report wrote for DVC and nothing dropped, one row per cell (dataset,
family) in a width a terminal shows, and `n_parameters` where DVC's "params" would mislead.

The real DVC runs on a report the real `report` writes from hand-made results (tests/test_report.py's
helpers) in a fresh git + DVC project with the repository's dvc.yaml: the default's six families,
one of them failed and one marked (mostly failed), so the names are as wide as a default run's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.reporting.dvc_metrics import KEYS, SCORES, cell_metrics
from pipeline.reporting.report import report
from pipeline.stores.paths import final_result_path, search_result_path
from tests.conftest import REPO
from tests.test_marks import _failed_final
from tests.test_report import _final, _search, _write

DVC = str(Path(sys.executable).parent / "dvc")
DATASET = "japanese_vowels"
FAMILIES = ["cfc", "cde_fwp_delta", "cdr_nde", "ode_rnn_tw", "ncde", "ode_rnn"]  # params.yaml's default
FAILED, MARKED, BEST = "ode_rnn_tw", "cdr_nde", "cfc"
WIDTH = 150  # characters: `dvc metrics show` of the default's six cells is 142 wide (it was one 3,000-wide row)


def _cell(root: Path, family: str) -> Path:
    return root / "reports" / "metrics" / DATASET / f"{family}.json"


def _dvc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([DVC, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"dvc {args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _results(root: Path, families: list[str], better: str | None = None) -> None:
    """Final and search records of every family; `better`: that family scores above all others."""
    for i, family in enumerate(families):
        if family == FAILED:
            record = _failed_final(DATASET, family)
        else:
            vals = [0.95, 0.93, 0.94] if family == better else [0.9 - 0.01 * i, 0.8 - 0.01 * i, 0.85]
            record = {**_final(family, vals, [v - 0.05 for v in vals]), "dataset": DATASET}
            record["n_failed"] = 3 if family == MARKED else 1  # 3 of 4 trials: mostly failed
        _write(final_result_path(root, DATASET, family), record)
        _write(search_result_path(root, DATASET, family), _search([1e-3, 3e-3]))
    (root / "params.yaml").write_text(f"datasets: [{DATASET}]\nfamilies: {families}\n"
                                      f"prepare: {{{DATASET}: {{kind: uea, name: JapaneseVowels}}}}\n")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    _dvc(tmp_path, "init", "-q")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    _results(tmp_path, FAMILIES)
    report(tmp_path, [DATASET], FAMILIES)
    return tmp_path


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_dvc_shows_every_number_the_report_wrote_and_nothing_else(project: Path) -> None:
    done = _dvc(project, "metrics", "show", "--json", "-v")  # -v: DVC's debug lines, among them what it drops
    log = done.stdout + done.stderr
    assert "DEBUG" in log and "Could not parse" not in log and "unsupported type" not in log, log
    shown = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))[""]["data"]
    assert all("error" not in result for result in shown.values()), shown
    written = {str(_cell(project, f).relative_to(project)): json.loads(_cell(project, f).read_text()) for f in FAMILIES}
    assert {path: result["data"] for path, result in shown.items()} == written  # a row per cell, all of each
    assert all(_is_number(v) for numbers in written.values() for v in numbers.values())
    cells = json.loads((project / "reports" / "metrics.json").read_text())[DATASET]
    for family, cell in cells.items():  # the same numbers as metrics.json, whose marks DVC only counts
        numbers = written[f"reports/metrics/{DATASET}/{family}.json"]
        assert numbers["n_marks"] == len(cell["marks"]) and numbers["best"] == int(family == BEST)
        assert "params" not in cell and "params" not in numbers
        if family == FAILED:
            assert numbers == {"best": 0, "n_marks": 1, "n_seeds": 0} and cell["status"] == "failed"
        else:
            assert cell["n_parameters"] == 1234  # the final record's "params", renamed
            assert numbers == {"best": int(cell["best"]), "n_marks": len(cell["marks"]),
                               "n_parameters": 1234, "n_seeds": 3, **{k: cell[k] for k in SCORES}}
    assert written[f"reports/metrics/{DATASET}/{MARKED}.json"]["n_marks"] == 1


def test_the_table_has_a_row_per_cell_in_a_terminal_s_width(project: Path) -> None:
    lines = _dvc(project, "metrics", "show").stdout.splitlines()
    assert lines[0].split() == ["Path", *sorted(KEYS)]
    assert len(lines) == 1 + len(FAMILIES) and max(map(len, lines)) <= WIDTH, "\n".join(lines)
    for line in lines[1:]:
        path, *values = line.split()
        assert path.startswith(f"reports/metrics/{DATASET}/") and len(values) == len(KEYS)
        assert all(v == "-" or float(v) == float(v) for v in values)  # numbers; "-": a failed cell's missing scores
    failed = next(line.split()[1:] for line in lines if f"/{FAILED}.json" in line)
    assert failed == ["0", "1", "-", "0", "-", "-", "-", "-"]  # best, n_marks, n_parameters, n_seeds, scores


def test_metrics_diff_is_empty_for_a_rerun_and_names_each_changed_number(project: Path) -> None:
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "report"],
                   cwd=project, check=True)
    report(project, [DATASET], FAMILIES)  # the same results again: a reproduction shows nothing
    assert _dvc(project, "metrics", "diff").stdout.strip() == ""
    _results(project, FAMILIES, better="ncde")
    report(project, [DATASET], FAMILIES)
    diff = json.loads(_dvc(project, "metrics", "diff", "--json").stdout)
    ncde, cfc = (f"reports/metrics/{DATASET}/{f}.json" for f in ("ncde", BEST))
    assert set(diff) == {ncde, cfc}  # the new best and the old one; nothing else changed
    assert diff[cfc] == {"best": {"old": 1, "new": 0, "diff": -1}}
    assert set(diff[ncde]) == {"best", *SCORES}
    assert all(_is_number(x) for change in diff[ncde].values() for x in change.values())
    lines = _dvc(project, "metrics", "diff").stdout.splitlines()
    assert lines[0].split() == ["Path", "Metric", "HEAD", "workspace", "Change"] and len(lines) == 1 + 6
    assert max(map(len, lines)) <= WIDTH


def test_a_cell_no_longer_reported_leaves_no_row(project: Path) -> None:
    report(project, [DATASET], [f for f in FAMILIES if f != "ncde"])  # ncde taken out of params.yaml
    assert not _cell(project, "ncde").exists() and _cell(project, BEST).exists()
    report(project, [], [])  # no dataset left: its folder goes too
    assert not (project / "reports" / "metrics" / DATASET).exists()


def test_a_cell_s_numbers_never_hold_what_dvc_drops_or_shows_as_text() -> None:
    ok = {"status": "ok", "best": True, "marks": [{"mark": "edge", "detail": "lr"}], "n_seeds": 5, "metric": "accuracy",
          "n_parameters": 7, "val_mean": 0.9, "val_std": 0.0, "test_mean": None, "test_std": 0.1, "p_vs_best": None}
    assert cell_metrics(ok) == {"best": 1, "n_marks": 1, "n_parameters": 7, "n_seeds": 5, "test_std": 0.1,
                                "val_mean": 0.9, "val_std": 0.0}  # sorted as DVC's columns; no null, string, list
    failed = {"status": "failed", "marks": [{"mark": "failed", "detail": "OOM"}], "n_trials": 4, "errors": ["OOM"]}
    assert cell_metrics(failed) == {"best": 0, "n_marks": 1, "n_seeds": 0}
