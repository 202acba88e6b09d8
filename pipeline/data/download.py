"""Raw downloads: streamed, resumable, verified, then moved into place atomically.

Every raw file of a dataset lands in data/raw/<dataset>/ (a DVC output, so `dvc push` shares it
and `dvc repro` never fetches what the cache holds). A file is trusted only once its SHA-256
matches what we know of it, in this order:
  1. a checksum the source publishes: pinned in the dataset module (`RawFile.sha256`), or read
     from the list the source serves beside the file (`RawFile.checksums_url`, a sha256sum-style
     SHA256SUMS.txt as PhysioNet publishes for every project);
  2. the checksum recorded in the committed lock file (data/raw.lock) by the first complete
     download (trust on first use, as `dvc import-url` records an md5).
A file with neither is checked for integrity (a zip's CRCs, a tar.gz read to its end), and its
checksum is then recorded. A mismatch is retried (the partial file is discarded), then reported;
a wrong file is never moved into place, so it is never preprocessed.

Mirrors, for clusters without internet: `source` (the `--source` option, or the environment
variable CTSWEEP_DATA_SOURCE) is a local directory or an http(s) URL prefix that holds the
files under their file names. Files are verified the same way wherever they come from.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

import requests
from tqdm import tqdm

from pipeline.errors import CorruptInputError, DataError, DownloadError
from pipeline.stores.files import json_problem, read_json
from pipeline.stores.schema import MapOf, problem

SOURCE_ENV = "CTSWEEP_DATA_SOURCE"
_CHUNK = 1 << 20
_NET_CHUNK = 1 << 14


class _NotFound(DownloadError):
    """The source has no such file: retrying cannot help."""


class _Truncated(DownloadError):
    """The connection dropped: the partial file is kept and the next attempt resumes it."""


@dataclass(frozen=True)
class RawFile:
    """One file a dataset downloads.

    url: the canonical address, also the key of the lock file.
    filename: its name inside data/raw/<dataset>/ (and inside a mirror).
    sha256: pinned only where the source itself publishes a checksum.
    checksums_url: a published list of "<sha256>  <path>" lines that names this file.
    """

    url: str
    filename: str
    sha256: str | None = None
    checksums_url: str | None = None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_integrity(path: Path, name: str) -> None:
    """Raise DataError unless an archive reads to its end: zip CRCs, gzip CRC and tar headers."""
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is not None:
                raise DataError(f"{name}: member {bad!r} fails its CRC check (corrupt download)")
        elif name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(path, "r:*") as t:
                for member in t:
                    if member.isfile():
                        reader = t.extractfile(member)
                        while reader is not None and reader.read(_CHUNK):
                            pass
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{name}: not a readable archive ({exc}); the download is corrupt or truncated") from exc


# ---------------------------------------------------------------------------------- lock file


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[dict]:
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


_LOCK_SPEC = MapOf({"sha256": str, "filename?": str, "size?": int})


def read_lock(lock_path: Path) -> dict:
    """The lock file's entries {url: {"sha256", ...}} ({} before the first download). A truncated or
    hand-edited file raises CorruptInputError: trusting a damaged checksum list would be worse."""
    if not lock_path.exists():
        return {}
    try:
        entries = read_json(lock_path)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt_lock(lock_path, json_problem(exc)) from None
    why = problem(entries, _LOCK_SPEC) or _bad_digest(entries)
    if why is not None:
        raise _corrupt_lock(lock_path, why)
    return entries


def _corrupt_lock(lock_path: Path, why: str) -> CorruptInputError:
    """The lock file is committed, so git holds its last good copy; without it, `fetch` records
    the checksums again from the files it then downloads (trust on first use)."""
    return CorruptInputError(f"{lock_path} is corrupt ({why}); restore it with `git checkout -- {lock_path}`, "
                             f"or delete it and rerun `ctsweep fetch <dataset>` to record the checksums again")


def _bad_digest(entries: dict) -> str | None:
    for url, entry in entries.items():
        digest = entry["sha256"]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            return f"{url}.sha256 is {digest!r}, expected 64 hexadecimal digits"
    return None


def published_sha256(file: RawFile, source: str | None) -> str | None:
    """This file's line in the source's published checksum list (fetched from the mirror when
    one is given); None when there is no list, it cannot be read, or it does not name the file."""
    if not file.checksums_url:
        return None
    listing = RawFile(file.checksums_url, file.checksums_url.rsplit("/", 1)[-1])
    origin = _origin(listing, source)
    try:
        if origin.startswith(("http://", "https://")):
            response = requests.get(origin, timeout=30)
            response.raise_for_status()
            text = response.text
        else:
            text = Path(origin).read_text()
    except (requests.RequestException, OSError) as exc:
        print(f"ctsweep: warning: no published checksums from {origin} ({exc}); using {file.filename}'s "
              f"recorded checksum", file=sys.stderr)
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and (parts[1].lstrip("*") == file.filename or parts[1].endswith("/" + file.filename)):
            return parts[0].lower()
    return None


def expected_sha256(file: RawFile, lock_path: Path, source: str | None = None) -> str | None:
    """The pinned or published checksum, else the recorded one, else None (first use)."""
    if file.sha256:
        return file.sha256
    return published_sha256(file, source) or _recorded_sha256(file, lock_path)


def _recorded_sha256(file: RawFile, lock_path: Path) -> str | None:
    with _locked(lock_path) as entries:
        return entries.get(file.url, {}).get("sha256")


def _record(file: RawFile, digest: str, size: int, origin: str, lock_path: Path) -> None:
    with _locked(lock_path) as entries:
        known = entries.get(file.url, {}).get("sha256")
        if known and known != digest:  # another process recorded a different file meanwhile
            raise DownloadError(f"{file.filename}: sha256 {digest} differs from {known} recorded in {lock_path}")
        if not known:
            entries[file.url] = {
                "filename": file.filename, "sha256": digest, "size": size, "first_from": origin,
                "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            }


# ---------------------------------------------------------------------------------- transfer


def _origin(file: RawFile, source: str | None) -> str:
    """Where to read `file` from: the mirror (directory, file or URL prefix) or its own URL."""
    if not source:
        return file.url
    if source.startswith(("http://", "https://")):
        return source.rstrip("/") + "/" + file.filename
    path = Path(source)
    return str(path if path.is_file() else path / file.filename)


def _download(url: str, part: Path, timeout: float) -> None:
    """Stream `url` into `part`, resuming from its current size when the server allows it."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with requests.get(url, stream=True, timeout=timeout, headers=headers) as r:
        if r.status_code == 416:  # the range starts at the end: nothing more to read
            return
        if r.status_code == 404:
            raise _NotFound(f"{url}: not found (HTTP 404)")
        r.raise_for_status()
        resumed = r.status_code == 206
        total = int(r.headers.get("Content-Length", 0)) + (have if resumed else 0)
        with open(part, "ab" if resumed else "wb") as f, tqdm(
            total=total or None, initial=have if resumed else 0, unit="B", unit_scale=True,
            desc=part.name.removesuffix(".part").lstrip("."), disable=None,
        ) as bar:
            # Small network reads: when a connection drops, urllib3 discards the chunk in flight,
            # so what was written so far is what the next attempt resumes from.
            for chunk in r.iter_content(_NET_CHUNK):
                f.write(chunk)
                bar.update(len(chunk))
        if total and part.stat().st_size != total:
            raise _Truncated(f"{url}: got {part.stat().st_size} of {total} bytes (connection dropped)")


