"""Shared fixtures: the real project files, copied into a temporary root and shrunk."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import shared_ray
from tests.shared_ray import start_local_ray, stop_local_ray

REPO = Path(__file__).resolve().parents[1]


def write_params(root: Path, params: dict) -> Path:
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


WORKED_EXAMPLE = REPO / "docs" / "how-to" / "worked-example.md"


def doc_blocks(section: str, language: str, page: Path = WORKED_EXAMPLE) -> list[str]:
    """The fenced code blocks in `language` of the section headed `section` ("## ...") of a
    documentation page, dedented (blocks inside list items are indented)."""
    import re
    import textwrap

    text = page.read_text()
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


# ... and a fixed budget: searches of num_samples trials and the configured seeds, no more (the
# shipped saturating search and raced seeds would multiply the small runs' cost; tests/test_saturation.py
# and tests/test_final_race.py turn them on).
FIXED_BUDGET = ("    enabled: true           # true: num_samples is each family's share",
                "    enabled: true           # true: after `seeds`, the best family")


def params_for_tests(text: str) -> str:
    """params.yaml text as the tests run it: no step floors, a fixed budget (comments kept)."""
    for line in FIXED_BUDGET:
        assert line in text, f"params.yaml no longer holds {line!r}: update tests/conftest.py"
        text = text.replace(line, line.replace("enabled: true ", "enabled: false"))
    return without_step_floor(text)


def default_params() -> dict:
    return yaml.safe_load(params_for_tests((REPO / "params.yaml").read_text()))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A temporary project root with the real search spaces and params.yaml."""
    shutil.copytree(REPO / "search_spaces", tmp_path / "search_spaces")
    (tmp_path / "params.yaml").write_text(params_for_tests((REPO / "params.yaml").read_text()))
    return tmp_path


# ------------------------------------------------------------------ the order of the test files


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of the system tests that take minutes first, the unit-level files after them.

    `make test` hands whole files to its two pytest-xdist processes in this order (Makefile:
    loadfile), so the long files start early and the many short ones fill both processes at the
    end instead of one process finishing a long file alone. A file's weight: its `slow` tests,
    those with a larger time limit (`@pytest.mark.timeout`: minutes here) counting for more.
    Within a file, the tests that share the process's local Ray
    (`local_ray`) go first and the others keep their order after them: the shared instance is
    stopped before every other test (`_own_ray_unless_shared`), so a file that mixed them started
    it again after each break (17 starts in the suite, 12 with this order; about 5 CPU-seconds
    and 10 s each)."""
    weight: dict[Path, float] = {}
    for item in items:
        weight.setdefault(item.path, 0.0)
        if item.get_closest_marker("slow") is None:
            continue
        limit = item.get_closest_marker("timeout")
        weight[item.path] += 1 + (limit.args[0] / 300 if limit and limit.args else 0)
    first_seen = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}
    items.sort(key=lambda item: (-weight[item.path], first_seen[item.path], "local_ray" not in item.fixturenames))


# ------------------------------------------------------------------ one local Ray per test process


@pytest.fixture(autouse=True)
def _own_ray_unless_shared(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that does not ask for `local_ray` finds no shared Ray initialised in its process: it
    starts (and stops) its own, as ctsweep would, or checks that nothing started one. So the shared
    instance is stopped before such a test; the next `local_ray` test starts it again.

    After such a test, a Ray still initialised that is neither the shared one nor a holding
    fixture's is one the test (or the code it ran) started and did not stop: that would make a
    later test's "nothing started Ray" check fail for no fault of its own. It is stopped, and the
    test that left it fails at teardown, naming itself."""
    if "local_ray" in request.fixturenames:
        yield
        return
    stop_local_ray()
    yield
    if shared_ray.leaked():
        sys.modules["ray"].shutdown()
        pytest.fail(f"{request.node.nodeid} left a Ray initialised in the test process (stopped now)", pytrace=False)


@pytest.fixture
def local_ray() -> None:
    """One local Ray instance per test process (each pytest-xdist worker has its own), kept from
    one test to the next, as Ray's own test suite shares clusters: the search and final stages
    use an initialised Ray as they find it (pipeline.sweep.cluster.ray_session) instead of
    starting and stopping one (seconds each). For tests whose trials need nothing a fresh
    instance would give them: a test that sets environment variables for its trial processes,
    counts the CPUs or kills Ray starts its own. (tests/shared_ray.py: the instance's bookkeeping.)"""
    start_local_ray()


# ------------------------------------------------------------------ one PostgreSQL per test process


@pytest.fixture(scope="session")
def postgres_session(tmp_path_factory: pytest.TempPathFactory):
    """One PostgreSQL server (the project's own, tests/clusters.py) per test process: each
    pytest-xdist worker has its own session, so its own server. Tests take `postgres_server`."""
    from tests.clusters import running_postgres

    with running_postgres(tmp_path_factory) as server:
        yield server


@pytest.fixture
def postgres_server(postgres_session):
    """The session's PostgreSQL server with its databases (pipeline.stores.postgres.DATABASES:
    mlflow, optuna) new and empty for this test."""
    from pipeline.stores.postgres import DATABASES
    from tests.clusters import fresh_database

    for name in DATABASES:
        fresh_database(postgres_session, name)
    return postgres_session


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
