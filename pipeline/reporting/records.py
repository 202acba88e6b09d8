"""Reading the final and search records the report and promotion use, failed families included.

A final record is either "ok" (scores, seeds, a model) or "failed" (every search trial failed:
identifying keys, trial counts and the errors, nothing else). Each kind is checked against its
own fields, so a failed family is read as such instead of being taken for a corrupt file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import MissingInputError
from pipeline.stores.paths import final_result_path, require, search_result_path
from pipeline.reporting.marks import is_failed
from pipeline.stores.schema import MODE, SEARCH_FOR_REPORT, ListOf, OneOf, read_record

FINAL_FAILED = {"status": OneOf("failed"), "dataset": str, "family": str, "metric": str, "mode": MODE,
                "n_trials": int, "n_failed": int, "errors": ListOf(str), "reason?": str}
STATUS = {"status?": OneOf("ok", "failed")}


def read_final(root: Path, dataset: str, family: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One final record, checked against FINAL_FAILED if it says it failed, else against `spec`."""
    producer = f"ctsweep final {dataset} {family}"
    path = require(final_result_path(root, dataset, family), producer)
    head = read_record(path, producer, STATUS)
    return read_record(path, producer, FINAL_FAILED if is_failed(head) else spec)


def collect(root: Path, datasets: list[str], families: list[str],
            spec: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every final record; the missing ones are named together with the stage that produces them."""
    missing = [(d, f) for d in datasets for f in families if not final_result_path(root, d, f).exists()]
    if missing:
        by_dataset = {d: [f for dd, f in missing if dd == d] for d, _ in missing}
        what = "; ".join(f"{d}: {', '.join(fs)}" for d, fs in by_dataset.items())
        first = missing[0]
        raise MissingInputError(
            f"no final results for {what} (looked in {final_result_path(root, *first).parent}); run the final "
            f"stage first: `ctsweep final {first[0]} {first[1]}` for each pair, or `dvc repro` for all")
    return {d: {f: read_final(root, d, f, spec) for f in families} for d in datasets}


def split(results: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the ok records, the failed ones) of one dataset, each keeping the families' order."""
    ok = {f: r for f, r in results.items() if not is_failed(r)}
    return ok, {f: r for f, r in results.items() if is_failed(r)}


def read_search(root: Path, dataset: str, family: str) -> dict[str, Any]:
    """The search record of an ok family (a failed family's search has nothing the report plots)."""
    producer = f"ctsweep search {dataset} {family}"
    return read_record(require(search_result_path(root, dataset, family), producer), producer, SEARCH_FOR_REPORT)