def _sibling_copy(file: RawFile, raw_dir: Path, expected: str | None) -> str | None:
    """A verified copy another dataset already fetched (sepsis and sepsis_intensity share their
    zips), as a local path; None when there is none or nothing to verify it against."""
    if expected is None:
        return None
    for candidate in sorted(raw_dir.parent.glob(f"*/{file.filename}")):
        if candidate.parent != raw_dir and candidate.stat().st_size and sha256_of(candidate) == expected:
            return str(candidate)
    return None


def _copy_local(path: Path, part: Path) -> None:
    if not path.exists():
        raise _NotFound(f"{path}: not found in the local source")
    shutil.copyfile(path, part)


def _verify(part: Path, file: RawFile, expected: str | None) -> str:
    """Check `part` against the expected checksum (or, on first use, its integrity); return its sha256."""
    digest = sha256_of(part)
    if expected and digest != expected:
        raise DownloadError(f"{file.filename}: sha256 {digest} does not match the expected {expected}")
    check_integrity(part, file.filename)
    return digest


def _fetch_one(file: RawFile, raw_dir: Path, lock_path: Path, source: str | None,
               retries: int, timeout: float) -> Path:
    dest = raw_dir / file.filename
    digest = sha256_of(dest) if dest.exists() else None
    if digest is not None and digest == (file.sha256 or _recorded_sha256(file, lock_path)):
        return dest  # verified when it was recorded: no network needed to use it again
    expected = expected_sha256(file, lock_path, source)
    if digest is not None:
        if expected is None or digest == expected:
            if expected is None:
                check_integrity(dest, file.filename)
                _record(file, digest, dest.stat().st_size, str(dest), lock_path)
            return dest
        # A stale or corrupt copy: fetch again; it is replaced only by a verified file.
    origin = _sibling_copy(file, raw_dir, expected) or _origin(file, source)
    part = raw_dir / f".{file.filename}.part"
    error: Exception | None = None
    for attempt in range(retries):
        try:
            if origin.startswith(("http://", "https://")):
                _download(origin, part, timeout)
            else:
                _copy_local(Path(origin), part)
            digest = _verify(part, file, expected)
            _record(file, digest, part.stat().st_size, origin, lock_path)
            os.replace(part, dest)  # atomic: dest is either absent, the old file or the verified one
            return dest
        except (DownloadError, DataError, requests.RequestException) as exc:
            error = exc
            if not isinstance(exc, (_Truncated, requests.RequestException)):
                part.unlink(missing_ok=True)  # resuming a wrong file cannot help
            if isinstance(exc, _NotFound):
                break
            time.sleep(min(2.0**attempt, 30.0) * 0.1)
    part.unlink(missing_ok=True)
    raise DownloadError(f"{file.filename} from {origin}: failed after {retries} attempt(s): {error}") from error


