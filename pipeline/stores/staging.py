"""All-or-nothing output of several files: build them in a staging folder, then move them into
place together, with SIGINT and SIGTERM held back for the few renames that takes.

A stage that writes many files (the report: markdown, JSON, CSVs, PNGs) and is interrupted half-way
would otherwise leave some files new and some old, a mix no single run produced.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pipeline.runtime.interrupts import deferred
from pipeline.stores.files import new_mode


@contextlib.contextmanager
def staged(folder: Path) -> Iterator[Path]:
    """Yield an empty staging folder inside `folder` (same filesystem: renames are atomic). When the
    block succeeds every file in it replaces its counterpart under `folder`; when it raises (an
    error or an interrupt) the staging folder is removed and `folder` is as it was."""
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder))
    try:
        yield stage
        files = sorted(p for p in stage.rglob("*") if p.is_file())
        mode = new_mode()
        with deferred():  # a signal now would leave a mix of old and new files
            for path in files:
                target = folder / path.relative_to(stage)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(path, mode)  # mkstemp's 0600 would hide reports from other users of the machine
                os.replace(path, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
