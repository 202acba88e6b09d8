"""The `report` stage: a paper-style table, metrics.json and plots from the final and search results.

    reports/results.md             per dataset: test / validation mean ± std over seeds, the paper's
                                   figure, Welch's t-test against the best family, parameters,
                                   s / epoch, trials (failed), the search's gain over the reference
                                   configuration (pipeline.reporting.search_gain), and rows of the
                                   trivial baselines
                                   (pipeline.reporting.trivial); learning-rate robustness; fANOVA
                                   importances; the papers cited; provenance (commit, dvc.lock, params,
                                   and a dataset's data where it is not as published: unverified copy)
    reports/metrics.json           dataset -> family -> {val_mean, val_std, test_mean, test_std, n_seeds,
                                   metric, n_parameters, n_trials, n_failed, n_repeats, repeat_val_std,
                                   repeat_test_std, best, p_vs_best, p_vs_trivial (one-sided),
                                   search_gain (and search_gain_note where it is None),
                                   epochs_trained (over the seeds: the cost that needs no clock),
                                   status: "ok", marks: [{mark, detail}]}; a family whose every search
                                   trial failed: {dataset, family, metric, n_trials, n_failed, errors,
                                   status: "failed", marks}; `ctsweep status` and `compare` read it,
                                   promote reruns when it changes; DVC does not read it as metrics;
                                   "_baselines": dataset -> {trivial: [{name, detail, val, test}],
                                   baseline: the name cells must beat} or {not_computed: why}
    reports/metrics/<dataset>/<family>.json   the DVC metrics: the cell's numbers only, one file (one
                                   row of `dvc metrics show`) per cell (pipeline.reporting.dvc_metrics)
    reports/curves/<dataset>.csv   validation metric per epoch, mean (± std) over seeds; a row per
                                   family and epoch: family, epoch, n_seeds, mean_minus_std,
                                   mean_plus_std, validation <metric>                 (DVC plots)
    reports/lr/<dataset>.csv       validation metric against learning rate; a row per search trial
                                   and final rerun: family, stage (search | final), lr_factor
                                   (final only), lr, validation <metric>              (DVC plots)
    reports/bars/<dataset>.csv     test mean ± std per family                        (DVC plots)
    reports/cost/<dataset>.csv     per family: training_seconds, test_mean, test_std, pareto (1 or 0)
                                   (pipeline.reporting.cost)                          (DVC plots)
    reports/trials/<dataset>.csv   expected best validation metric over n search trials with its
                                   bootstrap band (pipeline.reporting.show_your_work); a row per
                                   family and n: family, n, low, high, expected best validation
                                   <metric>                                           (DVC plots)
    reports/plots/*.png            the same as pictures (pipeline.reporting.plots)
    with two or more datasets      results.md's "Across datasets" section: mean ranks, win / tie / loss
                                   against the best, Wilcoxon-Holm p-values (pipeline.reporting.cross_dataset),
                                   reports/plots/cross_dataset_cd.png, and metrics.json's "_across_datasets"
                                   (a key no dataset can have); reports/ranks.csv (family, mean_rank; DVC plots)
                                   is always written, only its header when nothing is compared
    .dvc/plots/ctsweep_*.json      the templates dvc.yaml draws curves, trials and lr with, colour by family
                                   (pipeline.reporting.plots.DVC_TEMPLATES; only in a DVC project)

The plot CSVs are long (a `family` column, no column per family) and end with the metric's
column, so dvc.yaml names no family and the y axis of `dvc plots show` names the metric.

The best family per dataset is chosen on the validation metric only, among the families that did
not fail; the marks of pipeline.reporting.marks flag the cells a reader should not trust. The report
and the plots it shows are also logged as artifacts (folder `report`) of every dataset's final runs:
the copy there links its images as `<name>.png`, the folder they are logged to, and `results.html`
beside it is the same report with the PNGs inlined, the copy MLflow's artifact viewer shows with
its plots (pipeline.reporting.html_report).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from pipeline.stores.files import write_json, write_text
from pipeline.stores.paths import reports_dir
from pipeline.reporting import classical_reference as classical
from pipeline.reporting import cross_dataset, cross_plots, plots, show_your_work, trivial
from pipeline.reporting.mlflow_copy import log_to_mlflow
from pipeline.reporting.cost import cost_rows, epochs_trained
from pipeline.reporting.cross_dataset import Comparison, Refusal
from pipeline.reporting.cross_tables import across_lines, published_lines
from pipeline.reporting.dvc_metrics import drop_stale, write_cells
from pipeline.reporting.marks import Mark, cell_marks, is_failed
from pipeline.reporting.provenance import data_notes, machine_notes, stamp
from pipeline.reporting.records import collect, read_search, split
from pipeline.reporting.references import References, load_references
from pipeline.reporting.search_gain import Gain, search_gain
from pipeline.reporting.status import BASELINES, MACHINES, VERDICTS
from pipeline.comparison.ties import best_family
from pipeline.reporting.verdict import dataset_verdict, race_line
from pipeline.reporting.tables import (data_lines, provenance_lines, references_lines, repeated, results_table,
                                       robustness_lines, sensitivity_lines, welch_vs_best)
from pipeline.stores.schema import FINAL_FOR_REPORT
from pipeline.stores.staging import staged

# No timings: metrics.json is what two runs of the same command must reproduce bit for bit
# (`ctsweep compare`, `dvc metrics diff`); seconds per epoch stay in results.md and the records,
# training seconds and the Pareto front they decide in reports/cost/ (pipeline.reporting.cost).
METRIC_KEYS = ("val_mean", "val_std", "test_mean", "test_std", "n_seeds", "metric", "n_parameters", "n_trials",
               "n_failed")
RECORD_KEYS = {"n_parameters": "params"}  # metrics.json key -> the final record's ("params" reads as DVC's params)
REPEAT_DEFAULTS = {"n_repeats": 1, "repeat_val_std": 0.0, "repeat_test_std": 0.0}  # records from before repeats
COUNT_KEYS = ("val_counts", "test_counts")  # [correct, scored] over the seeds, for accuracy (pipeline.final.counts)
FAILED_KEYS = ("dataset", "family", "metric", "n_trials", "n_failed", "errors")  # a failed cell has no scores


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def metric_column(metric: str) -> str:
    """The plot CSVs' metric column, which DVC takes as y and names the y axis with."""
    return f"validation {metric}"


