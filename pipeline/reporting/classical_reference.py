"""What the report shows of a dataset's classical reference (results/DATASET/classical.json,
written by pipeline.classical.stage): an italic row under the families' table with the classifier's name, its
library and training time, a line beneath it saying how it was trained or why there is none, a
line on the test plot, and metrics.json's entry (without the seconds: two runs of the same
project must write the same metrics.json). It is a reference, not a family: never ranked, never
the best, never promoted. A file that cannot be read is one line of the report, not an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.reporting.numbers import fmt
from pipeline.stores.files import read_json
from pipeline.stores.paths import classical_result_path

STATUSES = ("ok", "failed", "not_applicable")
_NEEDED = {"ok": ("classifier", "library", "test", "train_seconds", "n_train"), "failed": ("classifier", "reason"),
           "not_applicable": ("reason",)}

Reference = dict[str, Any] | str | None  # the record, why it cannot be read, or None: never computed


def read_reference(root: Path, dataset: str) -> Reference:
    """The dataset's classical record; None where `ctsweep classical` never ran (a project from
    before the stage, a report run by hand); one line naming the file where it cannot be used."""
    path = classical_result_path(root, dataset)
    if not path.is_file():
        return None
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    try:
        record = read_json(path, f"ctsweep classical {dataset}")
    except Exception as exc:  # noqa: BLE001 -- a broken reference never stops the report
        return f"{shown}: {(str(exc).splitlines() or [type(exc).__name__])[0]}"
    status = record.get("status") if isinstance(record, dict) else None
    if status not in STATUSES:
        return f"{shown}: `status` is {status!r}; valid: {', '.join(STATUSES)} (`ctsweep classical {dataset}` rewrites it)"
    missing = [k for k in _NEEDED[status] if k not in record]
    if missing:
        return f"{shown}: no {', '.join(missing)} (`ctsweep classical {dataset}` rewrites it)"
    return record


def usable(ref: Reference, metric: str) -> dict[str, Any] | None:
    """The record if it holds a test score in `metric`, else None."""
    ok = isinstance(ref, dict) and ref["status"] == "ok" and ref.get("metric", metric) == metric
    return ref if ok else None


def reference_rows(ref: Reference, metric: str, columns: int) -> list[str]:
    """The table row of a usable reference (`columns`: the table's column count); none otherwise."""
    record = usable(ref, metric)
    if record is None:
        return []
    name = f"*classical: {record['classifier']} ({record['library']}), {record['train_seconds']:.1f} s to train*"
    return [f"| {name} | {fmt(record['test'], None, metric)} |" + " — |" * (columns - 2)]


def reference_note(ref: Reference, dataset: str, metric: str) -> list[str]:
    """The line under the table: how the reference was trained, or why there is none."""
    if ref is None:
        line = (f"Classical reference not computed (`ctsweep classical {dataset}` writes "
                f"results/{dataset}/classical.json).")
    elif isinstance(ref, str):
        line = f"Classical reference unreadable: {ref}."
    elif ref["status"] == "not_applicable":
        line = f"No classical reference: {ref['reason']}."
    elif ref["status"] == "failed":
        line = f"Classical reference failed: {ref['reason']}."
    elif usable(ref, metric) is None:
        line = f"Classical reference scored in {ref['metric']}, not {metric}: not shown (`ctsweep classical {dataset}`)."
    else:
        line = (f"Classical reference (the *classical* row): {ref['classifier']} from {ref['library']}, trained on "
                f"the training and validation splits ({ref['n_train']:,} {ref.get('unit', 'series')}) on one core, seed {ref['seed']}, "
                "scored on the same test split as the families; a point of comparison, not ranked.")
    return [line, ""]


def would_rank(ref: Reference, tests: list[float], metric: str, mode: str) -> float | None:
    """The rank the reference would take among families with test means `tests` (1 = best, a tie
    shares the mean rank, as the families' ranks do); None without a usable reference."""
    record = usable(ref, metric)
    if record is None:
        return None
    score = record["test"]
    better = sum(t > score if mode == "max" else t < score for t in tests)
    return 1 + better + 0.5 * sum(t == score for t in tests)


def as_json(ref: Reference) -> dict[str, Any]:
    """metrics.json's `classical` entry of a dataset: no timings (module docstring)."""
    if ref is None:
        return {"status": "not_computed"}
    if isinstance(ref, str):
        return {"status": "unreadable", "reason": ref}
    kept = ("status", "classifier", "library", "metric", "test", "reason", "n_train", "seed")
    return {k: ref[k] for k in kept if k in ref}
