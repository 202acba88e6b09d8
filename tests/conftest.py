"""Shared fixtures: the real project files, copied into a temporary root and shrunk."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def write_params(root: Path, params: dict) -> Path:
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def readme_blocks(section: str, language: str) -> list[str]:
    """The fenced code blocks in `language` of the README section headed `section` ("## ..."),
    dedented (blocks inside list items are indented)."""
    import re
    import textwrap

    text = (REPO / "README.md").read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    body = text[start:end if end >= 0 else None]
    found = re.findall(r"^( *)```" + language + r"\n(.*?)^\1```", body, flags=re.S | re.M)
    return [textwrap.dedent(code) for _, code in found]


def stages_run(dvc_output: str) -> list[str]:
    """The stages a `dvc repro` ran, in order, from its output ("Running stage 'search@d':")."""
    import re

    return re.findall(r"Running stage '([^']+)'", dvc_output)


# The tests' budgets are a few epochs on purpose; the default's step floors (params.yaml
# `min_steps`) would lengthen each of those epochs many times over. Tests of the floor set it.
NO_STEP_FLOOR = ("  min_steps: 100 ", "  min_steps: 700 ")


def without_step_floor(text: str) -> str:
    """params.yaml text with the step floors at 1 (comments kept)."""
    for line in NO_STEP_FLOOR:
        assert line in text, f"params.yaml no longer holds {line!r}: update tests/conftest.py"
        text = text.replace(line, "  min_steps: 1 " + " " * (len(line) - len("  min_steps: 1 ")))
    return text


def default_params() -> dict:
    return yaml.safe_load(without_step_floor((REPO / "params.yaml").read_text()))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A temporary project root with the real search spaces and params.yaml."""
    shutil.copytree(REPO / "search_spaces", tmp_path / "search_spaces")
    (tmp_path / "params.yaml").write_text(without_step_floor((REPO / "params.yaml").read_text()))
    return tmp_path


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the fixture folder with HTTP Range support; `server.faults` can cut responses short."""

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        self.server.requests.append((self.path, self.headers.get("Range")))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        body = data[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        cut = self.server.faults.pop(path.name, None) if self.server.faults else None
        if cut is not None:  # send only part of the body, then drop the connection
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


class FixtureServer:
    """A real HTTP server on 127.0.0.1 serving `root`; `faults[filename] = n` cuts the next
    response for that file after n bytes; `requests` lists (path, Range header) received."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        handler = functools.partial(_RangeHandler, directory=str(root))
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.faults = {}
        self._httpd.requests = []
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def faults(self) -> dict[str, int]:
        return self._httpd.faults

    @property
    def requests(self) -> list[tuple[str, str | None]]:
        return self._httpd.requests

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def http_server(tmp_path: Path):
    """Fixture files put in `.root` are served at `.url` (http://127.0.0.1:PORT/)."""
    server = FixtureServer(tmp_path / "served")
    yield server
    server.close()


def prepare_served(tmp_path: Path, server: FixtureServer, name: str, params):
    """The real fetch + prepare of dataset `name` from the fixture server, in tmp_path;
    returns (meta, the processed dataset as loaded back from disk)."""
    from pipeline.data.contract import load_dataset
    from pipeline.data.prepare import prepare

    out = tmp_path / "processed" / name
    meta = prepare(name, params, out_dir=out, raw_dir=tmp_path / "raw" / name,
                   lock_path=tmp_path / "raw.lock", source=server.url)
    return meta, load_dataset(out)
