"""`ctsweep status`: which cells of the last report failed or carry a mark, read from reports/metrics.json.

    xor/cde_fwp_delta: failed: NaN loss (4 trials)
    xor/cfc: not_converged: 3 of 5 seeds not converged (3 still improving at the budget; stopped by max_epochs)

The exit status says whether the pipeline produced a result for every cell: 1 when a cell
failed, 0 otherwise (marks alone are warnings). metrics.json files written before cells had a
status count as ok and unmarked. Its ACROSS_DATASETS entry (the comparison across datasets,
pipeline.reporting.cross_dataset) and its BASELINES entry (the trivial baselines) are no dataset:
every reader of the cells skips them (`datasets`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.progress.render import plain_line
from pipeline.progress.running import running
from pipeline.stores.paths import reports_dir, require
from pipeline.reporting.marks import FAILED, NO_BETTER_THAN_TRIVIAL, NOT_CONVERGED
from pipeline.stores.schema import ListOf, MapOf, OneOf, read_record

PRODUCER = "ctsweep report"
# metrics.json's entry for the comparison across datasets. A dataset name starts with a letter
# (pipeline.names), so a key starting with "_" can never be a dataset's.
ACROSS_DATASETS = "_across_datasets"
BASELINES = "_baselines"  # dataset -> its trivial baselines (pipeline.reporting.trivial)
MACHINES = "_machines"  # fingerprint -> a machine the trials and seeds ran on (pipeline.runtime.machine)
VERDICTS = "_verdicts"  # dataset -> its verdict (pipeline.reporting.verdict): the line and its tests
METRICS_SPEC = {f"{ACROSS_DATASETS}?": dict, f"{BASELINES}?": MapOf(dict), f"{MACHINES}?": MapOf(dict),
                f"{VERDICTS}?": MapOf({"line": str}),
                "*": MapOf({"status?": OneOf("ok", "failed"), "marks?": ListOf({"mark": str, "detail": str})})}


def datasets(metrics: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """metrics.json's datasets (dataset -> family -> cell), without the entries that are no dataset
    (ACROSS_DATASETS, BASELINES: their keys start with "_")."""
    return {d: fams for d, fams in metrics.items() if not d.startswith("_")}


@dataclass(frozen=True)
class Cell:
    """One (dataset, family) of metrics.json: whether it failed and its marks as (mark, detail)."""

    dataset: str
    family: str
    failed: bool
    marks: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.family}"

    def has(self, mark: str) -> bool:
        return any(m == mark for m, _ in self.marks)


def cells(metrics: dict[str, Any]) -> list[Cell]:
    """Every cell of a metrics.json content, in its order."""
    return [Cell(d, f, c.get("status") == "failed", tuple((m["mark"], m["detail"]) for m in c.get("marks", [])))
            for d, fams in datasets(metrics).items() for f, c in fams.items()]


def read_metrics(root: Path) -> dict[str, Any]:
    """reports/metrics.json, checked; missing or corrupt: one-line errors naming `ctsweep report`."""
    return read_record(require(reports_dir(root) / "metrics.json", PRODUCER), PRODUCER, METRICS_SPEC)


def cell_line(cell: Cell) -> str:
    """One line per troubled cell; a failed cell's only mark is `failed` with its reasons."""
    return f"{cell.name}: " + "; ".join(f"{mark}: {detail}" for mark, detail in cell.marks or ((FAILED, "?"),))


def summary(found: list[Cell], prog: str) -> str | None:
    """"<prog>: 1 cell failed (xor/a), 1 not converged (xor/b), 1 no better than trivial (xor/c)",
    or None when no cell failed, is not converged or is no better than trivial (the report's last
    line; other marks are in its footnotes)."""
    groups = [(what, names) for what, names in (
        ("failed", [c.name for c in found if c.failed]),
        ("not converged", [c.name for c in found if c.has(NOT_CONVERGED)]),
        ("no better than trivial", [c.name for c in found if c.has(NO_BETTER_THAN_TRIVIAL)])) if names]
    parts = [f"{len(names)}{'' if i else ' cell' + 's' * (len(names) > 1)} {what} ({', '.join(names)})"
             for i, (what, names) in enumerate(groups)]
    return f"{prog}: " + ", ".join(parts) if parts else None


