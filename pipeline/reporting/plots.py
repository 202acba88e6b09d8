"""PNG plots of a dataset's results (matplotlib, no display): what a person looks at first; and
the Vega-Lite templates `dvc plots show` draws the same data with.

    <dataset>_curves.png   validation metric per epoch, mean ± std band over the final seeds
    <dataset>_lr.png       validation metric against learning rate, one panel per family: every
                           search trial (dots) and the final reruns at lr x factors (mean ± std)
    <dataset>_test.png     test mean ± std per family, the best family highlighted, paper figures
                           as black diamonds where a source reports one
    <dataset>_trials.png   expected best validation score over n search trials per family, with
                           its bootstrap band (pipeline.reporting.show_your_work)
    <dataset>_cost.png     test mean ± std against training cost per family, the Pareto front
                           marked (pipeline.reporting.cost)
    cross_dataset_cd.png   mean ranks across datasets (pipeline.reporting.cross_plots)

DVC's built-in templates colour by revision only, so a family (a value in a column of the
long-format CSVs of pipeline.reporting.report) could not get its own colour; the two templates
in DVC_TEMPLATES do that from the data, with no family name in dvc.yaml. The report writes them
to .dvc/plots/, where `template: ctsweep_curves` in dvc.yaml finds them from any folder.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from pipeline.stores.files import write_text  # noqa: E402

SCALE = {"accuracy": 100.0}  # accuracy drawn in %, as the papers print it
CHARS_PER_INCH = 10  # a title wraps past about this many characters per inch of figure width


def save_figure(fig: Any, path: Path) -> None:
    """Write `fig` as a PNG at `path` and close it (pipeline.reporting.cross_plots draws with it too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # tight: the saved area grows to hold whatever lies outside the axes (a long title, a legend
    # beside the plot) instead of cutting it off
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)


def _label(metric: str) -> str:
    return f"{metric} (%)" if metric in SCALE else metric


def fitted_title(head: str, tail: str, inches: float) -> str:
    """"head: tail" on one line where it fits `inches`, else head and tail on lines of their own
    (each wrapped if still too long): a long dataset or family name would run off the figure."""
    width = max(20, int(CHARS_PER_INCH * inches))
    one = f"{head}: {tail}" if tail else head
    if len(one) <= width:
        return one
    return "\n".join(textwrap.fill(t, width, break_long_words=False) for t in (f"{head}:" if tail else head, tail) if t)


def _log_lr_axis(ax: Any, lrs: list[float]) -> None:
    """A log learning-rate axis whose labels never overlap: 1, 2, 5 x 10^k within a decade or
    so, one tick per decade (thinned to at most five) over wider ranges, labels as 2e-04 and
    slanted, and limits a little beyond the data so at least one labelled tick shows."""
    lo, hi = min(lrs) / 1.6, max(lrs) * 1.6  # a window over 2.5x wide holds a 1, 2 or 5 x 10^k
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    decades = math.log10(hi / lo)
    subs = (1.0, 2.0, 5.0) if decades <= 1.3 else (1.0,)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs, numticks=6))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.0e}"))
    ax.xaxis.set_minor_locator(ticker.LogLocator(base=10, subs=tuple(range(2, 10)), numticks=12))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.tick_params(axis="x", labelsize=8, labelrotation=30)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")


def plot_curves(path: Path, dataset: str, finals: dict[str, dict[str, Any]], metric: str) -> None:
    """finals: family -> final record (its seeds' `curve`: validation metric per epoch)."""
    k = SCALE.get(metric, 1.0)
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    longest = max(len(s["curve"]) for r in finals.values() for s in r["seeds"])
    for family, r in finals.items():
        epochs = max(len(s["curve"]) for s in r["seeds"])
        xs, mean, std = [], [], []
        for e in range(epochs):
            values = [k * s["curve"][e] for s in r["seeds"] if len(s["curve"]) > e]
            xs.append(e + 1)
            mean.append(statistics.fmean(values))
            std.append(statistics.stdev(values) if len(values) > 1 else 0.0)
        # a marker per epoch on short runs; on long ones they would hide the lines
        ax.plot(xs, mean, marker="o" if longest <= 25 else None, markersize=4, label=family)
        ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.15)
    ax.set(title=fitted_title(dataset, "learning curves (mean ± std over seeds)", 6.5), xlabel="epoch",
           ylabel=f"validation {_label(metric)}")
    ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=8, steps=[1, 2, 5, 10], integer=True))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside, not over, the lines
    save_figure(fig, path)


