"""Coverage for Ray worker processes, loaded only by `make coverage` (PYTHONPATH holds this folder).

coverage.py's `patch = subprocess` starts measuring in every Python process the tests start, Ray
workers included (they inherit the environment), but it saves its data from an atexit handler,
and a Ray worker ends without running one (checked: a Ray task's lines were missing from the data
without this file). So in a Ray worker a daemon thread saves what was measured twice a second; coverage.py flushes from a
copy of the tracer's data, so a save beside a running tracer is safe (Collector.flush_data).
"""

from __future__ import annotations

import os
import sys
import threading
import time

SAVE_EVERY_S = 0.5


def _ray_worker() -> bool:
    return bool(sys.argv) and sys.argv[0].endswith(("default_worker.py", "setup_worker.py"))


def _save_periodically() -> None:
    import coverage

    time.sleep(0.1)  # sys.argv is complete once the interpreter has started the script
    cov = coverage.Coverage.current()
    if cov is None or not _ray_worker():
        return
    while True:
        time.sleep(SAVE_EVERY_S)
        try:
            cov.save()
        except Exception:  # a save that races the process's end is lost, not fatal
            pass


if os.environ.get("COVERAGE_PROCESS_CONFIG") or os.environ.get("COVERAGE_PROCESS_START"):
    threading.Thread(target=_save_periodically, name="coverage-saver", daemon=True).start()
