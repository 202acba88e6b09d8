"""Which files `ctsweep predict` reads and writes: checked before the model loads, so a refusal
leaves every file as it was.

Input: a file under the project's data/processed/ is a split standardised for training (x minus
the training mean, over the training standard deviation), not the original units a model takes;
it is refused, with how to convert it back. (Input elsewhere that looks standardised is refused
by pipeline/serving/screening.py from its values.)

`--out`: the predictions are CSV, so the path must end in .csv; it is never the input file, nor a
file of the project (PROJECT_FILES, anything under PROJECT_FOLDERS, the MLflow store), not even
with `--force`; an existing file is replaced only with `--force`, and never a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import DataError, OutputError
from pipeline.names import shown
from pipeline.stores import tracking

OUT_SUFFIX = ".csv"
# Top-level entries of a project that hold its inputs, code, results and records.
PROJECT_FOLDERS = ("data", "results", "reports", "mlruns", "mlartifacts", "search_spaces", "pipeline", "tests",
                   "benchmarks", "my_families", ".dvc", ".git")
PROJECT_FILES = ("params.yaml", "params.yaml.bak", "dvc.yaml", "dvc.lock", "pyproject.toml", "references.yaml",
                 "requirements.lock", "mlflow.db", "README.md", "Makefile", ".gitignore", ".dvcignore")


def check_input(path: Path, root: Path) -> None:
    """Refuse (DataError) a file under the project's data/processed/: a standardised split."""
    processed = (root / "data" / "processed").resolve()
    resolved = Path(path).resolve()
    if resolved.is_relative_to(processed):
        dataset = resolved.relative_to(processed).parts[0] if resolved != processed else "<dataset>"
        raise DataError(f"{path}: refused, nothing was predicted: a processed split of this project "
                        f"(data/processed/), standardised for training, while a model takes series in original "
                        f"units; convert x back with x * norm_std + norm_mean from "
                        f"data/processed/{dataset[:40]}/meta.json and save it elsewhere")


def check_out(out: Path, root: Path, source: Path, force: bool) -> Path:
    """`out` if predictions may be written there, else OutputError (one line, nothing written).

    Args:
        out: the `--out` path, relative to the working directory or absolute.
        root: the project root (params.yaml's folder).
        source: the input file, which is never replaced.
        force: replace an existing file (never a project or input file).
    """
    out = Path(out)
    resolved = out.resolve()  # symbolic links followed: a link to params.yaml is params.yaml
    if resolved == Path(source).resolve() or _same_file(out, source):
        raise OutputError(f"--out {out}: is the input file; predictions never replace their input, "
                          f"--force or not: give another path ending in {OUT_SUFFIX}")
    if _project_file(resolved, root):
        raise OutputError(f"--out {out}: is a file of the project ({_what(resolved, root)}); predictions are never "
                          f"written there, --force or not: give a path outside {', '.join(PROJECT_FOLDERS[:4])}, ... "
                          f"ending in {OUT_SUFFIX}")
    if out.suffix.lower() != OUT_SUFFIX:
        raise OutputError(f"--out {out}: predictions are written as CSV; give a path ending in {OUT_SUFFIX} "
                          f"(not {shown(out.suffix or '(no suffix)')})")
    if resolved.is_dir():
        raise OutputError(f"--out {out}: is a folder; give a file path ending in {OUT_SUFFIX}")
    if (out.exists() or out.is_symlink()) and not force:
        raise OutputError(f"--out {out}: exists; nothing was written: pass --force to replace it, or give "
                          f"another path")
    return out


def _same_file(a: Path, b: Path) -> bool:
    """Hard links (and anything else os.path.samefile sees) count as the same file."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _project_file(resolved: Path, root: Path) -> bool:
    base = root.resolve()
    store = tracking.sqlite_file(tracking.tracking_uri(root))
    if store is not None and resolved in (store, store.with_name(store.name + "-journal"),
                                          store.with_name(store.name + "-wal")):
        return True
    if not resolved.is_relative_to(base) or resolved == base:
        return False
    first = resolved.relative_to(base).parts[0]
    return first in PROJECT_FOLDERS or (first in PROJECT_FILES and len(resolved.relative_to(base).parts) == 1)


def _what(resolved: Path, root: Path) -> str:
    base = root.resolve()
    return str(resolved.relative_to(base)) if resolved.is_relative_to(base) else "the MLflow store"
