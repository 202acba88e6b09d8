"""Where each stage reads and writes, relative to the project root.

Ray trial processes change their working directory, so every path handed to them is absolute.
Every path built from a dataset or family name checks the name first (pipeline.names) and that
the result lies inside its folder of the project, so no name can point a stage elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import MissingInputError
from pipeline.names import check_name, inside


def tracking_uri(root: Path) -> str:
    """MLFLOW_TRACKING_URI if set, else an SQLite file at the project root (absolute path).

    Here, not in pipeline.stores.tracking, so that a command can name the store without importing MLflow."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def project_root(root: str | Path | None = None) -> Path:
    """The directory holding params.yaml (default: the working directory), made absolute."""
    return Path(root if root is not None else os.getcwd()).resolve()


def _under(folder: Path, *names: str, suffix: str = "") -> Path:
    """folder/<name>/.../<last name><suffix>, each name checked, the result inside `folder`."""
    for name in names:
        check_name(name, "dataset or family name")
    path = folder.joinpath(*names[:-1], names[-1] + suffix)
    inside(path, folder, "dataset or family name")  # a symbolic link pointing out of the project is refused too
    return path


def raw_dir(root: Path, dataset: str) -> Path:
    """Downloaded files of one dataset, as fetched (a DVC output of the `fetch` stage)."""
    return _under(root / "data" / "raw", dataset)


def raw_lock_path(root: Path) -> Path:
    """Checksums of raw downloads recorded on first use; committed to git."""
    return root / "data" / "raw.lock"


def processed_dir(root: Path, dataset: str) -> Path:
    return _under(root / "data" / "processed", dataset)


def search_result_path(root: Path, dataset: str, family: str) -> Path:
    check_name(dataset, "dataset name")
    return _under(root / "results" / dataset / "search", family, suffix=".json")


def final_result_path(root: Path, dataset: str, family: str) -> Path:
    check_name(dataset, "dataset name")
    return _under(root / "results" / dataset / "final", family, suffix=".json")


def classical_result_path(root: Path, dataset: str) -> Path:
    """The classical reference of a dataset (pipeline.classical.stage)."""
    check_name(dataset, "dataset name")
    return _under(root / "results" / dataset, "classical", suffix=".json")


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