def in_progress(root: Path) -> list[str]:
    """A plain progress line per stage running now (pipeline.progress.running), read from MLflow."""
    return [plain_line(snap) + (f" ({where})" if where else "") for snap, where in running(root)]


def status(root: Path) -> tuple[list[str], int]:
    """(the lines to print, the exit status): the progress of a stage running now, then a line per
    failed or marked cell of the last report and a summary line; 1 if any cell failed, else 0.
    While a stage runs, the cells are said to be the last report's; with no report yet, only
    the progress is shown (exit 0)."""
    progress = in_progress(root)
    report = reports_dir(root) / "metrics.json"
    if progress and not report.is_file():
        return [*progress, "ctsweep status: a run is in progress; no report yet"], 0
    metrics = read_metrics(root)
    found = cells(metrics)
    scope = _this_project(root)
    # Only this params.yaml's cells, and one line above the table for the others: a report
    # committed by another project (or written before params.yaml changed) has cells that are not
    # this project's, and one of them failed would set the exit status `make run` reads, or a
    # verdict of a dataset this project does not run would read as its own. Marking them instead
    # would still show them in the table and count them in the summary line.
    others = [] if scope is None else [c for c in found if c.dataset not in scope[0] or c.family not in scope[1]]
    found = [c for c in found if c not in others]
    shown_verdicts = {d: v for d, v in metrics.get(VERDICTS, {}).items() if scope is None or d in scope[0]}
    if progress:
        written = time.strftime("%Y-%m-%d %H:%M", time.localtime(report.stat().st_mtime))
        progress.append(f"ctsweep status: a run is in progress; the cells below are those of the last report "
                        f"({report.relative_to(root) if report.is_relative_to(root) else report}, written {written})")
    lines, code = _cells_status(found)
    verdicts = [f"{d}: {v['line']}" for d, v in shown_verdicts.items()]
    return [*progress, *_not_shown(report, root, others, scope), *verdicts, *lines], code


def _this_project(root: Path) -> tuple[list[str], list[str]] | None:
    """params.yaml's `datasets` and `families`, read without validating the rest (`ctsweep check`
    does that; status reads the report); None when there is no params.yaml or they cannot be read
    as lists of names: then every cell of the report is shown, as before."""
    from pipeline.config.yaml_load import load_yaml
    from pipeline.errors import ConfigError

    path = root / "params.yaml"
    if not path.is_file():
        return None
    try:
        data = load_yaml(path)
    except ConfigError:
        return None
    if not isinstance(data, dict):
        return None
    ds, fs = data.get("datasets"), data.get("families")
    if not all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in (ds, fs)):
        return None
    return ds, fs


def _not_shown(report: Path, root: Path, others: list[Cell], scope: tuple[list[str], list[str]] | None) -> list[str]:
    """One line naming the report's cells that are not of this params.yaml's datasets and families."""
    if not others or scope is None:
        return []
    ds = sorted({c.dataset for c in others if c.dataset not in scope[0]})
    fs = sorted({c.family for c in others if c.family not in scope[1]})
    which = "; ".join(f"{what} {_few(names)}" for what, names in (("datasets", ds), ("families", fs)) if names)
    n = len(others)
    name = report.relative_to(root) if report.is_relative_to(root) else report
    return [f"ctsweep status: {n} cell{'s' * (n != 1)} of {name} not shown: not in params.yaml ({which}); "
            f"`ctsweep report` writes the report of this params.yaml"]


def _few(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _cells_status(found: list[Cell]) -> tuple[list[str], int]:
    troubled = [c for c in found if c.failed or c.marks]
    lines = [cell_line(c) for c in troubled]
    n_failed = sum(c.failed for c in found)
    lines.append(f"ctsweep status: {len(found)} cell{'s' if len(found) != 1 else ''}, {n_failed} failed, "
                 f"{len(troubled) - n_failed} marked" if troubled else
                 f"ctsweep status: all {len(found)} cell{'s' if len(found) != 1 else ''} ok, none marked")
    return lines, 1 if n_failed else 0