def plot_trials(path: Path, dataset: str, curves: dict[str, list[dict[str, float]]], metric: str) -> None:
    """curves: family -> rows {n, expected, low, high} of its expected best validation score over
    n search trials with a bootstrap band (pipeline.reporting.show_your_work)."""
    k = SCALE.get(metric, 1.0)
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    for family, rows in curves.items():
        if not rows:
            continue
        n = [r["n"] for r in rows]
        ax.plot(n, [k * r["expected"] for r in rows], marker="o", markersize=4, label=family)
        ax.fill_between(n, [k * r["low"] for r in rows], [k * r["high"] for r in rows], alpha=0.15)
    ax.set(title=fitted_title(dataset, "expected best validation score over n search trials", 6.5),
           xlabel="search trials (n)", ylabel=f"expected best validation {_label(metric)}")
    ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=8, steps=[1, 2, 5, 10], integer=True))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    save_figure(fig, path)


def plot_cost(path: Path, dataset: str, rows: list[dict[str, Any]], metric: str) -> None:
    """rows: per family {family, training_seconds, test_mean, test_std, pareto} (pipeline.reporting.cost):
    test mean ± std against training cost, the Pareto front joined by a line."""
    k = SCALE.get(metric, 1.0)
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    for r in rows:
        front = bool(r["pareto"])
        ax.errorbar(r["training_seconds"], k * r["test_mean"], yerr=k * r["test_std"], fmt="D" if front else "o",
                    color="C3" if front else "C0", capsize=3, markersize=6 if front else 4)
        ax.annotate(r["family"], (r["training_seconds"], k * r["test_mean"]), textcoords="offset points",
                    xytext=(5, 4), fontsize=8)
    front = sorted((r["training_seconds"], k * r["test_mean"]) for r in rows if r["pareto"])
    if len(front) > 1:
        ax.plot(*zip(*front), color="C3", linewidth=1, label="Pareto front")
        ax.legend(fontsize=8, loc="lower right")
    costs = [r["training_seconds"] for r in rows if r["training_seconds"] > 0]
    if costs and max(costs) > 20 * min(costs):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())  # labelled minor ticks overlap ("3x10^2 4x10^2")
    ax.set(title=fitted_title(dataset, "test score against training cost (final seeds)", 6.5),
           xlabel="training seconds (seconds per epoch x epochs, summed over seeds)", ylabel=f"test {_label(metric)}")
    save_figure(fig, path)


def plot_lr(path: Path, dataset: str, trials: list[dict[str, Any]], finals: dict[str, dict[str, Any]],
            metric: str) -> None:
    """trials: {family, lr, val_metric} per successful search trial; finals: family -> final record."""
    k = SCALE.get(metric, 1.0)
    families = list(finals)
    cols = min(3, len(families))
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False, sharey=True,
                             layout="constrained")
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
        ax.set(title=fitted_title(family, "", 4), xlabel="learning rate")
        _log_lr_axis(ax, [*lrs, *(p[0] for p in pts)])
    for ax in axes.flat[len(families):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"validation {_label(metric)}")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(fitted_title(dataset, "validation metric against learning rate", 4 * cols))
    save_figure(fig, path)


def plot_test_bars(path: Path, dataset: str, finals: dict[str, dict[str, Any]], best: str, metric: str,
                   papers: dict[str, float], reference: tuple[str, float] | None = None) -> None:
    """Test mean ± std per family; papers: family -> a paper's figure (pipeline scale) to mark;
    reference: (label, test score) of the classical reference, a vertical line across the bars."""
    k = SCALE.get(metric, 1.0)
    families = list(finals)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * len(families) + 1.5), layout="constrained")
    ys = range(len(families))
    ax.barh(ys, [k * finals[f]["test_mean"] for f in families], xerr=[k * finals[f]["test_std"] for f in families],
            color=["tab:orange" if f == best else "tab:blue" for f in families], capsize=3)
    marked = [(k * papers[f], i) for i, f in enumerate(families) if f in papers]
    if marked:
        ax.scatter(*zip(*marked), marker="D", color="black", zorder=3, label="paper")
    if reference is not None:
        ax.axvline(k * reference[1], color="tab:green", linestyle="--", zorder=3, label=reference[0])
    if marked or reference is not None:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # not over a bar
    ax.set_yticks(list(ys), [f"{f} (best)" if f == best else f for f in families])
    ax.invert_yaxis()
    ax.set(title=fitted_title(dataset, f"test {metric}, mean ± std over seeds", 6.5), xlabel=f"test {_label(metric)}")
    save_figure(fig, path)


