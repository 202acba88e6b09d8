"""The comparison across datasets on hand-made final results: mean ranks, Wilcoxon-Holm p-values
(checked against scipy and statsmodels directly), the power rule and the diagram's bars, win /
tie / loss, the refusal of mixed metrics, metrics.json's entry and its readers, and the
published-best table with its references.yaml checks."""

from __future__ import annotations

import csv
import itertools
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.reporting.compare import compare_runs
from pipeline.reporting.cross_dataset import METRICS_KEY, Comparison, Power, Refusal, compare
from pipeline.reporting.cross_plots import plot_cd
from pipeline.reporting.cross_tables import SELECTED_ON_TEST, power_sentence
from pipeline.reporting.references import load_references
from pipeline.reporting.report import report
from pipeline.reporting.status import cells, status
from pipeline.stores.paths import final_result_path, processed_dir, search_result_path
from tests.conftest import REPO
from tests.test_report import _final, _search, _write

DVC = str(Path(sys.executable).parent / "dvc")


def _record(tests: list[float], mode: str = "max", metric: str = "accuracy") -> dict:
    """The fields the comparison reads: the metric, its direction and the per-seed test scores."""
    return {"metric": metric, "mode": mode, "test_mean": statistics.fmean(tests),
            "seeds": [{"test": t} for t in tests]}


def _finals(means: dict[str, dict[str, float]], mode: str = "max") -> dict[str, dict[str, dict]]:
    """dataset -> family -> a record whose three seeds spread ± 0.001 around the given test mean."""
    return {d: {f: _record([m - 0.001, m, m + 0.001], mode) for f, m in fams.items()} for d, fams in means.items()}


def _ordered(n_datasets: int, families: list[str]) -> dict[str, dict[str, float]]:
    """The first family best on every dataset, the next second, ...; the gaps vary by dataset."""
    return {f"d{i}": {f: 0.9 - (k + 1) * 0.01 * (1 + i % 3) for k, f in enumerate(families)} for i in range(n_datasets)}


def test_mean_ranks_follow_a_known_ordering_and_share_tied_ranks() -> None:
    means = {"d1": {"a": 0.9, "b": 0.8, "c": 0.7}, "d2": {"a": 0.9, "b": 0.8, "c": 0.7},
             "d3": {"a": 0.8, "b": 0.9, "c": 0.7}, "d4": {"a": 0.8, "b": 0.8, "c": 0.7}}
    found = compare(_finals(means), {})
    assert isinstance(found, Comparison)
    assert found.ranks["a"] == {"d1": 1, "d2": 1, "d3": 2, "d4": 1.5} and found.ranks["c"]["d4"] == 3
    assert found.mean_ranks == {"a": pytest.approx(5.5 / 4), "b": pytest.approx(6.5 / 4), "c": 3.0}
    assert found.best == "a"
    lower_is_better = compare(_finals(means, mode="min"), {})  # an MSE: the smallest mean ranks first
    assert lower_is_better.mean_ranks["c"] == 1.0 and lower_is_better.best == "c"


def test_pairwise_p_values_are_wilcoxon_with_holm_over_every_pair() -> None:
    families = ["a", "b", "c", "d"]
    offsets = [0.031, -0.012, 0.047, 0.022, -0.005, 0.039, 0.018]  # seven datasets, distinct differences
    means = {f"d{i}": {f: 0.6 + k * o * (1 + i) / 7 + 0.01 * k for k, f in enumerate(families)}
             for i, o in enumerate(offsets)}
    found = compare(_finals(means), {})
    pairs = list(itertools.combinations(families, 2))
    raw = [sps.wilcoxon([means[d][a] for d in means], [means[d][b] for d in means]).pvalue for a, b in pairs]
    holm = multipletests(raw, method="holm")[1]
    for (a, b), expected in zip(pairs, holm):
        assert found.p_holm[a][b] == pytest.approx(expected, rel=1e-9) == found.p_holm[b][a]
    assert all(found.p_holm[f][f] == 1.0 for f in families)


