"""The `local` kind's files: where they are, which layout they form, and their copies in data/raw.

`fetch` copies the user's file (or the files of a folder's layout) into data/raw/<dataset>/ and
records each copy's sha256 in data/raw.lock under `local:<dataset>/<file name>`, so DVC sees a
changed file as a changed fetch output and prepares again; `prepare` reads only the copies.
Every file is checked before it is copied or read: its extension, that it is not empty, and that
it fits in memory; a changed CSV file is also read in full, so that one prepare would refuse is
refused before it replaces the copy of the last good one (`fetch`).

Layouts (a file, or a folder holding one of these; other files in the folder are not used):
    one file          <any>.csv, <any>.npz or <any>.ts; split by the CSV's split column or by rule
    CSV splits        train.csv and test.csv, optionally val.csv (else carved from train)
    contract splits   train.npz, val.npz and test.npz
    aeon splits       <Name>_TRAIN.ts and <Name>_TEST.ts
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.data.download import read_lock, record_copies, sha256_of
from pipeline.data.kinds.local.long_csv import forget_reads, keep_read, read_long_csv
from pipeline.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pipeline.config.datasets import LocalParams

SUFFIXES = (".csv", ".npz", ".ts")
LAYOUTS = "train.csv + test.csv (+ val.csv), train.npz + val.npz + test.npz, or <Name>_TRAIN.ts + <Name>_TEST.ts"
# Reading a file takes a multiple of its size (pandas holds the text and the parsed columns, then
# the padded arrays): a file above 1/MEMORY_FACTOR of the machine's memory would be killed by the
# kernel halfway through, so it is refused by size before anything is read.
MEMORY_FACTOR = 3
_CHUNK = 1 << 20


def resolve(path: str, root: Path) -> Path:
    """`prepare.<dataset>.path` as a path: absolute as given, else under the project root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else root / p


def memory_bytes() -> int:
    """This machine's physical memory. Total rather than currently free: a limit that moved with
    other processes' use would make the same prepare pass or fail from one run to the next."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def shown_name(copy: Path) -> str:
    """The user's file a copy in data/raw/<dataset>/ was made from (errors name the file the user
    edits), as recorded by fetch in data/raw.lock; the copy itself when there is no record."""
    raw_dir = copy.parent
    lock_path = raw_dir.parent.parent / "raw.lock"  # <root>/data/raw/<dataset>/<file> -> <root>/data/raw.lock
    entry = read_lock(lock_path).get(f"local:{raw_dir.name}/{copy.name}") if lock_path.is_file() else None
    if not entry or "source" not in entry:
        return str(copy)
    return str(resolve(entry["source"], lock_path.parent.parent))


def check_file(path: Path, where: str | None = None) -> None:
    """DataError unless `path` has a known extension, holds something and fits in memory;
    `where` (default: the path) names it."""
    where = where or str(path)
    if path.suffix.lower() not in SUFFIXES:
        raise DataError(f"{where}: unknown file type {path.suffix or '(no extension)'!r}; allowed: "
                        f"{', '.join(SUFFIXES)} (or a folder of {LAYOUTS})")
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{where}: empty file (0 bytes); expected a {path.suffix.lower()} file with at least one series")
    needed = size
    if path.suffix.lower() == ".npz":  # compressed: what counts is the arrays' own size
        try:
            with zipfile.ZipFile(path) as z:
                needed = sum(info.file_size for info in z.infolist())
        except (zipfile.BadZipFile, OSError):
            pass  # reported as unreadable when it is read
    memory = memory_bytes()
    if needed * MEMORY_FACTOR > memory:
        raise DataError(f"{where}: {_gib(needed)} of data is too large to read into this machine's {_gib(memory)} "
                        f"of memory (reading takes about {MEMORY_FACTOR}x the size); allowed: up to "
                        f"{_gib(memory / MEMORY_FACTOR)}; split it into smaller series or use a larger machine")


def layout(files: list[Path], where: Path) -> dict[str, Path]:
    """The split files of a folder's layout: {"train", "test"[, "val"]} -> path."""
    by_name = {f.name: f for f in files}
    if "train.csv" in by_name and "test.csv" in by_name:
        return {k: by_name[f"{k}.csv"] for k in ("train", "val", "test") if f"{k}.csv" in by_name}
    if all(f"{k}.npz" in by_name for k in ("train", "val", "test")):
        return {k: by_name[f"{k}.npz"] for k in ("train", "val", "test")}
    stems = {f.name[: -len("_TRAIN.ts")] for f in files if f.name.endswith("_TRAIN.ts")}
    stems &= {f.name[: -len("_TEST.ts")] for f in files if f.name.endswith("_TEST.ts")}
    if len(stems) == 1:
        stem = stems.pop()
        return {"train": by_name[f"{stem}_TRAIN.ts"], "test": by_name[f"{stem}_TEST.ts"]}
    what = f"{len(stems)} pairs of _TRAIN.ts/_TEST.ts files {sorted(stems)}" if stems else \
        f"{sorted(by_name)[:12] or 'no files'}"
    raise DataError(f"{where}: a folder of {what}; expected {LAYOUTS}")


