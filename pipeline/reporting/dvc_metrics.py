"""What `dvc metrics show` and `dvc metrics diff` read: one small numbers-only file per cell.

    reports/metrics/<dataset>/<family>.json    {"best": 1, "n_marks": 0, "n_parameters": 124025,
                                                 "n_seeds": 5, "test_mean": 0.9605, "test_std": 0.0104,
                                                 "val_mean": 0.9852, "val_std": 0.0155}

DVC prints one row per metrics file and one column per key of every file together, so a single
file holding every cell grows a column per (dataset, family, key): about 3,000 characters for the
default six families. One file per cell keeps the columns to the keys above, the same for every
cell, and adds a row per cell instead:

    Path                                            best    n_marks    n_parameters    n_seeds    test_mean ...
    reports/metrics/japanese_vowels/cfc.json        0       1          150025          5          0.95351   ...

DVC reads numbers, shows strings and booleans as text and drops lists and nulls (with no more than
a debug line), so every value here is a number: `best` is 1 for the family chosen on validation,
else 0; `n_marks` counts the cell's marks (pipeline.reporting.marks: not converged, edge, mostly
failed, not causal, search not saturated, no better than trivial, failed), whose names and
reasons are in reports/metrics.json, results.md and
`ctsweep status`; `n_parameters` is the model's parameter count (DVC's "params" are params.yaml's
keys). A failed cell has no scores: `n_seeds` 0 and its `failed` mark. The p-values, trial counts,
repeats and validation losses stay in reports/metrics.json, which DVC does not read.

Each file is a projection of its cell in reports/metrics.json (the same numbers, never
recomputed), written in the same staging as the rest of the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.reporting.status import datasets
from pipeline.stores.files import write_json

FOLDER = "metrics"  # under reports/: dvc.yaml declares reports/metrics as the report stage's metrics
SCORES = ("val_mean", "val_std", "test_mean", "test_std")
KEYS = ("best", "n_marks", "n_parameters", "n_seeds", *SCORES)  # every key a cell's file may hold


def cell_metrics(cell: dict[str, Any]) -> dict[str, int | float]:
    """The numbers DVC shows for one cell of metrics.json (ok or failed), keys sorted as DVC
    sorts its columns. A score that is missing or not a number (None) is left out, never
    written as something DVC would drop."""
    failed = cell.get("status") == "failed"
    out: dict[str, int | float] = {"best": int(bool(cell.get("best"))), "n_marks": len(cell.get("marks", [])),
                                   "n_seeds": 0 if failed else int(cell["n_seeds"])}
    if not failed:
        out["n_parameters"] = int(cell["n_parameters"])
        out.update({k: float(cell[k]) for k in SCORES if _is_number(cell.get(k))})
    return dict(sorted(out.items()))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def cell_files(metrics: dict[str, Any]) -> dict[Path, dict[str, int | float]]:
    """{path relative to reports/: the cell's numbers} for every cell of a metrics.json content
    (its comparison across datasets is no cell: it stays in metrics.json and results.md)."""
    return {Path(FOLDER) / dataset / f"{family}.json": cell_metrics(cell)
            for dataset, cells in datasets(metrics).items() for family, cell in cells.items()}


def write_cells(folder: Path, metrics: dict[str, Any]) -> set[Path]:
    """Write every cell's file under `folder` (reports/, or the report's staging folder); returns
    their paths relative to it."""
    files = cell_files(metrics)
    for rel, numbers in files.items():
        write_json(folder / rel, numbers)
    return set(files)


def drop_stale(reports: Path, kept: set[Path]) -> list[Path]:
    """Remove the cell files under reports/metrics/ that the report just written does not have
    (a family or dataset no longer in params.yaml) and the folders they leave empty: staging
    replaces files but never deletes one, and DVC would go on showing the old rows. kept: paths
    relative to reports/. Returns the files removed."""
    folder = reports / FOLDER
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.rglob("*.json") if p.is_file() and p.relative_to(reports) not in kept)
    for path in stale:
        path.unlink()
    for sub in sorted((p for p in folder.iterdir() if p.is_dir()), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()
    return stale