def test_the_smallest_wilcoxon_p_is_two_over_two_to_the_n() -> None:
    for n in (5, 6, 10):
        wins = sps.wilcoxon([1.0 + i for i in range(n)], [0.0] * n)  # one family wins every dataset
        assert wins.pvalue == pytest.approx(Power(n, 6).smallest_p) == pytest.approx(2 / 2 ** n)
        tied = sps.wilcoxon([1.0] * n, [0.0] * n)  # every difference equal: the permutation test
        assert tied.pvalue == pytest.approx(2 / 2 ** n)
    power = Power(5, 6)
    assert (power.n_pairs, power.first_threshold) == (15, pytest.approx(0.05 / 15))
    assert not power.enough and power.needed == 10
    assert not Power(9, 6).enough and Power(10, 6).enough and Power(5, 2).needed == 6


def test_five_datasets_cannot_separate_six_families_and_draw_no_cliques(tmp_path: Path) -> None:
    families = ["a", "b", "c", "d", "e", "f"]
    found = compare(_finals(_ordered(5, families)), {})
    assert found.mean_ranks == {f: k + 1.0 for k, f in enumerate(families)}  # as clear as five datasets get
    assert not any(found.significant(a, b) for a, b in itertools.combinations(families, 2))
    assert power_sentence(found) == (
        "5 datasets cannot separate any two of 6 families with Wilcoxon–Holm at α = 0.05 (smallest possible "
        "p 0.0625 > Holm's first threshold 0.0033); at least 10 datasets are needed. The ranks are shown "
        "without cliques.")
    artists = plot_cd(tmp_path / "cd.png", found)
    assert artists["crossbars"] and not any(line.get_visible() for bar in artists["crossbars"] for line in bar)
    assert (tmp_path / "cd.png").stat().st_size > 5000


def test_enough_datasets_with_a_clear_ordering_give_cliques_and_significant_pairs(tmp_path: Path) -> None:
    means = _ordered(10, ["a", "b", "c"])
    for i, fams in enumerate(means.values()):  # d sits beside c, above it on half the datasets
        fams["d"] = fams["c"] + (0.001 + 0.0001 * i) * (1 if i % 2 else -1)
    found = compare(_finals(means), {})
    assert found.power.enough and found.power.needed == 8  # 6 pairs: 2 / 2**8 < 0.05 / 6 < 2 / 2**7
    assert found.significant("a", "b") and found.significant("a", "c") and found.significant("b", "d")
    assert not found.significant("c", "d")
    assert power_sentence(found) == ("A bar joins families that no pairwise test separates (Wilcoxon–Holm at "
                                     "α = 0.05); 5 of 6 pairs differ significantly.")
    artists = plot_cd(tmp_path / "cd.png", found)
    drawn = [line for bar in artists["crossbars"] for line in bar if line.get_visible()]
    assert len(drawn) == 1 and sorted(drawn[0].get_xdata()) == sorted([found.mean_ranks["c"], found.mean_ranks["d"]])


def test_win_tie_loss_against_the_best_family_is_welch_at_five_percent() -> None:
    best = [0.90, 0.91, 0.92]
    finals = {"d1": {"a": _record(best), "b": _record([0.80, 0.81, 0.82]), "c": _record([0.95, 0.96, 0.97])},
              "d2": {"a": _record(best), "b": _record([0.85, 0.93, 0.99]), "c": _record([0.80, 0.81, 0.82])},
              "d3": {"a": _record(best), "b": _record([0.70, 0.71, 0.72]), "c": _record([0.85, 0.86, 0.87])}}
    found = compare(finals, {})
    assert found.mean_ranks == {"a": pytest.approx(5 / 3), "b": pytest.approx(7 / 3), "c": 2.0} and found.best == "a"
    expected = {}
    for f in ("b", "c"):
        w = t = loss = 0
        for res in finals.values():
            mine, theirs = [s["test"] for s in res[f]["seeds"]], [s["test"] for s in res["a"]["seeds"]]
            p = sps.ttest_ind(mine, theirs, equal_var=False).pvalue
            if p >= 0.05:
                t += 1
            elif statistics.fmean(mine) > statistics.fmean(theirs):
                w += 1
            else:
                loss += 1
        expected[f] = (w, t, loss)
    assert found.wtl == {"a": None, **expected}
    assert expected == {"b": (0, 1, 2), "c": (1, 0, 2)}


# --- the report ---------------------------------------------------------------------------------

