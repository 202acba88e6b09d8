"""The `report` stage: a paper-style table, metrics.json and plots from the final and search results.

    reports/results.md             per dataset: test / validation mean ± std over seeds, the paper's
                                   figure, Welch's t-test against the best family, parameters,
                                   s / epoch, trials (failed); learning-rate robustness; fANOVA
                                   importances; the papers cited; provenance (commit, dvc.lock, params)
    reports/metrics.json           dataset -> family -> {val_mean, val_std, test_mean, test_std, n_seeds,
                                   metric, params, seconds_per_epoch, n_trials, n_failed, best, p_vs_best}
    reports/curves/<dataset>.csv   validation metric per epoch, mean over seeds      (DVC plots)
    reports/lr/<dataset>.csv       validation metric against learning rate           (DVC plots)
    reports/bars/<dataset>.csv     test mean ± std per family                        (DVC plots)
    reports/plots/*.png            the same as pictures (pipeline.reporting.plots)

The best family per dataset is chosen on the validation metric only. The report and the plots
of a dataset are also logged as artifacts (folder `report`) of that dataset's final runs.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from pathlib import Path
from typing import Any

from pipeline import tracking
from pipeline.reporting import plots
from pipeline.errors import MissingInputError
from pipeline.io import write_json, write_text
from pipeline.paths import final_result_path, reports_dir, require, search_result_path
from pipeline.reporting.provenance import stamp
from pipeline.reporting.references import References, load_references
from pipeline.reporting.tables import (provenance_lines, references_lines, results_table, robustness_lines,
                                    sensitivity_lines, welch_vs_best)
from pipeline.schema import FINAL_FOR_REPORT, SEARCH_FOR_REPORT, read_record
from pipeline.staging import staged

METRIC_KEYS = ("val_mean", "val_std", "test_mean", "test_std", "n_seeds", "metric", "params",
               "seconds_per_epoch", "n_trials", "n_failed")


def collect(root: Path, datasets: list[str], families: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every final result; the missing ones are named together with the stage that produces them."""
    missing = [(d, f) for d in datasets for f in families if not final_result_path(root, d, f).exists()]
    if missing:
        by_dataset = {d: [f for dd, f in missing if dd == d] for d, _ in missing}
        what = "; ".join(f"{d}: {', '.join(fs)}" for d, fs in by_dataset.items())
        first = missing[0]
        raise MissingInputError(
            f"no final results for {what} (looked in {final_result_path(root, *first).parent}); run the final "
            f"stage first: `ctsweep final {first[0]} {first[1]}` for each pair, or `dvc repro` for all")
    return {d: {f: read_record(final_result_path(root, d, f), f"ctsweep final {d} {f}", FINAL_FOR_REPORT)
                for f in families} for d in datasets}


