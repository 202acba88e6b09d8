"""The `report` stage: a paper-style table, metrics.json and plots from the final and search results.

    reports/results.md             per dataset: test / validation mean ± std over seeds, the paper's
                                   figure, Welch's t-test against the best family, parameters,
                                   s / epoch, trials (failed); learning-rate robustness; fANOVA
                                   importances; the papers cited; provenance (commit, dvc.lock, params)
    reports/metrics.json           dataset -> family -> {val_mean, val_std, test_mean, test_std, n_seeds,
                                   metric, params, seconds_per_epoch, n_trials, n_failed, best, p_vs_best,
                                   status: "ok", marks: [{mark, detail}]}; a family whose every search
                                   trial failed: {dataset, family, metric, n_trials, n_failed, errors,
                                   status: "failed", marks}
    reports/curves/<dataset>.csv   validation metric per epoch, mean over seeds      (DVC plots)
    reports/lr/<dataset>.csv       validation metric against learning rate           (DVC plots)
    reports/bars/<dataset>.csv     test mean ± std per family                        (DVC plots)
    reports/plots/*.png            the same as pictures (pipeline.reporting.plots)

The best family per dataset is chosen on the validation metric only, among the families that did
not fail; the marks of pipeline.reporting.marks flag the cells a reader should not trust. The report and the plots
of a dataset are also logged as artifacts (folder `report`) of that dataset's final runs.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException

from pipeline import tracking
from pipeline.io import write_json, write_text
from pipeline.paths import reports_dir
from pipeline.reporting import plots
from pipeline.reporting.marks import Mark, cell_marks, is_failed
from pipeline.reporting.provenance import stamp
from pipeline.reporting.records import collect, read_search, split
from pipeline.reporting.references import References, load_references
from pipeline.reporting.tables import (provenance_lines, references_lines, results_table, robustness_lines,
                                       sensitivity_lines, welch_vs_best)
from pipeline.schema import FINAL_FOR_REPORT
from pipeline.staging import staged

METRIC_KEYS = ("val_mean", "val_std", "test_mean", "test_std", "n_seeds", "metric", "params",
               "seconds_per_epoch", "n_trials", "n_failed")
FAILED_KEYS = ("dataset", "family", "metric", "n_trials", "n_failed", "errors")  # a failed cell has no scores


def best_family(results: dict[str, dict[str, Any]]) -> str | None:
    """The family with the best mean validation metric among those that did not fail, ties
    broken by the lower mean validation loss (`val_loss_mean`; a record without one loses the
    tie); selection never looks at test. None when every family failed."""
    ok = {f: r for f, r in results.items() if not is_failed(r)}
    if not ok:
        return None
    sign = 1.0 if next(iter(ok.values()))["mode"] == "max" else -1.0

    def merit(family: str) -> tuple[float, float]:
        loss = ok[family].get("val_loss_mean")
        # rounded: seed means of equal scores may differ in the last bits, and that is a tie
        return round(sign * ok[family]["val_mean"], 9), -(math.inf if loss is None else loss)

    return max(ok, key=merit)


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


def _metrics(results: dict[str, dict[str, Any]], best: str | None,
             marks: dict[str, list[Mark]]) -> dict[str, dict[str, Any]]:
    """metrics.json of one dataset: scores, status and marks per family; a failed family only
    says who it is, its trial counts and its errors."""
    ok, _ = split(results)
    tests = welch_vs_best(ok, best) if best is not None else {}
    out = {}
    for f, r in results.items():
        shown = [m.as_json() for m in marks[f]]
        if is_failed(r):
            out[f] = {**{k: r[k] for k in FAILED_KEYS}, "status": "failed", "marks": shown}
            continue
        p = tests[f].p if tests[f] is not None else math.nan
        out[f] = {**{k: r[k] for k in METRIC_KEYS}, "val_loss_mean": r.get("val_loss_mean"), "status": "ok", "marks": shown, "best": f == best,
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


def results_markdown(finals: dict[str, dict[str, dict[str, Any]]], searches: dict[str, dict[str, dict[str, Any]]],
                     marks: dict[str, dict[str, list[Mark]]], refs: References, provenance: dict[str, Any]) -> str:
    """results.md. A failed family shows as "failed" in its table with its reasons beneath; the
    plots, statistics, robustness and importance sections cover the families that have scores."""
    commit = provenance["commit"]
    lines = ["# Results", "",
             f"Produced by `ctsweep report` at git commit `{commit[:12]}{commit[40:]}` (full provenance at the end).",
             "Mean ± sample standard deviation over the final seeds. The best family per dataset (chosen on",
             "validation only) is in bold; every other family's test difference to it comes with the two-sided",
             "p-value of Welch's t-test on the per-seed test scores (* p < 0.05). Accuracy in %. Marks after",
             "a family's name (†, ‡, §) say where a result cannot be trusted; the footnotes under each table",
             "say why.", ""]
    cited: dict[str, int] = {}
    for dataset, results in finals.items():
        ok, _ = split(results)
        best = best_family(ok)
        lines += results_table(dataset, results, best, refs, cited, marks[dataset])
        if best is None:
            continue
        lines += [f"![{dataset} test](plots/{dataset}_test.png) ![{dataset} curves](plots/{dataset}_curves.png)",
                  f"![{dataset} learning rate](plots/{dataset}_lr.png)", ""]
        lines += robustness_lines(ok, ok[best]["mode"], ok[best]["metric"])
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
    uri = tracking.tracking_uri(root)
    client = tracking.MlflowClient(uri)
    attached = 0
    for dataset, run_id in runs:
        if not _run_exists(client, run_id):
            # The report is written; only its copy in MLflow is missing. Happens when DVC's run
            # cache restored a final record trained against another (or a deleted) mlflow.db.
            family = next(f for f, r in finals[dataset].items() if r.get("mlflow_parent_run_id") == run_id)
            print(f"ctsweep: warning: results/{dataset}/final/{family}.json names MLflow run {run_id}, which the "
                  f"store {uri} does not have: the report is not attached to it (`ctsweep final {dataset} "
                  f"{family}` trains it again with its runs)", file=sys.stderr)
            continue
        for path in (report, *pngs[dataset]):
            client.log_artifact(run_id, str(path), artifact_path="report")
        attached += 1
    return attached


def _run_exists(client: tracking.MlflowClient, run_id: str) -> bool:
    try:
        client.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return True


def report(root: Path, datasets: list[str], families: list[str]) -> dict[str, Any]:
    """Write metrics.json, results.md, the plot data and the PNG plots; returns metrics.json's content.
    A dataset whose every family failed gets its table and no plots."""
    finals = collect(root, datasets, families, FINAL_FOR_REPORT)
    provenance = stamp(root, datasets, families)  # before writing: rewritten plots would look like edits
    searches = {d: {f: read_search(root, d, f) for f in split(finals[d])[0]} for d in datasets}
    marks = {d: {f: cell_marks(r, searches[d].get(f)) for f, r in res.items()} for d, res in finals.items()}
    refs = load_references(root)
    out = reports_dir(root)
    metrics, pngs = {}, {}
    with staged(out) as stage:  # every file of the report replaced together, or none of them
        for dataset, results in finals.items():
            ok, _ = split(results)
            best = best_family(ok)
            metrics[dataset] = _metrics(results, best, marks[dataset])
            written = _write_dataset(stage, dataset, ok, searches[dataset], best, refs) if best is not None else []
            pngs[dataset] = [out / p.relative_to(stage) for p in written]
        write_text(stage / "results.md", results_markdown(finals, searches, marks, refs, provenance))
        write_json(stage / "metrics.json", metrics)
    for dataset in (d for d, files in pngs.items() if not files):
        _drop_plots(out, dataset)
    log_to_mlflow(root, finals, out / "results.md", pngs)
    return metrics


def _drop_plots(out: Path, dataset: str) -> None:
    """Remove an earlier report's plots of a dataset that has none now (every family failed):
    staging replaces files but never deletes one, and stale plots would contradict the table."""
    for kind in ("curves", "lr", "bars"):
        (out / kind / f"{dataset}.csv").unlink(missing_ok=True)
    for kind in ("curves", "lr", "test"):
        (out / "plots" / f"{dataset}_{kind}.png").unlink(missing_ok=True)
