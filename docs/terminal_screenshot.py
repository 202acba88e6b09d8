"""A PNG of a real terminal's screen, as tmux captured it with its colours, for the docs.

    tmux capture-pane -t SESSION -p -e > screen.ansi
    .venv/bin/python docs/terminal_screenshot.py screen.ansi --name progress-live.png

The captured text (ANSI colour codes kept) is drawn as HTML by rich in a terminal's colours and
taken by headless Chromium (docs/screenshots.py's), into docs/images/screenshots/. Trailing blank
lines are dropped; --height is found from the line count when not given.
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.terminal_theme import MONOKAI
from rich.text import Text

from screenshots import BROWSERS, OUT, screenshot  # docs/screenshots.py, beside this file

LINE_PX, PAD_PX = 20, 40


def html_of(ansi: str, columns: int) -> tuple[str, int]:
    """(the page, its number of lines) of a capture."""
    lines = ansi.rstrip("\n").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    console = Console(record=True, width=columns, force_terminal=True, color_system="truecolor", file=io.StringIO())
    for line in lines:
        console.print(Text.from_ansi(line), overflow="ignore", crop=False, no_wrap=True)
    page = console.export_html(theme=MONOKAI, inline_styles=True)
    page = page.replace("<body>", "<body style=\"margin:0;padding:16px;background:#272822\">", 1)
    return page, len(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("capture", type=Path, help="tmux capture-pane -p -e output")
    parser.add_argument("--name", required=True, help="the PNG's file name")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--columns", type=int, default=150, help="the terminal's width the capture was taken at")
    parser.add_argument("--width", type=int, default=1500)
    parser.add_argument("--height", type=int, default=None)
    args = parser.parse_args(argv)
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        raise SystemExit("no Chromium found: apt-get install chromium")
    page, n = html_of(args.capture.read_text(encoding="utf-8"), args.columns)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "screen.html"
        html.write_text(page, encoding="utf-8")
        out = args.out / args.name
        screenshot(browser, html.as_uri(), out, args.width, args.height or n * LINE_PX + PAD_PX)
    print(out)


if __name__ == "__main__":
    main()