def _project(root: Path, means: dict[str, dict[str, float]], prepare: dict[str, str] | None = None,
             metric: dict[str, str] | None = None) -> Path:
    """Final and search records of every (dataset, family), three seeds each around the test
    mean; params.yaml naming them (prepare: dataset -> its section as YAML flow text)."""
    for d, fams in means.items():
        for f, m in fams.items():
            record = {**_final(f, [m, m + 0.01, m + 0.02], [m - 0.01, m, m + 0.01]), "dataset": d}
            record["metric"] = (metric or {}).get(d, "accuracy")
            _write(final_result_path(root, d, f), record)
            _write(search_result_path(root, d, f), _search([1e-3]))
    families = list(next(iter(means.values())))
    sections = ", ".join(f"{d}: {(prepare or {}).get(d, '{kind: xor}')}" for d in means)
    (root / "params.yaml").write_text(f"datasets: [{', '.join(means)}]\nfamilies: [{', '.join(families)}]\n"
                                      f"prepare: {{{sections}}}\n")
    return root


def _run(root: Path) -> dict:
    return report(root, _datasets(root), _families(root))


def _datasets(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "results").iterdir())


def _families(root: Path) -> list[str]:
    first = _datasets(root)[0]
    return sorted(p.stem for p in (root / "results" / first / "final").iterdir())


REAL = ["cfc", "ncde", "ode_rnn"]  # registry names, for the command line
THREE = {"d1": {"a": 0.9, "b": 0.8, "c": 0.7}, "d2": {"a": 0.85, "b": 0.86, "c": 0.6},
         "d3": {"a": 0.7, "b": 0.6, "c": 0.5}}


def test_the_report_has_the_section_diagram_ranks_and_metrics_entry(tmp_path: Path) -> None:
    root = _project(tmp_path, THREE)
    metrics = _run(root)
    text = (root / "reports" / "results.md").read_text()
    assert text.index("## d3 (accuracy, %)") < text.index("## Across datasets") < text.index("## Provenance")
    assert "| **a** (best) | 1.33 | 1 | 2 | 1 | best |" in text and "| c | 3.00 | 3 | 3 | 3 | 0/0/3 |" in text
    assert "![mean ranks across datasets](plots/cross_dataset_cd.png)" in text
    assert "3 datasets cannot separate any two of 3 families" in text and "at least 7 datasets are needed" in text
    assert "| a | — | p = 0.750 | p = 0.750 |" in text  # Wilcoxon over 3 datasets: 0.25 at best, x 3 pairs
    assert (root / "reports" / "plots" / "cross_dataset_cd.png").stat().st_size > 5000
    rows = list(csv.DictReader((root / "reports" / "ranks.csv").open()))
    assert [(r["family"], float(r["mean_rank"])) for r in rows] == [("a", pytest.approx(4 / 3)),
                                                                    ("b", pytest.approx(5 / 3)), ("c", 3.0)]
    across = metrics[METRICS_KEY]
    assert across["compared"] and across["best"] == "a" and across["datasets"] == ["d1", "d2", "d3"]
    assert across["families"]["c"] == {"mean_rank": 3.0, "ranks": {"d1": 3.0, "d2": 3.0, "d3": 3.0},
                                       "wins": 0, "ties": 0, "losses": 3}
    assert across["power"] == {"n_datasets": 3, "n_families": 3, "smallest_p": 0.25, "holm_first_threshold":
                               pytest.approx(0.05 / 3), "enough": False, "datasets_needed": 7}
    assert json.loads((root / "reports" / "metrics.json").read_text()) == json.loads(json.dumps(metrics))


def test_dvc_plots_show_draws_the_mean_ranks(tmp_path: Path) -> None:
    """The repository's dvc.yaml in a fresh DVC project: its report stage's ranks.csv plot."""
    root = _project(tmp_path, THREE)
    for cmd in (["git", "init", "-q"], [DVC, "init", "-q"]):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True, timeout=300)
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    _run(root)
    done = subprocess.run([DVC, "plots", "show", "--json"], cwd=root, capture_output=True, text=True, timeout=300)
    shown = json.loads(done.stdout)
    assert not shown.get("errors"), shown["errors"]
    [renderer] = shown.get("data", shown)["reports/ranks.csv"]
    spec = renderer["content"]
    assert [(r["family"], float(r["mean_rank"])) for r in spec["data"]["values"]] == [
        ("a", pytest.approx(4 / 3)), ("b", pytest.approx(5 / 3)), ("c", 3.0)]
    assert spec["encoding"]["x"]["field"] == "mean_rank" and spec["encoding"]["y"]["field"] == "family"


