"""Which of a stage's outputs are still current, so a stage that DVC reruns for one family redoes
only that family.

DVC caches per stage, and the search and final stages run every family of a dataset in one
stage (one Ray experiment, pipeline.sweep.families). A changed space file makes DVC rerun the
dataset's stage; the stage then skips each family whose result file was written from the same
inputs: the family's fingerprint (params, space, data) and the digest of the code the stage's
`dvc.yaml` entry depends on. Skipped results keep their bytes, so DVC sees them unchanged and
reruns nothing downstream of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/
DIGEST_KEY = "inputs_digest"  # in a result record: what it was computed from

# The package paths each stage's dvc.yaml entry lists as deps (tests/test_concurrent_search.py checks it).
SEARCH_CODE = ("models", "data/contract.py", "training", "spaces", "stores/staleness.py", "sweep",
               "comparison")  # search.saturation reads the expected-best curve
FINAL_CODE = ("models", "data/contract.py", "training", "final", "stores/staleness.py", "serving/pyfunc.py",
              "sweep/cluster.py", "sweep/context.py", "sweep/run_lookup.py",
              # the race's decisions (final.race): its settings, the tie rule and the tests
              "config/race.py", "comparison")


def code_digest(paths: Iterable[str]) -> str:
    """sha256 over the Python sources under `paths` (relative to the package), in a fixed order."""
    digest = hashlib.sha256()
    for rel in paths:
        base = PACKAGE / rel
        files = sorted(base.rglob("*.py")) if base.is_dir() else [base]
        for path in files:
            digest.update(str(path.relative_to(PACKAGE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def inputs_digest(fingerprint: str, code: str) -> str:
    """The digest a result is stamped with: its inputs' fingerprint and the stage's code."""
    return hashlib.sha256(f"{fingerprint}:{code}".encode()).hexdigest()[:16]


def is_current(record: dict[str, Any] | None, digest: str) -> bool:
    """True when `record` (a result file's content, or None) was computed from these inputs."""
    return bool(record) and record.get(DIGEST_KEY) == digest


def current_record(path: Path, digest: str) -> dict[str, Any] | None:
    """The result file at `path` when it was computed from these inputs, else None (missing,
    unreadable or stale)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and is_current(record, digest) else None