def fetch(files: Sequence[RawFile], raw_dir: Path, lock_path: Path, source: str | None = None,
          retries: int = 4, timeout: float = 60.0) -> dict[str, Path]:
    """Make every file present and verified in raw_dir; return {filename: path}.

    Files already there and matching their checksum are not fetched again. `source` defaults to
    the environment variable CTSWEEP_DATA_SOURCE.
    """
    source = source or os.environ.get(SOURCE_ENV) or None
    read_lock(lock_path)  # a damaged lock file is reported now, not after the downloads
    raw_dir.mkdir(parents=True, exist_ok=True)
    return {f.filename: _fetch_one(f, raw_dir, lock_path, source, retries, timeout) for f in files}


def record_copies(lock_path: Path, prefix: str, entries: dict[str, dict]) -> None:
    """Make the lock file's entries under keys starting with `prefix` exactly `entries`.

    For copies of a user's own files (the `local` kind): unlike a download's, their checksum
    follows the file, so a changed file replaces its entry instead of failing the fetch, and the
    entry of a file no longer used goes. Unchanged entries leave the lock file untouched.
    """
    with _locked(lock_path) as current:
        for key in [k for k in current if k.startswith(prefix) and k not in entries]:
            del current[key]
        for key, entry in entries.items():
            if current.get(key, {}).get("sha256") != entry["sha256"] or current[key].get("source") != entry.get("source"):
                current[key] = entry
