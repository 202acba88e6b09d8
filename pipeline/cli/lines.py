"""The line `ctsweep search` and `ctsweep final` print per (dataset, family): its outcome, and
whether it was done now, resumed or found current."""

from __future__ import annotations

from typing import Any

import typer


def say_searched(dataset: str, family: str, record: dict[str, Any]) -> None:
    """`<dataset>/<family>: best val <metric> <value> (<n> trials, <k> failed)`, or why it failed."""
    how = " (up to date: not searched again)" if record.get("up_to_date") else (
        " (resumed)" if record.get("resumed") else "")
    if record.get("status") == "failed":  # recorded, not raised: one family must not stop `dvc repro`
        typer.echo(f"{dataset}/{family}: every trial failed ({record['n_trials']} trials): "
                   f"{'; '.join(record.get('errors', [])[:3]) or 'no reason recorded'}{how}")
        return
    typer.echo(f"{dataset}/{family}: best val {record['metric']} {record['best_val']:.4f} "
               f"({record['n_trials']} trials, {record['n_failed']} failed){how}")


def say_evaluated(dataset: str, family: str, r: dict[str, Any]) -> None:
    """`<dataset>/<family>: test <mean> ± <std> over <n> seeds`, or why it was not evaluated."""
    how = " (up to date: not trained again)" if r.get("up_to_date") else ""
    if r.get("status") == "failed":
        typer.echo(f"{dataset}/{family}: not evaluated: {r.get('reason', 'every search trial failed')}{how}")
        return
    typer.echo(f"{dataset}/{family}: test {r['test_mean']:.4f} ± {r['test_std']:.4f} over {r['n_seeds']} seeds{how}")
