"""Where each stage reads and writes, relative to the project root.

Ray trial processes change their working directory, so every path handed to them is absolute.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import MissingInputError


def project_root(root: str | Path | None = None) -> Path:
    """The directory holding params.yaml (default: the working directory), made absolute."""
    return Path(root if root is not None else os.getcwd()).resolve()


def raw_dir(root: Path, dataset: str) -> Path:
    """Downloaded files of one dataset, as fetched (a DVC output of the `fetch` stage)."""
    return root / "data" / "raw" / dataset


def raw_lock_path(root: Path) -> Path:
    """Checksums of raw downloads recorded on first use; committed to git."""
    return root / "data" / "raw.lock"


def processed_dir(root: Path, dataset: str) -> Path:
    return root / "data" / "processed" / dataset


def search_result_path(root: Path, dataset: str, family: str) -> Path:
    return root / "results" / dataset / "search" / f"{family}.json"


def final_result_path(root: Path, dataset: str, family: str) -> Path:
    return root / "results" / dataset / "final" / f"{family}.json"


def reports_dir(root: Path) -> Path:
    return root / "reports"


def require(path: Path, producer: str) -> Path:
    """Return `path` if it exists; otherwise say which stage produces it."""
    if not path.exists():
        raise MissingInputError(
            f"{path} does not exist; it is produced by `{producer}` "
            f"(or run `dvc repro` to run every stage in order)"
        )
    return path
