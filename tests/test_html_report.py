"""results.html, the report MLflow shows with its plots (issue 31): every image inlined as a data:
URI, no relative link, and logged beside results.md to the final runs of a real MLflow store."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.reporting.html_report import report_html, write_report_html
from pipeline.reporting.report import PLOT_KINDS, report
from pipeline.stores import tracking
from pipeline.stores.paths import final_result_path
from tests.test_report import _write, project  # noqa: F401  (the hand-made results of test_report)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


class _Tags(HTMLParser):
    """Every tag's attributes, by tag name."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, list[dict[str, str | None]]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.setdefault(tag, []).append(dict(attrs))


def _tags(page: str) -> dict[str, list[dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def _inlined(src: str | None) -> bytes:
    assert src is not None and src.startswith("data:image/png;base64,"), (src or "")[:60]
    return base64.b64decode(src.split(",", 1)[1])


def test_images_are_inlined_and_the_tables_rendered(tmp_path: Path) -> None:
    png = tmp_path / "d_test.png"
    png.write_bytes(PNG)
    markdown = ("# Results\n\n| family | test |\n|---|---|\n| **a** (best) | 0.9 |\n\n"
                "![d test](d_test.png) ![d curves](d_curves.png)\n\n"
                "<details><summary>params</summary>\n\n```json\n{\"a\": 1}\n```\n</details>\n")
    page = report_html(markdown, {"d_test.png": png})
    tags = _tags(page)
    assert [_inlined(img["src"]) for img in tags["img"]] == [PNG] and tags["img"][0]["alt"] == "d test"
    assert "d test" not in page.split("<img", 1)[0]  # the alt text is an attribute, not shown as text
    assert "[d curves: image d_curves.png not found]" in page  # a link to no file: text, not a broken <img>
    assert "table" in tags and "<strong>a</strong> (best)" in page and "details" in tags
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page


def test_the_prefix_names_the_folder_the_markdown_links_its_images_in(tmp_path: Path) -> None:
    png = tmp_path / "d_lr.png"
    png.write_bytes(PNG)
    page = write_report_html(tmp_path / "r.html", "![lr](plots/d_lr.png)", [png], prefix="plots/").read_text()
    assert [_inlined(img["src"]) for img in _tags(page)["img"]] == [PNG]


def test_the_final_runs_get_results_html_with_every_plot_inlined(project: Path,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client, exp_id = tracking.experiment_id(project, "d")
    runs = {f: tracking.start_run(client, exp_id, f"final/{f}", {"stage": "final"}) for f in ("a", "b")}
    for family, run in runs.items():
        path = final_result_path(project, "d", family)
        _write(path, {**json.loads(path.read_text()), "mlflow_parent_run_id": run})
    report(project, ["d"], ["a", "b"])

    client = MlflowClient(tracking.tracking_uri(project))
    plots = project / "reports" / "plots"
    pngs = {p.name: p.read_bytes() for p in plots.glob("d_*.png")}
    assert sorted(pngs) == sorted(f"d_{kind}.png" for kind in PLOT_KINDS)
    for run in runs.values():
        logged = {f.path for f in client.list_artifacts(run, "report")}
        assert {"report/results.md", "report/results.html"} | {f"report/{n}" for n in pngs} == logged
        page = Path(client.download_artifacts(run, "report/results.html", str(project / run))).read_text()
        images = _tags(page)["img"]
        assert sorted(_inlined(img["src"]) for img in images) == sorted(pngs.values())  # each plot, inlined
        assert "not found]" not in page and ".png)" not in page  # no link left as Markdown text
        assert "<h2>d (accuracy, %)</h2>" in page and "<table>" in page
