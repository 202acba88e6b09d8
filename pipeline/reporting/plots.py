"""PNG plots of a dataset's results (matplotlib, no display): what a person looks at first.

    <dataset>_curves.png   validation metric per epoch, mean ± std band over the final seeds
    <dataset>_lr.png       validation metric against learning rate, one panel per family: every
                           search trial (dots) and the final reruns at lr x factors (mean ± std)
    <dataset>_test.png     test mean ± std per family, the best family highlighted, paper figures
                           as black diamonds where a source reports one
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

SCALE = {"accuracy": 100.0}  # accuracy drawn in %, as the papers print it


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _label(metric: str) -> str:
    return f"{metric} (%)" if metric in SCALE else metric


def plot_curves(path: Path, dataset: str, finals: dict[str, dict[str, Any]], metric: str) -> None:
    """finals: family -> final record (its seeds' `curve`: validation metric per epoch)."""
    k = SCALE.get(metric, 1.0)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for family, r in finals.items():
        epochs = max(len(s["curve"]) for s in r["seeds"])
        xs, mean, std = [], [], []
        for e in range(epochs):
            values = [k * s["curve"][e] for s in r["seeds"] if len(s["curve"]) > e]
            xs.append(e + 1)
            mean.append(statistics.fmean(values))
            std.append(statistics.stdev(values) if len(values) > 1 else 0.0)
        ax.plot(xs, mean, marker="o", label=family)
        ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.15)
    ax.set(title=f"{dataset}: learning curves (mean ± std over seeds)", xlabel="epoch",
           ylabel=f"validation {_label(metric)}")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_lr(path: Path, dataset: str, trials: list[dict[str, Any]], finals: dict[str, dict[str, Any]],
            metric: str) -> None:
    """trials: {family, lr, val_metric} per successful search trial; finals: family -> final record."""
    k = SCALE.get(metric, 1.0)
    families = list(finals)
    cols = min(3, len(families))
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, family in zip(axes.flat, families):
        pts = [(t["lr"], k * t["val_metric"]) for t in trials if t["family"] == family]
        if pts:
            ax.scatter(*zip(*pts), s=18, color="grey", label="search trials")
        r = finals[family]
        reruns = sorted([(r["config"]["lr"], r["val_mean"], r["val_std"])]
                        + [(x["lr"], x["val_mean"], x["val_std"]) for x in r.get("robustness", [])])
        lrs, means, stds = zip(*reruns)
        ax.errorbar(lrs, [k * m for m in means], yerr=[k * s for s in stds], marker="o", capsize=3,
                    color="tab:blue", label="final seeds (mean ± std)")
        ax.set(xscale="log", title=family, xlabel="learning rate")
        # 1, 2, 5 x 10^k ticks as 2e-04: narrow ranges still get labels, none overlap
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.1e}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    for ax in axes.flat[len(families):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"validation {_label(metric)}")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{dataset}: validation metric against learning rate")
    _save(fig, path)


def plot_test_bars(path: Path, dataset: str, finals: dict[str, dict[str, Any]], best: str, metric: str,
                   papers: dict[str, float]) -> None:
    """Test mean ± std per family; papers: family -> a paper's figure (pipeline scale) to mark."""
    k = SCALE.get(metric, 1.0)
    families = list(finals)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * len(families) + 1.5))
    ys = range(len(families))
    ax.barh(ys, [k * finals[f]["test_mean"] for f in families], xerr=[k * finals[f]["test_std"] for f in families],
            color=["tab:orange" if f == best else "tab:blue" for f in families], capsize=3)
    marked = [(k * papers[f], i) for i, f in enumerate(families) if f in papers]
    if marked:
        ax.scatter(*zip(*marked), marker="D", color="black", zorder=3, label="paper")
        ax.legend(fontsize=8)
    ax.set_yticks(list(ys), [f"{f} (best)" if f == best else f for f in families])
    ax.invert_yaxis()
    ax.set(title=f"{dataset}: test {metric}, mean ± std over seeds", xlabel=f"test {_label(metric)}")
    _save(fig, path)
