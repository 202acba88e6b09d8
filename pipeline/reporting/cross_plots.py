"""The pictures of the comparison across datasets: its critical-difference diagram
(reports/plots/cross_dataset_cd.png) and the mean ranks for `dvc plots show` (reports/ranks.csv:
family, mean_rank; long, like the other plot CSVs; only the header when nothing was compared,
since DVC wants every declared plot file to exist).

Each family sits at its mean rank on an axis from 1 (best) to K; a bar joins families that no
pairwise test separates (scikit-posthocs draws them from the same Holm-adjusted p-values the
report's table prints, so table and picture agree).

When the datasets are too few for any pair to be separated (pipeline.reporting.cross_dataset.Power),
a bar joining everyone would read as "no difference" where it only means "no power". The library
has no switch for leaving the bars out, and a made-up significance matrix would break the
agreement with the table, so the real matrix goes in and the bars are drawn invisible
(`crossbar_props={"visible": False}`, passed on to matplotlib's Line2D); the report says why
under the picture.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from pipeline.reporting.plots import fitted_title, plt, save_figure  # plots sets the Agg backend first
from pipeline.reporting.cross_dataset import Comparison, Refusal
from pipeline.stores.files import write_text

FILE = "cross_dataset_cd.png"  # under reports/plots/; no dataset's plot ends in "_cd"
RANKS = "ranks.csv"  # under reports/; dvc.yaml's report stage draws it (bar_horizontal)


def write_outputs(folder: Path, found: Comparison | Refusal | None) -> list[Path]:
    """Write ranks.csv and, for a Comparison, plots/FILE under `folder` (reports/ or the report's
    staging folder); returns the PNGs written."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["family", "mean_rank"])
    if isinstance(found, Comparison):
        writer.writerows([f, round(r, 6)] for f, r in found.mean_ranks.items())
    write_text(folder / RANKS, buffer.getvalue())
    if not isinstance(found, Comparison):
        return []
    plot_cd(folder / "plots" / FILE, found)
    return [folder / "plots" / FILE]


def drop_stale(reports: Path, found: Comparison | Refusal | None) -> None:
    """Remove an earlier report's diagram when this one has none: staging never deletes a file."""
    if not isinstance(found, Comparison):
        (reports / "plots" / FILE).unlink(missing_ok=True)


def plot_cd(path: Path, found: Comparison) -> dict[str, list[Any]]:
    """Draw the diagram of `found` at `path`; returns the artists scikit-posthocs made (its
    "crossbars" are invisible when found.power is not enough)."""
    import pandas as pd  # late, as in cross_dataset: seconds to import
    import scikit_posthocs as sp

    families = list(found.mean_ranks)
    matrix = pd.DataFrame([[found.p_holm[a][b] for b in families] for a in families], index=families,
                          columns=families)
    width = 7.0
    fig, ax = plt.subplots(figsize=(width, 0.35 * len(families) + 1.6), layout="constrained")
    # a marker at each end: a bar between two equal mean ranks has no length and would not show
    bars = {"marker": "o", "markersize": 3} if found.power.enough else {"visible": False}
    artists = sp.critical_difference_diagram(found.mean_ranks, matrix, alpha=found.power.alpha, ax=ax,
                                             crossbar_props=bars, label_fmt_left="{label} ({rank:.2f})",
                                             label_fmt_right="({rank:.2f}) {label}")
    how = ("bars: not separated by Wilcoxon-Holm" if found.power.enough
           else "no bars: too few datasets to separate any pair")
    ax.set_title(fitted_title(f"Mean rank over {len(found.datasets)} datasets (test {found.metric})", how, width),
                 pad=24)
    save_figure(fig, path)
    return artists