def test_readers_of_metrics_json_skip_the_comparison(tmp_path: Path) -> None:
    root = _project(tmp_path / "one", THREE)
    _run(root)
    first = (root / "reports" / "metrics.json").read_bytes()
    assert METRICS_KEY in json.loads(first)
    lines, code = status(root)
    # a verdict line per dataset, then the cells' summary: the comparison across datasets is no dataset
    assert [line.split(":")[0] for line in lines[:3]] == ["d1", "d2", "d3"]
    assert (lines[3:], code) == (["ctsweep status: all 9 cells ok, none marked"], 0)
    assert {c.dataset for c in cells(json.loads(first))} == {"d1", "d2", "d3"}
    folder = root / "reports" / "metrics"
    dvc = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    assert dvc == ["d1", *[f"d1/{f}.json" for f in "abc"], "d2", *[f"d2/{f}.json" for f in "abc"],
                   "d3", *[f"d3/{f}.json" for f in "abc"]]
    other = _project(tmp_path / "two", THREE)
    _run(other)
    assert (other / "reports" / "metrics.json").read_bytes() == first  # no timings: the same bytes
    assert compare_runs(root, other) == []


def test_a_dataset_with_a_failed_family_is_left_out_and_named(tmp_path: Path) -> None:
    root = _project(tmp_path, {**THREE, "d4": {"a": 0.5, "b": 0.4, "c": 0.3}})
    failed = {"status": "failed", "dataset": "d4", "family": "b", "metric": "accuracy", "mode": "max",
              "n_trials": 4, "n_failed": 4, "errors": ["NaN loss"]}
    _write(final_result_path(root, "d4", "b"), failed)
    metrics = _run(root)
    assert metrics[METRICS_KEY]["datasets"] == ["d1", "d2", "d3"]
    assert metrics[METRICS_KEY]["left_out"] == {"d4": ["b"]}
    text = (root / "reports" / "results.md").read_text()
    assert "Left out, a family has no result there: d4 (failed: b)." in text
    assert "averaged over the 3 datasets that have every family's result" in text


def test_mixed_metrics_or_tasks_are_refused_in_one_line(tmp_path: Path) -> None:
    real = {d: dict(zip(REAL, fams.values())) for d, fams in THREE.items()}  # the CLI checks the names
    root = _project(tmp_path, real, metric={"d2": "auroc"})
    result = CliRunner().invoke(app, ["report", "--root", str(root)])
    assert result.exit_code == 0, result.output  # the per-dataset results stand
    line = "Not compared across datasets: they differ in metric or task: d1 (accuracy), d2 (auroc), d3 (accuracy)."
    text = (root / "reports" / "results.md").read_text()
    assert f"## Across datasets\n\n{line}\n\n## Provenance" in text
    assert "## d1 (accuracy, %)" in text and "## d2 (auroc)" in text and "Pairwise tests" not in text
    assert result.stderr.count("warning") == 1 and f"ctsweep: warning: {line}" in result.stderr
    metrics = json.loads((root / "reports" / "metrics.json").read_text())
    assert metrics[METRICS_KEY] == {"compared": False, "reason": line}
    assert not (root / "reports" / "plots" / "cross_dataset_cd.png").exists()
    assert (root / "reports" / "ranks.csv").read_text() == "family,mean_rank\n"  # DVC's plot file, empty

    for d, task in (("d1", "classification"), ("d2", "binary"), ("d3", "classification")):
        _write(processed_dir(root, d) / "meta.json", {"task": task})
        for f in REAL:  # one metric again: only the tasks differ now
            path = final_result_path(root, d, f)
            _write(path, {**json.loads(path.read_text()), "metric": "accuracy"})
    _run(root)
    assert ("d1 (accuracy, classification), d2 (accuracy, binary), d3 (accuracy, classification)."
            in (root / "reports" / "results.md").read_text())


def test_one_dataset_has_no_section_and_an_empty_ranks_file(tmp_path: Path) -> None:
    root = _project(tmp_path, {"d1": THREE["d1"]})
    (root / "reports" / "plots").mkdir(parents=True)
    (root / "reports" / "plots" / "cross_dataset_cd.png").write_bytes(b"an earlier report's")
    metrics = _run(root)
    assert METRICS_KEY not in metrics and "## Across datasets" not in (root / "reports" / "results.md").read_text()
    assert (root / "reports" / "ranks.csv").read_text() == "family,mean_rank\n"
    assert not (root / "reports" / "plots" / "cross_dataset_cd.png").exists()  # stale: removed


