"""Screenshots of pages of the built site (`make docs` first) into docs/images/screenshots/.

    .venv/bin/python docs/screenshots.py reference/cli/ reference/params/
    .venv/bin/python docs/screenshots.py --height 2000 --name home.png index.html

Each page is served from site/ by `python -m http.server` on 127.0.0.1 (a free port) and taken by
headless Chromium (Debian's package: `apt-get install chromium`) at 1280 pixels wide, from its
top (--height pixels; headless Chromium draws a blank image for a URL with a #fragment). A page
`reference/cli/` is saved as reference-cli.png; --name sets the name when one page is given.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
OUT = ROOT / "docs" / "images" / "screenshots"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def png_name(page: str) -> str:
    """`reference/cli/` -> reference-cli.png; `` or `index.html` -> index.png."""
    stem = re.sub(r"[^A-Za-z0-9_]+", "-", page.removesuffix("index.html")).strip("-")
    return f"{stem or 'index'}.png"


def serve(site: Path) -> tuple[subprocess.Popen[str], str]:
    """`python -m http.server` on a free port of 127.0.0.1 serving `site`, and its base URL."""
    # Port 0: the system picks a free port, and http.server prints which.
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 41235 (http://127.0.0.1:41235/) ..."
    match = re.search(r"port (\d+)", line)
    if match is None:
        server.kill()
        raise SystemExit(f"http.server did not start: {line!r}")
    base = f"http://127.0.0.1:{match.group(1)}/"
    for _ in range(50):  # it prints before it accepts; a few tries at most
        try:
            urllib.request.urlopen(base, timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return server, base


def screenshot(browser: str, url: str, out: Path, width: int, height: int) -> None:
    """One headless Chromium screenshot of `url` into `out`."""
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={out}", url],
                   check=True, capture_output=True, timeout=120)
    if not out.is_file():
        raise SystemExit(f"{browser} wrote no {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="+", help="site paths, e.g. reference/cli/ or index.html#section")
    parser.add_argument("--site", type=Path, default=SITE, help="the built site (default: site/)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go (default: docs/images/screenshots/)")
    parser.add_argument("--name", help="the PNG's file name, for one page")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.name and len(args.pages) > 1:
        parser.error("--name takes one page")
    if fragments := [page for page in args.pages if "#" in page]:
        parser.error(f"{fragments[0]}: headless Chromium draws a blank image for a #fragment; "
                     "take the page with a larger --height instead")
    if not (args.site / "index.html").is_file():
        raise SystemExit(f"no built site in {args.site}: run `make docs` first")
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        raise SystemExit("no Chromium found: apt-get install chromium")
    args.out.mkdir(parents=True, exist_ok=True)
    server, base = serve(args.site)
    try:
        for page in args.pages:
            out = args.out / (args.name or png_name(page))
            screenshot(browser, base + page.lstrip("/"), out, args.width, args.height)
            print(out)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
