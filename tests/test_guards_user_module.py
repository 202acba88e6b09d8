"""A user's family module that ends or stalls the process when imported (issue 31, item 5): refused
in one line naming the family, with exit status 2, within the import time limit, and nothing
written, through the real `ctsweep check-family` and `ctsweep check`, and in-process where
search and a Ray worker import it (load_params, an entry point's lookup)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_params
from pipeline.errors import ConfigError
from pipeline.families.check import check_family
from pipeline.models import get_model_class
from pipeline.models import user as user_families
from tests.conftest import REPO
from tests.test_user_families import GOOD, _distribution, _module, _project, without_waiting_notice

CTSWEEP = Path(sys.executable).with_name("ctsweep")
ORIGIN = r"family 'mine' \(.*params\.yaml: user_families\.mine\): "

BAD = {  # module text -> the one line `ctsweep check-family mine` must print
    "exits": ("import sys\nsys.exit(3)\n",
              ORIGIN + r"`import uf_g_exits` called sys\.exit\(3\) while being imported; a family module must not "
                       r"end the process"),
    "hangs": ("import time\ntime.sleep(600)\n",
              ORIGIN + r"`import uf_g_hangs` did not finish within 2 s \(tried first in a separate process, which was "
                       r"stopped; CTSWEEP_IMPORT_TIMEOUT=<seconds> sets the limit, 0 skips this test\)"),
    "os_exit": ("import os\nos._exit(5)\n",
                ORIGIN + r"`import uf_g_os_exit` ended the process: the interpreter importing it exited with status 5"),
    "crashes": ("import os, signal, sys\nprint('about to crash', file=sys.stderr)\nos.kill(os.getpid(), signal.SIGSEGV)\n",
                ORIGIN + r"`import uf_g_crashes` ended the process: the interpreter importing it was killed by SIGSEGV; "
                         r"its last output: 'about to crash'"),
    "interrupts": ("raise KeyboardInterrupt\n", ORIGIN + r"`import uf_g_interrupts` failed: KeyboardInterrupt$"),
    "reads_stdin": ("input()\n", ORIGIN + r"`import uf_g_reads_stdin` failed: EOFError: EOF when reading a line"),
    "huge_error": ("raise ValueError('x' * 30_000_000)\n",
                   ORIGIN + r"`import uf_g_huge_error` failed: ValueError: x{300,400}\.\.\. \(\d+ characters\)$"),
}


@pytest.fixture(autouse=True)
def _clean_registry():
    yield
    user_families.forget()
    for name in [m for m in sys.modules if m.startswith("uf_g")]:
        del sys.modules[name]


def _ctsweep(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONWARNINGS")}
    command = [str(CTSWEEP)] if CTSWEEP.exists() else [sys.executable, "-m", "pipeline.cli.app"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env={**base, **env}, timeout=300)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


# One case through the real `ctsweep` executable (its exit status and stderr end to end); the others
# through typer's CliRunner in this process: a failing module is imported only by the probe's own
# process (pipeline.models.user.probe), never by the command's, so no case can end this one.
SUBPROCESS_CASE = "crashes"


@pytest.mark.parametrize("case", sorted(BAD))
def test_check_family_refuses_a_module_that_ends_or_stalls_its_import_in_one_line(tmp_path: Path, case: str) -> None:
    text, message = BAD[case]
    _module(tmp_path, f"uf_g_{case}", text)
    _project(tmp_path, {"mine": f"uf_g_{case}:Tiny"})
    before = _files(tmp_path)
    started = time.monotonic()
    args = ("check-family", "mine", "--root", str(tmp_path))
    if case == SUBPROCESS_CASE:
        done = _ctsweep(*args, CTSWEEP_IMPORT_TIMEOUT="2")
        status, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        done = CliRunner().invoke(app, list(args), env={"CTSWEEP_IMPORT_TIMEOUT": "2"})
        status, stdout, stderr = done.exit_code, done.stdout, done.stderr
    assert status == 2, (status, stdout[-2000:], stderr[-2000:])
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctsweep: error: "), stderr[-2000:]
    assert re.search(message, lines[0]), lines[0]
    assert len(lines[0]) < 700
    assert _files(tmp_path) == before  # nothing written, nothing the user had changed
    assert time.monotonic() - started < 120


def test_a_module_still_importing_after_seconds_is_named_with_the_limit_at_once(tmp_path: Path) -> None:
    """A module that sleeps at import: `check-family` says within 5 s what it waits for and for how
    long (it was silent until the limit), then refuses it at the limit; two lines in all."""
    _module(tmp_path, "uf_g_sleeps", "import time\ntime.sleep(600)\n")
    _project(tmp_path, {"mine": "uf_g_sleeps:Tiny"})
    before = _files(tmp_path)
    command = [str(CTSWEEP)] if CTSWEEP.exists() else [sys.executable, "-m", "pipeline.cli.app"]
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}, "CTSWEEP_IMPORT_TIMEOUT": "12"}
    started = time.monotonic()
    proc = subprocess.Popen([*command, "check-family", "mine", "--root", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stderr.readline()
        said_after = time.monotonic() - started
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert first.rstrip("\n") == ("ctsweep: waiting for `import uf_g_sleeps` (a family's module, imported first in a "
                                  "separate process) to finish: up to 12 s in all (CTSWEEP_IMPORT_TIMEOUT=<seconds> "
                                  "sets the limit per module)")
    # WAITING_NOTICE_S (4 s) after the probe starts: well before the 12-s limit whatever the load
    assert said_after < 11, said_after
    assert proc.returncode == 2 and re.search(ORIGIN + r"`import uf_g_sleeps` did not finish within 12 s", rest), rest
    assert len(rest.splitlines()) == 1
    assert _files(tmp_path) == before


def test_ctsweep_check_refuses_it_too_and_a_good_module_passes(tmp_path: Path) -> None:
    _module(tmp_path, "uf_g_exits", BAD["exits"][0])
    _module(tmp_path, "uf_g_good", GOOD)
    _project(tmp_path, {"mine": "uf_g_exits:Tiny", "good": "uf_g_good:Tiny"})
    before = _files(tmp_path)
    done = _ctsweep("check", "--root", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    errors = without_waiting_notice(done.stderr)
    assert len(errors) == 1 and "`import uf_g_exits` called sys.exit(3)" in errors[0], done.stderr
    assert _files(tmp_path) == before
    _project(tmp_path, {"good": "uf_g_good:Tiny"})
    shutil.copy(REPO / "search_spaces" / "cfc.yaml", tmp_path / "search_spaces" / "cfc.yaml")  # `families: [cfc]`
    done = _ctsweep("check", "--root", str(tmp_path))
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stderr[-2000:]


def test_search_reads_params_yaml_the_same_way_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ctsweep search` and every stage import user families in load_params: the same guard."""
    monkeypatch.setenv("CTSWEEP_IMPORT_TIMEOUT", "2")
    _module(tmp_path, "uf_g_hangs", BAD["hangs"][0])
    started = time.monotonic()
    with pytest.raises(ConfigError, match=BAD["hangs"][1]) as info:
        load_params(_project(tmp_path, {"mine": "uf_g_hangs:Tiny"}))
    assert "\n" not in str(info.value) and time.monotonic() - started < 60
    assert "uf_g_hangs" not in sys.modules  # never imported here