CURVE_COLUMNS = ["family", "epoch", "n_seeds", "mean_minus_std", "mean_plus_std"]  # then metric_column
LR_COLUMNS = ["family", "stage", "lr_factor", "lr"]  # then metric_column
TRIALS_COLUMNS = ["family", "n", "low", "high"]  # then "expected best " + metric_column
PLOT_KINDS = ("curves", "lr", "test", "trials", "cost")  # reports/plots/<dataset>_<kind>.png
COST_COLUMNS = ["family", "training_seconds", "test_mean", "test_std", "pareto"]


def mean_curves(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family and epoch, the validation metric over the seeds that ran that epoch: its mean
    (`val_metric`) and mean ∓ sample std (long rows for DVC plots, family by family)."""
    rows = []
    for family, r in results.items():
        for e in range(max(len(s["curve"]) for s in r["seeds"])):
            values = [s["curve"][e] for s in r["seeds"] if len(s["curve"]) > e]
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            rows.append({"family": family, "epoch": e + 1, "n_seeds": len(values),
                         "mean_minus_std": round(mean - std, 6), "mean_plus_std": round(mean + std, 6),
                         "val_metric": round(mean, 6)})
    return rows


def lr_points(searches: dict[str, dict[str, Any]], finals: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Validation metric against learning rate: every successful search trial (its best epoch;
    stage "search") and the final reruns' mean over seeds at the searched lr (lr_factor 1) and at
    each robustness factor (stage "final")."""
    rows = [{"family": f, "stage": "search", "lr_factor": "", "lr": t["config"]["lr"], "val_metric": t["best_val"]}
            for f, s in searches.items() for t in s["trials"] if t["best_val"] is not None]
    for f, r in finals.items():
        rows.append({"family": f, "stage": "final", "lr_factor": "1", "lr": r["config"]["lr"], "val_metric": r["val_mean"]})
        rows += [{"family": f, "stage": "final", "lr_factor": f"{x['lr_factor']:g}", "lr": x["lr"], "val_metric": x["val_mean"]}
                 for x in r.get("robustness", [])]
    return rows


def _plot_csv(rows: list[dict[str, Any]], columns: list[str], metric: str) -> str:
    """rows' `val_metric` as the last column, named for the metric."""
    name = metric_column(metric)
    return _csv([{**{c: row[c] for c in columns}, name: row["val_metric"]} for row in rows], [*columns, name])


def _metrics(results: dict[str, dict[str, Any]], best: str | None, marks: dict[str, list[Mark]],
             vs_trivial: dict[str, float], searches: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """metrics.json of one dataset: scores, status and marks per family, the one-sided p-value
    against the trivial baseline (`p_vs_trivial`, None where not computed) and the search's gain
    over the reference configuration (`search_gain`, None with `search_gain_note` saying why); a
    failed family only says who it is, its trial counts and its errors."""
    ok, _ = split(results)
    tests = welch_vs_best(ok, best) if best is not None else {}
    out = {}
    for f, r in results.items():
        shown = [m.as_json() for m in marks[f]]
        if is_failed(r):
            out[f] = {**{k: r[k] for k in FAILED_KEYS}, "status": "failed", "marks": shown}
            continue
        p = tests[f].p if tests[f] is not None else math.nan
        out[f] = {**{k: r[RECORD_KEYS.get(k, k)] for k in METRIC_KEYS},
                  **{k: r.get(k, v) for k, v in REPEAT_DEFAULTS.items()},
                  "val_loss_mean": r.get("val_loss_mean"), **{k: r[k] for k in COUNT_KEYS if k in r}, "status": "ok", "marks": shown, "best": f == best,
                  "p_vs_best": None if math.isnan(p) else round(p, 6), "p_vs_trivial": _rounded(vs_trivial.get(f)),
                  **_gain_json(search_gain(searches.get(f), r["mode"])), "epochs_trained": epochs_trained(r)}
    return out


def _gain_json(gain: Gain) -> dict[str, Any]:
    if gain.value is None:
        return {"search_gain": None, "search_gain_note": gain.why_not}
    return {"search_gain": round(gain.value, 6)}


def _mode(results: dict[str, dict[str, Any]]) -> str:
    """A dataset's metric mode ("max" or "min"), which every record of it shares, failed ones too."""
    return next(iter(results.values()))["mode"]


def _rounded(p: float | None) -> float | None:
    return None if p is None or math.isnan(p) else round(p, 6)


def _paper_points(refs: References, dataset: str, results: dict[str, dict[str, Any]]) -> dict[str, float]:
    points = {}
    for f, r in results.items():
        figures = [x for x in refs.for_pair(dataset, f) if x.metric == r["metric"]]
        if figures:
            points[f] = figures[0].as_fraction()[0]
    return points


def _reference_ranks(finals: dict[str, dict[str, dict[str, Any]]], classical_refs: dict[str, classical.Reference],
                     across: Comparison | Refusal | None) -> dict[str, float]:
    """dataset -> the rank its classical reference would take among the compared families' test
    means (the across-datasets table's families); empty where the datasets are not compared."""
    if not isinstance(across, Comparison):
        return {}
    ranks = {}
    for d in across.datasets:
        tests = [finals[d][f]["test_mean"] for f in across.mean_ranks]
        rank = classical.would_rank(classical_refs.get(d), tests, across.metric, across.mode)
        ranks.update({d: rank} if rank is not None else {})
    return ranks


def _write_dataset(out: Path, dataset: str, results: dict[str, dict[str, Any]],
                   searches: dict[str, dict[str, Any]], best: str, refs: References,
                   trials: dict[str, list[dict[str, float]]], reference: classical.Reference = None) -> list[Path]:
    """Plot data and PNGs of one dataset; returns the PNG paths. trials: family -> its expected
    best validation score over n search trials (show_your_work.curve); reference: the classical
    reference, a line on the test plot where it has a score."""
    metric = results[best]["metric"]
    points = lr_points(searches, results)
    write_text(out / "curves" / f"{dataset}.csv", _plot_csv(mean_curves(results), CURVE_COLUMNS, metric))
    write_text(out / "lr" / f"{dataset}.csv", _plot_csv(points, LR_COLUMNS, metric))
    write_text(out / "bars" / f"{dataset}.csv",
               _csv([{"family": f, "test_mean": r["test_mean"], "test_std": r["test_std"]} for f, r in results.items()],
                    ["family", "test_mean", "test_std"]))
    name = f"expected best {metric_column(metric)}"
    write_text(out / "trials" / f"{dataset}.csv",
               _csv([{"family": f, "n": r["n"], "low": round(r["low"], 6), "high": round(r["high"], 6),
                      name: round(r["expected"], 6)} for f, rows in trials.items() for r in rows],
                    [*TRIALS_COLUMNS, name]))
    pngs = [out / "plots" / f"{dataset}_{kind}.png" for kind in PLOT_KINDS]
    plots.plot_curves(pngs[0], dataset, results, metric)
    plots.plot_lr(pngs[1], dataset, [p for p in points if p["stage"] == "search"], results, metric)
    shown = classical.usable(reference, metric)
    plots.plot_test_bars(pngs[2], dataset, results, best, metric, _paper_points(refs, dataset, results),
                         (f"{shown['classifier']} (classical)", shown["test"]) if shown else None)
    plots.plot_trials(pngs[3], dataset, trials, metric)
    costs = cost_rows(results)
    write_text(out / "cost" / f"{dataset}.csv", _csv(costs, COST_COLUMNS))
    plots.plot_cost(pngs[4], dataset, costs, metric)
    return pngs


def results_markdown(finals: dict[str, dict[str, dict[str, Any]]], searches: dict[str, dict[str, dict[str, Any]]],
                     marks: dict[str, dict[str, list[Mark]]], refs: References, provenance: dict[str, Any],
                     images: str = "plots/", across: Comparison | Refusal | None = None,
                     baselines: dict[str, list[trivial.Trivial] | str] | None = None,
                     classical_refs: dict[str, classical.Reference] | None = None) -> str:
    """results.md. A failed family shows as "failed" in its table with its reasons beneath; the
    plots, statistics, robustness and importance sections cover the families that have scores.
    images: the folder the PNGs are linked in, relative to the report ("" for MLflow's copy);
    across: the comparison across datasets (pipeline.reporting.cross_dataset.compare);
    baselines: dataset -> its trivial baselines, or why there are none (trivial.dataset_baselines);
    classical_refs: dataset -> its classical reference (pipeline.reporting.classical_reference.read_reference)."""
    baselines, classical_refs = baselines or {}, classical_refs or {}
    commit = provenance["commit"]
    lines = ["# Results", "",
             f"Produced by `ctsweep report` at git commit `{commit[:12]}{commit[40:]}` (full provenance at the end).",
             "Mean ± sample standard deviation over the final seeds. The best family per dataset (chosen on",
             "validation only) is in bold; every other family's test difference to it comes with the two-sided",
             "p-value of Welch's t-test on the per-seed test scores (* p < 0.05). Accuracy in %. The rows in",
             "italics are trivial baselines, which ignore the inputs, and a classical model for",
             "reference, which is not ranked. Marks after a family's name",
             "(†, ‡, §, ¶, ↑, ∅) say where a result cannot be trusted; the footnotes under each table say why.", ""]
    cited: dict[str, int] = {}
    bests: dict[str, str | None] = {}
    for dataset, results in finals.items():
        ok, _ = split(results)
        best = bests[dataset] = best_family(ok)
        found, mode, metric = baselines.get(dataset, []), _mode(results), next(iter(results.values()))["metric"]
        gains = {f: search_gain(searches[dataset].get(f), mode) for f in searches.get(dataset, {})}
        ref = classical_refs.get(dataset)
        table = results_table(dataset, results, best, refs, cited, marks[dataset],
                              lambda columns: trivial.trivial_rows(found, mode, metric, columns)
                              + classical.reference_rows(ref, metric, columns), gains)
        decided, raced = dataset_verdict(ok, best, ref), race_line(ok, best)
        lines += table[:2] + ([f"**Verdict:** {decided.line}", ""] if decided else []) + \
            ([raced, ""] if raced else []) + table[2:]
        lines += trivial.trivial_note(found) if dataset in baselines else []
        lines += classical.reference_note(ref, dataset, metric) if dataset in classical_refs else []
        lines += data_lines(provenance.get("data", {}).get(dataset))
        if best is None:
            continue
        lines += [f"![{dataset} test]({images}{dataset}_test.png) ![{dataset} curves]({images}{dataset}_curves.png)",
                  f"![{dataset} learning rate]({images}{dataset}_lr.png) "
                  f"![{dataset} expected best over search trials]({images}{dataset}_trials.png)",
                  f"![{dataset} test against training cost]({images}{dataset}_cost.png)", ""]
        lines += robustness_lines(ok, ok[best]["mode"], ok[best]["metric"])
        lines += sensitivity_lines(searches[dataset])
    lines += across_lines(across, images, _reference_ranks(finals, classical_refs, across))
    lines += published_lines(finals, bests, provenance["params"].get("prepare", {}), refs, cited,
                             heading="###" if across is not None else "##")
    lines += references_lines(refs, cited)
    lines += provenance_lines(provenance)
    return "\n".join(lines)


def report(root: Path, datasets: list[str], families: list[str]) -> dict[str, Any]:
    """Write metrics.json, results.md, the plot data and the PNG plots; returns metrics.json's content.
    A dataset whose every family failed gets its table and no plots."""
    finals = collect(root, datasets, families, FINAL_FOR_REPORT)
    provenance = {**stamp(root, datasets, families),  # before writing: rewritten plots would look like edits
                  "data": data_notes(finals)}
    searches = {d: {f: read_search(root, d, f) for f in split(finals[d])[0]} for d in datasets}
    provenance["machines"] = machine_notes(finals, searches)
    marks = {d: {f: cell_marks(r, searches[d].get(f)) for f, r in res.items()} for d, res in finals.items()}
    trials = {d: {f: show_your_work.curve(show_your_work.trial_scores(s), _mode(finals[d])) for f, s in found.items()}
              for d, found in searches.items()}
    for d, curves in trials.items():
        metric = next(iter(finals[d].values()))["metric"]
        for f, rows in curves.items():
            mark = show_your_work.not_saturated(rows, _mode(finals[d]), metric)
            marks[d][f] += [show_your_work.saturation_detail(mark, searches[d][f])] if mark else []
    baselines = {d: trivial.dataset_baselines(root, d) for d in datasets}
    classical_refs = {d: classical.read_reference(root, d) for d in datasets}
    vs_trivial = {}
    for d, res in finals.items():
        ok, _ = split(res)
        found, vs_trivial[d] = trivial.judge(ok, baselines[d], repeated(ok))
        for f, mark in found.items():
            marks[d][f].append(mark)  # the last of RULES: the marks stay in its order
    refs = load_references(root)
    across = cross_dataset.compare(finals, cross_dataset.dataset_tasks(root, datasets))
    if isinstance(across, Refusal) and across.warn:  # once here: results_markdown runs twice
        print(f"ctsweep: warning: {across.line}", file=sys.stderr)
    out = reports_dir(root)
    metrics, pngs = {}, {}
    with staged(out) as stage:  # every file of the report replaced together, or none of them
        for dataset, results in finals.items():
            ok, _ = split(results)
            best = best_family(ok)
            metrics[dataset] = _metrics(results, best, marks[dataset], vs_trivial[dataset], searches[dataset])
            written = (_write_dataset(stage, dataset, ok, searches[dataset], best, refs, trials[dataset],
                                      classical_refs[dataset])
                       if best is not None else [])
            pngs[dataset] = [out / p.relative_to(stage) for p in written]
        if across is not None:  # after the datasets, under a key no dataset can have
            metrics[cross_dataset.METRICS_KEY] = cross_dataset.as_json(across)
        metrics[VERDICTS] = {d: v.as_json() for d in finals
                             if (v := dataset_verdict(split(finals[d])[0], best_family(split(finals[d])[0]),
                                                      classical_refs[d])) is not None}
        metrics[MACHINES] = provenance["machines"]  # what `ctsweep compare` names first when it differs
        metrics[BASELINES] = {d: {**trivial.as_json(baselines[d], _mode(finals[d])),
                                  "classical": classical.as_json(classical_refs[d])} for d in finals}
        drawn = [out / p.relative_to(stage) for p in cross_plots.write_outputs(stage, across)]
        write_text(stage / "results.md", results_markdown(finals, searches, marks, refs, provenance, across=across,
                                                          baselines=baselines, classical_refs=classical_refs))
        write_json(stage / "metrics.json", metrics)
        cells = write_cells(stage, metrics)
    drop_stale(out, cells)
    cross_plots.drop_stale(out, across)
    for dataset in (d for d, files in pngs.items() if not files):
        _drop_plots(out, dataset)
    plots.write_dvc_templates(root)
    log_to_mlflow(root, finals, results_markdown(finals, searches, marks, refs, provenance, images="", across=across,
                                                 baselines=baselines, classical_refs=classical_refs),
                  [p for files in pngs.values() for p in files] + drawn)
    return metrics


def _drop_plots(out: Path, dataset: str) -> None:
    """Remove an earlier report's plots of a dataset that has none now (every family failed):
    staging replaces files but never deletes one, and stale plots would contradict the table."""
    for kind in ("curves", "lr", "bars", "trials", "cost"):
        (out / kind / f"{dataset}.csv").unlink(missing_ok=True)
    for kind in PLOT_KINDS:
        (out / "plots" / f"{dataset}_{kind}.png").unlink(missing_ok=True)
