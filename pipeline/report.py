"""The `report` stage: a paper-style table, metrics.json and plots from the final and search results.

    reports/metrics.json           dataset -> family -> {val_mean, val_std, test_mean, test_std,
                                   n_seeds, metric, params, seconds_per_epoch, n_trials, n_failed}
    reports/results.md             the same as tables, mean ± std over seeds, best family in bold
    reports/curves/<dataset>.csv   validation metric per epoch, mean over seeds (DVC plots)
    reports/lr/<dataset>.csv       search trials: family, lr, best validation metric (DVC plots)
    reports/plots/*.png            learning curves and metric against learning rate
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.io import read_json, write_json, write_text  # noqa: E402
from pipeline.paths import final_result_path, reports_dir, require, search_result_path  # noqa: E402

METRIC_KEYS = ("val_mean", "val_std", "test_mean", "test_std", "n_seeds", "metric", "params",
               "seconds_per_epoch", "n_trials", "n_failed")


def collect(root: Path, datasets: list[str], families: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Read every final result; a missing one names the stage that produces it."""
    return {d: {f: read_json(require(final_result_path(root, d, f), f"ctsweep final {d} {f}")) for f in families}
            for d in datasets}


def best_family(results: dict[str, dict[str, Any]]) -> str:
    """The family with the best mean validation metric (selection never looks at test)."""
    mode = next(iter(results.values()))["mode"]
    pick = max if mode == "max" else min
    return pick(results, key=lambda f: results[f]["val_mean"])


def _fmt(mean: float, std: float, metric: str) -> str:
    if metric == "accuracy":  # percent, as the papers print it
        return f"{100 * mean:.2f} ± {100 * std:.2f}"
    return f"{mean:.4f} ± {std:.4f}"


def results_markdown(finals: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["# Results", "",
             "Mean ± sample standard deviation over the final seeds; the family with the best mean",
             "validation metric per dataset is in bold (chosen on validation only). Accuracy in %.", ""]
    for dataset, results in finals.items():
        best = best_family(results)
        metric = next(iter(results.values()))["metric"]
        lines += [f"## {dataset} ({metric})", "",
                  "| family | test | validation | seeds | parameters | s / epoch | trials (failed) |",
                  "|---|---|---|---|---|---|---|"]
        for family, r in results.items():
            name = f"**{family}**" if family == best else family
            lines.append(f"| {name} | {_fmt(r['test_mean'], r['test_std'], metric)} | "
                         f"{_fmt(r['val_mean'], r['val_std'], metric)} | {r['n_seeds']} | {r['params']:,} | "
                         f"{r['seconds_per_epoch']:.2f} | {r['n_trials']} ({r['n_failed']}) |")
        lines.append("")
    return "\n".join(lines)


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
            row[family] = round(sum(values) / len(values), 6) if values else ""
        rows.append(row)
    return rows


def lr_points(root: Path, dataset: str, families: list[str]) -> list[dict[str, Any]]:
    """Every successful search trial's learning rate and best validation metric."""
    rows = []
    for family in families:
        searched = read_json(require(search_result_path(root, dataset, family), f"ctsweep search {dataset} {family}"))
        rows += [{"family": family, "lr": t["config"]["lr"], "val_metric": t["best_val"]}
                 for t in searched["trials"] if t["best_val"] is not None]
    return rows


def _plot_curves(path: Path, dataset: str, rows: list[dict[str, Any]], families: list[str], metric: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for f in families:
        points = [(r["epoch"], r[f]) for r in rows if r[f] != ""]
        ax.plot(*zip(*points), marker="o", label=f)
    ax.set(title=f"{dataset}: learning curves (mean over seeds)", xlabel="epoch", ylabel=f"validation {metric}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_lr(path: Path, dataset: str, rows: list[dict[str, Any]], families: list[str], metric: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for f in families:
        points = sorted((r["lr"], r["val_metric"]) for r in rows if r["family"] == f)
        if points:
            ax.plot(*zip(*points), marker="o", linestyle="--", label=f)
    ax.set(xscale="log", title=f"{dataset}: search trials", xlabel="learning rate", ylabel=f"best validation {metric}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(root: Path, datasets: list[str], families: list[str]) -> dict[str, Any]:
    """Write metrics.json, results.md, the plot data and the PNG plots; returns metrics.json's content."""
    finals = collect(root, datasets, families)
    out = reports_dir(root)
    metrics = {d: {f: {k: r[k] for k in METRIC_KEYS} for f, r in res.items()} for d, res in finals.items()}
    for dataset, results in finals.items():
        metric = next(iter(results.values()))["metric"]
        curves, points = mean_curves(results), lr_points(root, dataset, families)
        write_text(out / "curves" / f"{dataset}.csv", _csv(curves, ["epoch", *families]))
        write_text(out / "lr" / f"{dataset}.csv", _csv(points, ["family", "lr", "val_metric"]))
        (out / "plots").mkdir(parents=True, exist_ok=True)
        _plot_curves(out / "plots" / f"{dataset}_curves.png", dataset, curves, families, metric)
        _plot_lr(out / "plots" / f"{dataset}_lr.png", dataset, points, families, metric)
    write_text(out / "results.md", results_markdown(finals))
    write_json(out / "metrics.json", metrics)
    return metrics