def test_without_the_probe_the_import_here_still_turns_sys_exit_into_one_line(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTSWEEP_IMPORT_TIMEOUT", "0")  # 0: no test import in a separate process
    for case in ("exits", "interrupts"):
        _module(tmp_path, f"uf_g_{case}", BAD[case][0])
        with pytest.raises(ConfigError, match=BAD[case][1]):
            load_params(_project(tmp_path, {"mine": f"uf_g_{case}:Tiny"}))


def test_an_entry_point_module_that_hangs_is_refused_where_a_worker_looks_it_up(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTSWEEP_IMPORT_TIMEOUT", "2")
    _distribution(tmp_path / "site", "stalled = uf_g_plugin:Tiny", module="uf_g_plugin", text=BAD["hangs"][0])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"family 'stalled' \(entry point 'stalled' .*`import uf_g_plugin` did not "
                                          r"finish within 2 s"):
        get_model_class("stalled")


def test_a_bad_time_limit_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTSWEEP_IMPORT_TIMEOUT", "soon")
    _module(tmp_path, "uf_g_good", GOOD)
    with pytest.raises(ConfigError, match=r"environment variable CTSWEEP_IMPORT_TIMEOUT is 'soon'; allowed: the "
                                          r"seconds a family module may take to import, a number >= 0"):
        load_params(_project(tmp_path, {"mine": "uf_g_good:Tiny"}))


def test_a_family_whose_forward_calls_sys_exit_fails_that_check_and_the_others_run(tmp_path: Path) -> None:
    _module(tmp_path, "uf_g_forward", GOOD.replace("        out = self.head(",
                                                   "        import sys\n        sys.exit(4)\n        out = self.head("))
    load_params(_project(tmp_path, {"mine": "uf_g_forward:Tiny"}))
    results = {c.name: c for c in check_family(tmp_path, "mine")}
    assert not results["per-sequence output"].passed
    assert results["per-sequence output"].detail == "the family's code called sys.exit(4); it must not end the process"
    assert results["representation"].passed and len(results) == 8