# --- `dvc plots show` ---------------------------------------------------------------------------
# Vega-Lite 5 templates with DVC's anchors (<DVC_METRIC_DATA>, _X, _Y, ...: dvc_render fills them).
# The CSVs they draw are long: one row per (family, epoch) or per (family, trial or final rerun);
# dvc.yaml gives x and leaves y to DVC, which takes the last column, named for the dataset's
# metric ("validation accuracy"), so the y axis says what it shows.

_ANCHORED = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
             "data": {"values": "<DVC_METRIC_DATA>"},
             "title": "<DVC_METRIC_TITLE>", "width": 480, "height": 320}
_X = {"field": "<DVC_METRIC_X>", "type": "quantitative", "title": "<DVC_METRIC_X_LABEL>"}
_Y = {"field": "<DVC_METRIC_Y>", "type": "quantitative", "title": "<DVC_METRIC_Y_LABEL>", "scale": {"zero": False}}
_FAMILY = {"field": "family", "type": "nominal", "title": "family", "sort": None}  # in the report's order
_LR_TICKS = [float(f"{m}e{e}") for e in range(-9, 1) for m in (1, 2, 5)]  # 1e-09 ... 5e+00

DVC_TEMPLATES: dict[str, dict[str, Any]] = {
    # learning curves: a line per family (colour), a band of mean ± std over seeds; revisions
    # (`dvc plots diff`) told apart by the dash
    "ctsweep_curves": {
        **_ANCHORED,
        "encoding": {"x": _X, "color": {**_FAMILY, "legend": {"symbolType": "stroke", "symbolOpacity": 1}}},
        "layer": [
            {"mark": {"type": "area", "opacity": 0.15},
             "encoding": {"y": {**_Y, "field": "mean_minus_std"},  # _Y's title: not "mean_minus_std, ..."
                          "y2": {"field": "mean_plus_std"},
                          "detail": {"field": "rev", "type": "nominal"}}},
            {"mark": {"type": "line", "point": True, "tooltip": {"content": "data"}},
             "params": [{"name": "grid", "select": "interval", "bind": "scales"}],
             "encoding": {"y": _Y, "strokeDash": {"field": "rev", "type": "nominal", "title": "revision",
                                                 "legend": {"symbolType": "stroke"}}}},
        ],
    },
    # expected best validation score over n search trials (show_your_work): the curves' drawing,
    # its band from the bootstrap's percentiles
    "ctsweep_trials": {},
    # validation metric against learning rate: a colour per family, search trials as small
    # circles and the final seeds' means (at lr x each factor) as large diamonds
    "ctsweep_lr": {
        **_ANCHORED,
        "params": [{"name": "grid", "select": "interval", "bind": "scales"}],
        "mark": {"type": "point", "filled": True, "opacity": 0.8, "tooltip": {"content": "data"}},
        "encoding": {
            # labels at 1, 2, 5 x 10^k (as 2e-4), slanted; any that would overlap are left out
            "x": {**_X, "scale": {"type": "log", "nice": False, "padding": 12},
                  "axis": {"values": _LR_TICKS, "format": ".0e", "labelAngle": -30, "labelOverlap": "greedy"}},
            "y": {**_Y, "scale": {"zero": False, "padding": 12}},  # a point at the top is not cut in half
            "color": _FAMILY,
            "shape": {"field": "stage", "type": "nominal", "title": "stage",
                      "scale": {"domain": ["search", "final"], "range": ["circle", "diamond"]}},
            "size": {"field": "stage", "type": "nominal", "title": "stage",  # one legend with the shape
                     "scale": {"domain": ["search", "final"], "range": [30, 120]}},
        },
    },
}


DVC_TEMPLATES["ctsweep_trials"] = json.loads(json.dumps(DVC_TEMPLATES["ctsweep_curves"])
                                             .replace('"mean_minus_std"', '"low"').replace('"mean_plus_std"', '"high"'))


def write_dvc_templates(root: Path) -> list[Path]:
    """Write DVC_TEMPLATES into <root>/.dvc/plots (DVC's folder for custom templates) when root is
    a DVC project; a file already holding the same template is left alone. Returns the paths."""
    folder = root / ".dvc"
    if not folder.is_dir():
        return []
    paths = []
    for name, template in DVC_TEMPLATES.items():
        path = folder / "plots" / f"{name}.json"
        text = json.dumps(template, indent=1) + "\n"
        if not path.is_file() or path.read_text() != text:
            write_text(path, text)
        paths.append(path)
    return paths
