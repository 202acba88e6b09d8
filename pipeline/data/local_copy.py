"""A local copy that holds only some of a dataset's raw files, said before any stage runs.

A user with a partial copy (PhysioNet 2012's set-a without sets b and c, say) who writes a profile
listing all of them learns it from the fetch stage otherwise: after `dvc repro` has started, as
a refusal of the local source ("4 of the 6 files ... are absent; found: ...") or as a failed
download. `ctsweep profile` and `ctsweep check` say it first, in the same terms, one line per
dataset (`partial_copy`). Presence only: no file is read or checksummed here (the fetch stage
verifies what it uses).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.data.download import SOURCE_ENV
from pipeline.data.prepare import kind_module
from pipeline.stores.paths import raw_dir


def _local_source(source: str | None) -> Path | None:
    """The mirror directory `source` names (else CTSWEEP_DATA_SOURCE's); None for a URL, a single
    file or nothing set."""
    source = source or os.environ.get(SOURCE_ENV) or None
    if source is None or source.startswith(("http://", "https://")):
        return None
    path = Path(source)
    return path if path.is_dir() else None


def partial_copy(root: Path, dataset: str, p: Any, source: str | None = None) -> str | None:
    """One line naming the raw files of `dataset` (its prepare params `p`) that the local copies
    lack and those they hold, when they hold some but not all; None otherwise (all there, none
    there: a plain download, or a kind with no files to download).

    The local copies: data/raw/<dataset>/ under `root` and the mirror directory `source` (default
    CTSWEEP_DATA_SOURCE), where the fetch stage looks."""
    module = kind_module(p.kind)
    if hasattr(module, "fetch"):  # the user's own files (kind `local`): their own check says what is missing
        return None
    files = module.raw_files(p)
    mirror = _local_source(source)
    places = [raw_dir(root, dataset), *([mirror] if mirror else [])]
    found = [f.filename for f in files if any((place / f.filename).is_file() for place in places)]
    if not found or len(found) == len(files):
        return None
    absent = [f.filename for f in files if f.filename not in found]
    if mirror is not None:
        then = f"`ctsweep fetch {dataset}` will refuse, as the mirror {mirror} lacks them"
    else:
        hosts = sorted({urlsplit(f.url).netloc for f in files if f.filename in absent})
        then = f"`dvc repro` will download them from {', '.join(hosts)}"
    instead = (f"list under prepare.{dataset}.sets only the sets it holds" if hasattr(p, "sets")
               else f"leave {dataset} out of `datasets`")
    return (f"{dataset}: {len(absent)} of the {len(files)} files params.yaml lists are not in the local copy "
            f"({' or '.join(str(place) for place in places)}): {', '.join(absent)}; found: {', '.join(found)}; "
            f"{then}; or {instead}")


def partial_copies(root: Path, params: Any, source: str | None = None) -> list[str]:
    """`partial_copy` for every dataset that params.yaml lists (`params.datasets`), in order."""
    lines = (partial_copy(root, name, params.prepare[name], source) for name in params.datasets
             if name in params.prepare)
    return [line for line in lines if line is not None]