PUBLISHED = ("sources:\n  bakeoff: {citation: 'Someone et al. 2017, The great bake off'}\nfigures: []\n"
             "published_best:\n  GunPoint: {value: 99.5, unit: percent, model: ROCKET, source: bakeoff,"
             " where: Table 3, split: official, selection: best of 30 classifiers, selected_on_test: %s}\n")


def test_published_best_sits_beside_our_best_family_on_the_archive_split(tmp_path: Path) -> None:
    prepare = {"d1": "{kind: uea, name: GunPoint}", "d2": "{kind: uea, name: GunPoint, resplit: true}",
               "d3": "{kind: uea, name: GunPoint, drop_fraction: 0.3}"}
    root = _project(tmp_path, THREE, prepare=prepare)
    (root / "references.yaml").write_text(PUBLISHED % "true")
    _run(root)
    text = (root / "reports" / "results.md").read_text()
    table = text[text.index("### Published best (UEA/UCR archive)"):]
    assert ("| d1 | GunPoint | a: 90.00 ± 1.00 | ROCKET: 99.50 [1] | -9.50 | "
            f"{SELECTED_ON_TEST} |") in table  # a is best on validation: 0.91 against b's 0.81
    assert "| d2 |" not in table and "| d3 |" not in table  # resplit, dropped observations: other test sets
    assert "[1] Someone et al. 2017, The great bake off" in text
    assert "published best on GunPoint (ROCKET): Table 3; selected: best of 30 classifiers" in text
    (root / "references.yaml").write_text(PUBLISHED % "false")
    _run(root)
    assert "| ROCKET: 99.50 [1] | -9.50 | — |" in (root / "reports" / "results.md").read_text()


def test_a_bad_published_best_entry_names_the_file_the_key_and_what_is_allowed(tmp_path: Path) -> None:
    shipped = load_references(REPO)  # the shipped section loads, each entry citing a listed source
    assert {"JapaneseVowels", "ArrowHead", "GunPoint", "ItalyPowerDemand", "OSULeaf"} <= set(shipped.published_best)
    assert all(b.source in shipped.sources for b in shipped.published_best.values())
    for good, bad, expected in (
            ("unit: percent", "unit: ratio",
             "key `published_best.GunPoint.unit` = 'ratio': Input should be 'fraction' or 'percent'"),
            ("source: bakeoff", "source: nowhere",
             "published_best.GunPoint.source 'nowhere' is not a key of `sources` (defined: ['bakeoff'])"),
            ("split: official", "split: test",
             "key `published_best.GunPoint.split` = 'test': Input should be 'official' or 'resamples'"),
            ("value: 99.5", "value: 995.0",
             "key `published_best.GunPoint`: value 995.0 in unit 'percent' is 9.95 as a fraction")):
        (tmp_path / "references.yaml").write_text((PUBLISHED % "true").replace(good, bad))
        with pytest.raises(ConfigError) as err:
            load_references(tmp_path)
        message = str(err.value)
        assert message.startswith(str(tmp_path / "references.yaml")) and expected in message, message
        assert "\n" not in message
    (tmp_path / "references.yaml").write_text((PUBLISHED % "true").replace(", selected_on_test: true", ""))
    with pytest.raises(ConfigError, match=r"key `published_best.GunPoint.selected_on_test`: Field required"):
        load_references(tmp_path)


def test_a_refusal_is_not_a_comparison() -> None:
    assert compare({"d1": _finals({"d1": {"a": 0.9}})["d1"]}, {}) is None  # one dataset: nothing across
    one_family = compare(_finals({"d1": {"a": 0.9}, "d2": {"a": 0.8}}), {})
    assert isinstance(one_family, Refusal) and "one family" in one_family.line and not one_family.warn
    finals = _finals({"d1": {"a": 0.9, "b": 0.8}, "d2": {"a": 0.8, "b": 0.7}})
    finals["d2"]["b"] = {"status": "failed", "metric": "accuracy", "mode": "max"}
    too_few = compare(finals, {})
    assert too_few == Refusal("Not compared across datasets: 1 dataset with every family's result, two needed "
                              "(left out: d2 (failed: b)).")