def best_family(results: dict[str, dict[str, Any]]) -> str:
    """The family with the best mean validation metric (selection never looks at test)."""
    mode = next(iter(results.values()))["mode"]
    pick = max if mode == "max" else min
    return pick(results, key=lambda f: results[f]["val_mean"])


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def mean_curves(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per epoch, each family's validation metric averaged over seeds (wide rows for DVC plots)."""
    epochs = max(len(s["curve"]) for r in results.values() for s in r["seeds"])
    rows = []
    for e in range(epochs):
        row: dict[str, Any] = {"epoch": e + 1}
        for family, r in results.items():
            values = [s["curve"][e] for s in r["seeds"] if len(s["curve"]) > e]
            row[family] = round(statistics.fmean(values), 6) if values else ""
        rows.append(row)
    return rows


def read_searches(root: Path, dataset: str, families: list[str]) -> dict[str, dict[str, Any]]:
    return {f: _read_search(root, dataset, f) for f in families}


def _read_search(root: Path, dataset: str, family: str) -> dict[str, Any]:
    producer = f"ctsweep search {dataset} {family}"
    return read_record(require(search_result_path(root, dataset, family), producer), producer, SEARCH_FOR_REPORT)


def lr_points(searches: dict[str, dict[str, Any]], finals: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Validation metric against learning rate: every successful search trial (its best epoch) and
    the final reruns' mean at the searched lr and at each robustness factor."""
    rows = [{"family": f, "source": "search", "lr": t["config"]["lr"], "val_metric": t["best_val"]}
            for f, s in searches.items() for t in s["trials"] if t["best_val"] is not None]
    for f, r in finals.items():
        rows.append({"family": f, "source": "final x1", "lr": r["config"]["lr"], "val_metric": r["val_mean"]})
        rows += [{"family": f, "source": f"final x{x['lr_factor']:g}", "lr": x["lr"], "val_metric": x["val_mean"]}
                 for x in r.get("robustness", [])]
    return rows


def _metrics(results: dict[str, dict[str, Any]], best: str) -> dict[str, dict[str, Any]]:
    tests = welch_vs_best(results, best)
    out = {}
    for f, r in results.items():
        p = tests[f].p if tests[f] is not None else math.nan
        out[f] = {**{k: r[k] for k in METRIC_KEYS}, "best": f == best,
                  "p_vs_best": None if math.isnan(p) else round(p, 6)}
    return out


def _paper_points(refs: References, dataset: str, results: dict[str, dict[str, Any]]) -> dict[str, float]:
    points = {}
    for f, r in results.items():
        figures = [x for x in refs.for_pair(dataset, f) if x.metric == r["metric"]]
        if figures:
            points[f] = figures[0].as_fraction()[0]
    return points


def _write_dataset(out: Path, dataset: str, results: dict[str, dict[str, Any]],
                   searches: dict[str, dict[str, Any]], best: str, refs: References) -> list[Path]:
    """Plot data and PNGs of one dataset; returns the PNG paths."""
    metric, families = results[best]["metric"], list(results)
    points = lr_points(searches, results)
    write_text(out / "curves" / f"{dataset}.csv", _csv(mean_curves(results), ["epoch", *families]))
    write_text(out / "lr" / f"{dataset}.csv", _csv(points, ["family", "source", "lr", "val_metric"]))
    write_text(out / "bars" / f"{dataset}.csv",
               _csv([{"family": f, "test_mean": r["test_mean"], "test_std": r["test_std"]} for f, r in results.items()],
                    ["family", "test_mean", "test_std"]))
    pngs = [out / "plots" / f"{dataset}_{kind}.png" for kind in ("curves", "lr", "test")]
    plots.plot_curves(pngs[0], dataset, results, metric)
    plots.plot_lr(pngs[1], dataset, [p for p in points if p["source"] == "search"], results, metric)
    plots.plot_test_bars(pngs[2], dataset, results, best, metric, _paper_points(refs, dataset, results))
    return pngs


def results_markdown(root: Path, finals: dict[str, dict[str, dict[str, Any]]],
                     searches: dict[str, dict[str, dict[str, Any]]], refs: References,
                     provenance: dict[str, Any]) -> str:
    commit = provenance["commit"]
    lines = ["# Results", "",
             f"Produced by `ctsweep report` at git commit `{commit[:12]}{commit[40:]}` (full provenance at the end).",
             "Mean ± sample standard deviation over the final seeds. The best family per dataset (chosen on",
             "validation only) is in bold; every other family's test difference to it comes with the two-sided",
             "p-value of Welch's t-test on the per-seed test scores (* p < 0.05). Accuracy in %.", ""]
    cited: dict[str, int] = {}
    for dataset, results in finals.items():
        best = best_family(results)
        lines += results_table(dataset, results, best, refs, cited)
        lines += [f"![{dataset} test](plots/{dataset}_test.png) ![{dataset} curves](plots/{dataset}_curves.png)",
                  f"![{dataset} learning rate](plots/{dataset}_lr.png)", ""]
        lines += robustness_lines(results, results[best]["mode"], results[best]["metric"])
        lines += sensitivity_lines(searches[dataset])
    lines += references_lines(refs, cited)
    lines += provenance_lines(provenance)
    return "\n".join(lines)


def log_to_mlflow(root: Path, finals: dict[str, dict[str, dict[str, Any]]], report: Path,
                  pngs: dict[str, list[Path]]) -> int:
    """Attach the report and each dataset's plots to that dataset's final (parent) runs; returns
    how many runs got them. Records without a run id (hand-made results) are skipped."""
    runs = [(d, r["mlflow_parent_run_id"]) for d, res in finals.items() for r in res.values()
            if r.get("mlflow_parent_run_id")]
    if not runs:
        return 0
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    for dataset, run_id in runs:
        for path in (report, *pngs[dataset]):
            client.log_artifact(run_id, str(path), artifact_path="report")
    return len(runs)


def report(root: Path, datasets: list[str], families: list[str]) -> dict[str, Any]:
    """Write metrics.json, results.md, the plot data and the PNG plots; returns metrics.json's content."""
    finals = collect(root, datasets, families)
    provenance = stamp(root, datasets, families)  # before writing: rewritten plots would look like edits
    searches = {d: read_searches(root, d, families) for d in datasets}
    refs = load_references(root)
    out = reports_dir(root)
    metrics, pngs = {}, {}
    with staged(out) as stage:  # every file of the report replaced together, or none of them
        for dataset, results in finals.items():
            best = best_family(results)
            metrics[dataset] = _metrics(results, best)
            pngs[dataset] = [out / p.relative_to(stage)
                             for p in _write_dataset(stage, dataset, results, searches[dataset], best, refs)]
        write_text(stage / "results.md", results_markdown(root, finals, searches, refs, provenance))
        write_json(stage / "metrics.json", metrics)
    log_to_mlflow(root, finals, out / "results.md", pngs)
    return metrics