def source_files(path: Path) -> dict[str, Path]:
    """The files to use: {"all": path} for one file, else the folder's layout."""
    if path.is_file():
        return {"all": path}
    files = sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith("."))
    return layout(files, path)


def raw_layout(raw_dir: Path) -> dict[str, Path]:
    """The layout of the copies fetch made: one file, or a folder layout."""
    files = sorted(f for f in raw_dir.iterdir() if f.is_file() and not f.name.startswith(".")) if raw_dir.is_dir() else []
    if not files:
        raise DataError(f"{raw_dir}: no copy of the local files; run `ctsweep fetch {raw_dir.name}` (or prepare)")
    return {"all": files[0]} if len(files) == 1 else layout(files, raw_dir)


def _copy(src: Path, dest: Path) -> str:
    """Copy `src` to `dest` atomically, hashing what was copied; return its sha256."""
    part = dest.with_name(f".{dest.name}.part")
    digest = hashlib.sha256()
    try:
        with open(src, "rb") as f, open(part, "wb") as out:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return digest.hexdigest()


def fetch(p: LocalParams, raw_dir: Path, lock_path: Path, source: str | None = None) -> list[Path]:
    """Copy the dataset's files into raw_dir (only those that changed) and record their sha256.

    A changed CSV file is read in full first (long_csv.read_long_csv, as prepare reads it), so a
    file prepare would refuse is refused here, before any copy or data/raw.lock changes: the copies
    of the last good file stay as they were. The parts read are kept for this process's `build`
    (prepare calls fetch, then build), which then does not parse the copies again; a file that did
    not change is neither read nor copied. The project root is lock_path's grandparent
    (<root>/data/raw.lock). `source` (a mirror of downloads) does not apply to local files.
    """
    dataset, root = raw_dir.name, lock_path.parent.parent
    path = resolve(p.path, root)
    if not path.exists():
        raise ConfigError(f"prepare.{dataset}.path: {path} does not exist (relative paths are under the project "
                          f"root {root}); expected a .csv, .npz or .ts file or a folder of {LAYOUTS}")
    files = source_files(path)
    for f in files.values():
        check_file(f)
    digests = {f: sha256_of(f) for f in files.values()}
    changed = [f for f, digest in digests.items()
               if not (raw_dir / f.name).is_file() or sha256_of(raw_dir / f.name) != digest]
    forget_reads()
    parts = {f: read_long_csv(f, p.label, p.split) for f in changed if f.suffix.lower() == ".csv"}
    raw_dir.mkdir(parents=True, exist_ok=True)
    entries, copies = {}, []
    for f, digest in digests.items():
        dest = raw_dir / f.name
        if f in changed:
            if _copy(f, dest) != digest:
                raise DataError(f"{f}: changed while it was copied to {dest}; run fetch again once it is written")
            if f in parts:
                keep_read(dest, p.label, p.split, parts[f])
        entries[f"local:{dataset}/{f.name}"] = {"filename": f.name, "sha256": digest, "size": dest.stat().st_size,
                                                "source": p.path if path.is_file() else str(Path(p.path) / f.name)}
        copies.append(dest)
    for stale in raw_dir.iterdir():  # copies of files no longer used: prepare must not see them
        if stale.is_file() and stale not in copies:
            stale.unlink()
    record_copies(lock_path, f"local:{dataset}/", entries)
    return copies
