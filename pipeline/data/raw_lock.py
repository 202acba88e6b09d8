"""data/raw.lock: the checksum of every raw file a dataset fetched, keyed by its canonical URL.

    {"<url>": {"filename", "sha256", "size", "first_from", "recorded",
               "unverified"?: why, "publisher_sha256"?: the publisher's checksum it differs from}}

The file is committed, so a checksum recorded once holds for every later fetch (trust on first
use, as `dvc import-url` records an md5). An entry with `unverified` is a user's own copy that the
publisher's checksums could not vouch for (download.py): accepted only when the user said so
(`--unverified-copy`), and carried from here into the processed dataset's provenance, the MLflow
runs, the report and the registered model. A later fetch that verifies a file for the same URL
replaces the entry, mark and all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

from pipeline.errors import CorruptInputError, DownloadError
from pipeline.stores.files import json_problem, read_json
from pipeline.stores.schema import MapOf, problem

UNVERIFIED = "unverified"  # the entry key holding why a copy is not verified
PUBLISHER_SHA256 = "publisher_sha256"  # the publisher's checksum an unverified copy differs from

_LOCK_SPEC = MapOf({"sha256": str, "filename?": str, "size?": int, "first_from?": str, "recorded?": str,
                    UNVERIFIED + "?": str, PUBLISHER_SHA256 + "?": str})


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[dict]:
    """The lock file's entries, under an exclusive lock; written back atomically on exit."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path.with_name(lock_path.name + ".flock"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        entries = read_lock(lock_path)
        before = json.dumps(entries, sort_keys=True)
        yield entries
        if json.dumps(entries, sort_keys=True) != before:
            tmp = lock_path.with_name(f".{lock_path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, lock_path)


def read_lock(lock_path: Path, dataset: str | None = None) -> dict:
    """The lock file's entries {url: {"sha256", ...}} ({} before the first download). A truncated or
    hand-edited file raises CorruptInputError: trusting a damaged checksum list would be worse.
    `dataset`: the one a stage reads the file for, named in the command that rebuilds it (`search`
    reads it too: which raw files a result was made from unverified is recorded there)."""
    if not lock_path.exists():
        return {}
    try:
        entries = read_json(lock_path)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt_lock(lock_path, json_problem(exc), dataset) from None
    why = problem(entries, _LOCK_SPEC) or _bad_digest(entries)
    if why is not None:
        raise _corrupt_lock(lock_path, why, dataset)
    return entries


def _corrupt_lock(lock_path: Path, why: str, dataset: str | None = None) -> CorruptInputError:
    """The lock file is committed, so git holds its last good copy; without it, `fetch` records
    the checksums again from the files it then downloads (trust on first use)."""
    return CorruptInputError(f"{lock_path} is corrupt ({why}); restore it with `git checkout -- {lock_path}`, "
                             f"or delete it and rerun `ctsweep fetch {dataset or '<dataset>'}` to record the checksums "
                             f"again")


def _bad_digest(entries: dict) -> str | None:
    for url, entry in entries.items():
        for key in ("sha256", PUBLISHER_SHA256):
            digest = entry.get(key)
            if digest is not None and (len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest)):
                return f"{url}.{key} is {digest!r}, expected 64 hexadecimal digits"
    return None


def entry_of(url: str, lock_path: Path) -> dict | None:
    """The entry recorded for `url`, or None."""
    with locked(lock_path) as entries:
        return entries.get(url)


def record(url: str, filename: str, digest: str, size: int, origin: str, lock_path: Path,
           unverified: str | None = None, publisher_sha256: str | None = None) -> None:
    """Record a fetched file. A verified file (`unverified` None) replaces an unverified entry of
    the same URL, whatever its checksum, and drops its mark; an unverified one replaces only an
    unverified entry (a newer copy the user accepted). A verified entry with another checksum is
    never overwritten: another process recorded a different file meanwhile, or the file changed."""
    with locked(lock_path) as entries:
        known = entries.get(url)
        if known is not None and known["sha256"] != digest and UNVERIFIED not in known:
            raise DownloadError(f"{filename}: sha256 {digest} differs from {known['sha256']} recorded in {lock_path}")
        if known is not None and known["sha256"] == digest and (UNVERIFIED not in known or unverified is not None):
            return  # the same file: verified stays verified, an accepted copy keeps the reason it was accepted for
        entry = {"filename": filename, "sha256": digest, "size": size, "first_from": origin,
                 "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d")}
        if unverified is not None:
            entry[UNVERIFIED] = unverified
            if publisher_sha256 is not None:
                entry[PUBLISHER_SHA256] = publisher_sha256
        entries[url] = entry


def unverified_files(urls: Sequence[tuple[str, str]], lock_path: Path) -> dict[str, str]:
    """{file name: why} of the files (url, file name) whose entry is marked unverified."""
    entries = read_lock(lock_path)
    return {name: entries[url][UNVERIFIED] for url, name in urls if UNVERIFIED in entries.get(url, {})}


def record_copies(lock_path: Path, prefix: str, entries: dict[str, dict]) -> None:
    """Make the lock file's entries under keys starting with `prefix` exactly `entries`.

    For copies of a user's own files (the `local` kind): unlike a download's, their checksum
    follows the file, so a changed file replaces its entry instead of failing the fetch, and the
    entry of a file no longer used goes. Unchanged entries leave the lock file untouched.
    """
    with locked(lock_path) as current:
        for key in [k for k in current if k.startswith(prefix) and k not in entries]:
            del current[key]
        for key, entry in entries.items():
            if current.get(key, {}).get("sha256") != entry["sha256"] or current[key].get("source") != entry.get("source"):
                current[key] = entry
