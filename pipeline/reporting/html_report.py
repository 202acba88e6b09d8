"""results.html: the report as one self-contained HTML page, for MLflow's artifact viewer.

MLflow 3.17's Markdown viewer shows a relative image link as text and drops a data: URI's
source (a broken image), so a `results.md` logged beside its PNGs shows no plot in MLflow. Its
HTML viewer (a sandboxed iframe) does show a page's data: images (both checked in Chromium), so
the copy logged to the final runs is also rendered here, every PNG it links inlined as a
base64 data: URI: the page needs no other file and no network.

The Markdown is ctsweep's own (pipeline.reporting.report.results_markdown): its raw HTML (the
provenance's `<details>`) is kept, as GitHub keeps it.
"""

from __future__ import annotations

import base64
import html
import mimetypes
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 14px;
       line-height: 1.45; color: #1f2328; margin: 16px 24px; max-width: 1400px; }
h1, h2 { border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; }
table { border-collapse: collapse; margin: 8px 0 16px; display: block; overflow-x: auto; }
th, td { border: 1px solid #d1d9e0; padding: 4px 10px; text-align: left; }
tr:nth-child(2n) { background: #f6f8fa; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;
            background: #f6f8fa; border-radius: 4px; }
code { padding: .1em .3em; }
pre { padding: 12px; overflow-x: auto; }
img { max-width: 100%; vertical-align: top; }
.missing { color: #9a6700; font-style: italic; }
"""


def data_uri(path: Path) -> str:
    """The file as a base64 data: URI, typed by its suffix (PNG for `.png`)."""
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: dict[str, Any]) -> str:
    """Render a Markdown image with its file inlined; a link to no known file renders as its
    alt text, marked missing, never as a relative <img> that could not load (a markdown-it
    render rule, bound to its renderer)."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = "".join(child.content for child in token.children or [])
    path = env["images"].get(src)
    if path is None:
        return f'<span class="missing">[{html.escape(alt)}: image {html.escape(src)} not found]</span>'
    return f'<img src="{data_uri(path)}" alt="{html.escape(alt, quote=True)}">'


def report_html(markdown: str, images: Mapping[str, Path], title: str = "ctsweep results") -> str:
    """The Markdown report as one HTML page with its images inlined.

    images: each image link of the Markdown as written (e.g. `japanese_vowels_test.png` or
    `plots/japanese_vowels_test.png`) -> the file it names. Links not in it render as text."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.add_render_rule("image", _image)
    body = md.render(markdown, {"images": dict(images)})
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
            f"<body>\n{body}</body>\n</html>\n")


def write_report_html(path: Path, markdown: str, pngs: Sequence[Path], prefix: str = "") -> Path:
    """Write report_html(markdown) to path; pngs are linked in the Markdown as prefix + name
    ("" for MLflow's copy, `plots/` for reports/results.md). Returns path."""
    path.write_text(report_html(markdown, {f"{prefix}{p.name}": p for p in pngs}), encoding="utf-8")
    return path
