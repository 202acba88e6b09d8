"""The report's copy in MLflow: results.md, results.html and the plots, attached as artifacts
(folder `report`) of every dataset's final parent runs, so that a run browsed in MLflow shows the
table it is part of."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException

from pipeline.reporting import html_report
from pipeline.stores import tracking


def log_to_mlflow(root: Path, finals: dict[str, dict[str, dict[str, Any]]], markdown: str,
                  pngs: list[Path]) -> int:
    """Attach the report and its plots to every final (parent) run, all in the run's folder
    `report`; returns how many runs got them. markdown: the report with its images linked as
    `<name>.png` (results_markdown(..., images="")), so every link resolves among the run's
    artifacts; pngs: every PNG it links, of every dataset. Beside `results.md` goes
    `results.html`, the same report with its PNGs inlined (pipeline.reporting.html_report): MLflow
    shows that page with its plots, where it shows the Markdown's image links as text. Records
    without a run id (hand-made results) are skipped."""
    runs = [(d, r["mlflow_parent_run_id"]) for d, res in finals.items() for r in res.values()
            if r.get("mlflow_parent_run_id")]
    if not runs:
        return 0
    uri = tracking.tracking_uri(root)
    client = tracking.MlflowClient(uri)
    attached = 0
    with tempfile.TemporaryDirectory(prefix="ctsweep-report-") as tmp:
        report = Path(tmp) / "results.md"
        report.write_text(markdown)
        page = html_report.write_report_html(Path(tmp) / "results.html", markdown, pngs)  # images inlined
        for dataset, run_id in runs:
            if not _run_exists(client, run_id):
                # The report is written; only its copy in MLflow is missing. Happens when DVC's run
                # cache restored a final record trained against another (or a deleted) mlflow.db.
                family = next(f for f, r in finals[dataset].items() if r.get("mlflow_parent_run_id") == run_id)
                print(f"ctsweep: warning: results/{dataset}/final/{family}.json names MLflow run {run_id}, which "
                      f"the store {uri} does not have: the report is not attached to it (`ctsweep final "
                      f"{dataset} {family}` trains it again with its runs)", file=sys.stderr)
                continue
            for path in (report, page, *pngs):
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
