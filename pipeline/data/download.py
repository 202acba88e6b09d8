"""Raw downloads: streamed, resumable, verified, then moved into place atomically.

Every raw file of a dataset lands in data/raw/<dataset>/ (a DVC output, so `dvc push` shares it
and `dvc repro` never fetches what the cache holds). A file is trusted only once its SHA-256
matches what we know of it, in this order:
  1. a checksum the source publishes: pinned in the dataset module (`RawFile.sha256`), or read
     from the list the source serves beside the file (`RawFile.checksums_url`, a sha256sum-style
     SHA256SUMS.txt as PhysioNet publishes for every project);
  2. the checksum recorded in the committed lock file (data/raw.lock, raw_lock.py) by the first
     complete download (trust on first use, as `dvc import-url` records an md5).
A file with neither is checked for integrity (a zip's CRCs, a tar.gz read to its end), and its
checksum is then recorded. A mismatch is retried (the partial file is discarded), then reported;
a wrong file is never moved into place, so it is never preprocessed.

Mirrors, for clusters without internet: `source` (the `--source` option, or the environment
variable CTSWEEP_DATA_SOURCE) is a local directory or an http(s) URL prefix that holds the
files under their file names, and the publisher's checksum list under its own file name.

Unverified copies. A mirror's file that has a publisher checksum (pinned, or a list) but cannot be
checked against it (the mirror holds no list, or the file differs: a rebuilt archive, a subset) is
refused with one line naming `--unverified-copy`. With it (or CTSWEEP_UNVERIFIED_COPY=1, for
`dvc repro`) the copy is used and its lock entry is marked `unverified` with the reason; prepare
carries the mark into the dataset's provenance (meta.json) and from there into every run and
result made from it. The mark lives in the lock file, so later fetches need no option to use the
same copy again; a fetch that verifies a file for the same URL drops it, as does a download from
the publisher's own URL of a file it gives no checksum for (its bytes are the reference, and the
option that would otherwise be needed is refused without a mirror). Files fetched from the
publisher's own URL, and a mirror's files that have no publisher checksum, are trusted as described
above; a mirror's file without one that the user fetches with `--unverified-copy` (the mirror does
not hold the publisher's bytes: a rebuilt archive) is marked as well, with the reason that nothing
can check it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import requests
from tqdm import tqdm

from pipeline.data.raw_lock import PUBLISHER_SHA256, UNVERIFIED, entry_of, read_lock, record, record_copies
from pipeline.errors import ConfigError, DataError, DownloadError

SOURCE_ENV = "CTSWEEP_DATA_SOURCE"
UNVERIFIED_ENV = "CTSWEEP_UNVERIFIED_COPY"
UNVERIFIED_OPTION = "--unverified-copy"  # on `ctsweep fetch` and `ctsweep prepare` (pipeline/cli/app.py)
_CHUNK = 1 << 20
_NET_CHUNK = 1 << 14

__all__ = ["RawFile", "fetch", "read_lock", "record_copies", "sha256_of", "check_integrity", "publisher_sha256",
           "allowed_by_env", "SOURCE_ENV", "UNVERIFIED_ENV", "UNVERIFIED_OPTION"]


class _NotFound(DownloadError):
    """The source has no such file: retrying cannot help."""


class _Truncated(DownloadError):
    """The connection dropped: the partial file is kept and the next attempt resumes it."""


class _Unverifiable(DownloadError):
    """A mirror's copy the publisher's checksums cannot vouch for, not accepted: retrying cannot help."""


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


# ---------------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Published:
    """The publisher's checksum of a file: `sha256`, read at `where`; or None and why (`where`)."""

    sha256: str | None
    where: str
    error: str = ""  # why the list could not be read (for the warning of a publisher's own URL)


def publisher_sha256(file: RawFile, source: str | None) -> Published:
    """The pinned checksum, else this file's line in the publisher's checksum list (read from the
    mirror when one is given); the sha256 is None when there is none, with the reason."""
    if file.sha256:
        return Published(file.sha256, "pinned in the dataset module")
    if not file.checksums_url:
        return Published(None, f"the publisher lists no checksum for {file.filename}")
    listing = RawFile(file.checksums_url, file.checksums_url.rsplit("/", 1)[-1])
    origin = _origin(listing, source)
    try:
        if origin.startswith(("http://", "https://")):
            response = requests.get(origin, timeout=30)
            response.raise_for_status()
            text = response.text
        else:
            text = Path(origin).read_text()
    except (requests.RequestException, OSError, UnicodeDecodeError) as exc:
        return Published(None, f"no published checksum list at {origin}", str(exc))
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and (parts[1].lstrip("*") == file.filename or parts[1].endswith("/" + file.filename)):
            return Published(parts[0].lower(), origin)
    return Published(None, f"the published checksum list at {origin} does not name {file.filename}")


@dataclass(frozen=True)
class _Check:
    """What a fetched copy of a file is checked against, and what may be used unverified."""

    expected: str | None  # the checksum it must have; None: trusted on first use
    from_publisher: bool  # `expected` is the publisher's (pinned or listed), not the lock file's
    where: str  # where the publisher's checksum was read, or why there is none
    guarded: bool  # from a mirror and published with a checksum: unverifiable only with the user's word
    accepted: dict | None  # the lock entry of a copy the user accepted unverified earlier
    allow: bool  # the user accepts an unverifiable copy (--unverified-copy)
    unchecked: str | None = None  # why a mirror's copy the user accepts is marked though nothing refuses it


def _check_for(file: RawFile, entry: dict | None, published: Published, source: str | None, allow: bool) -> _Check:
    accepted = entry if entry is not None and UNVERIFIED in entry else None
    checksummed = bool(file.sha256 or file.checksums_url)
    if accepted is not None and not source and not checksummed:
        # The publisher's own URL of a file it gives no checksum for: its bytes are the reference
        # (trust on first use), so they replace a mirror's copy accepted unverified, and the mark
        # goes. Guarding it would leave no way back: the option is refused without a mirror.
        print(f"ctsweep: note: {file.filename}: the publisher's own file replaces the copy accepted as unverified "
              f"({accepted[UNVERIFIED]}); trusted on first use", file=sys.stderr)
        accepted = None
    # Only a mirror's copy needs the user's word: the publisher's own URL keeps trust on first use,
    # except where it would replace a copy accepted unverified (that mark is not dropped unchecked).
    guarded = bool(source) and checksummed or accepted is not None
    if published.sha256:
        return _Check(published.sha256, True, published.where, guarded, accepted, allow)
    # the lock file's checksum, unless it is an accepted copy's: that one vouches for nothing
    recorded = entry["sha256"] if entry is not None and UNVERIFIED not in entry else None
    if published.error and not guarded:
        print(f"ctsweep: warning: {published.where} ({published.error}); using {file.filename}'s recorded checksum"
              f"{'' if recorded else ' (none yet: trusted on first use)'}", file=sys.stderr)
    # A mirror's copy of a file the publisher gives no checksum for is trusted on first use, as the
    # mirror is taken to hold the publisher's bytes; with the user's word that it may not (a rebuilt
    # archive), it is marked as a guarded copy would be, so every result made from it says so.
    unchecked = f"{published.where}; a mirror's copy" if source and allow and not guarded else None
    return _Check(recorded, False, published.where, guarded, accepted, allow, unchecked)


def _verify(part: Path, file: RawFile, check: _Check, origin: str,
            lock_path: Path) -> tuple[str, str | None, str | None]:
    """Check `part`; return (its sha256, why it is unverified or None, the publisher's checksum it
    differs from). Raises DownloadError on a mismatch, _Unverifiable for a copy not accepted."""
    digest = sha256_of(part)
    if check.expected and digest == check.expected:
        check_integrity(part, file.filename)
        return digest, None if check.from_publisher else check.unchecked, None
    if check.accepted is not None and digest == check.accepted["sha256"]:
        check_integrity(part, file.filename)  # the very copy accepted before: it needs no option again
        return digest, check.accepted[UNVERIFIED], check.accepted.get(PUBLISHER_SHA256)
    if check.expected and not (check.guarded and check.from_publisher):
        raise DownloadError(f"{file.filename}: sha256 {digest} does not match the expected {check.expected}")
    if not check.guarded:  # nothing to check it against: trust on first use
        check_integrity(part, file.filename)
        return digest, check.unchecked, None
    why = (f"sha256 differs from the publisher's {check.expected} ({check.where})" if check.expected
           else check.where)
    check_integrity(part, file.filename)  # a copy that does not read to its end is corrupt, accepted or not
    if not check.allow:
        raise _Unverifiable(f"{file.filename} from {origin} (sha256 {digest}) cannot be verified against the "
                            f"publisher: {why}; to use this copy anyway, marked unverified in {lock_path} and in "
                            f"every result made from it, pass {UNVERIFIED_OPTION} (or set {UNVERIFIED_ENV}=1)")
    return digest, why, check.expected


def allowed_by_env() -> bool:
    """CTSWEEP_UNVERIFIED_COPY as a flag (for `dvc repro`, which runs the stages without options)."""
    value = os.environ.get(UNVERIFIED_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"environment variable {UNVERIFIED_ENV} is {value!r}; allowed: 1, true, yes, on "
                      f"(accept unverified copies) or 0, false, no, off, empty")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def accept_unverified(flag: bool, source: str | None) -> bool:
    """Whether a mirror's unverified copy is accepted: the command's --unverified-copy (`flag`) or
    CTSWEEP_UNVERIFIED_COPY (a bad value: one line). The option is refused without a mirror
    (`source`, else CTSWEEP_DATA_SOURCE) instead of being ignored; the variable, set once for a
    whole `dvc repro`, is not."""
    accept = allowed_by_env() or flag
    if flag and not (source or os.environ.get(SOURCE_ENV)):
        raise ConfigError(f"--unverified-copy accepts a mirror's copy, and no mirror is given: add --source "
                          f"DIR|FILE|URL (or set {SOURCE_ENV}), or leave the option out to download from the publisher")
    return accept


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


def _fetch_one(file: RawFile, raw_dir: Path, lock_path: Path, source: str | None, allow: bool,
               retries: int, timeout: float) -> Path:
    dest = raw_dir / file.filename
    digest = sha256_of(dest) if dest.exists() else None
    entry = entry_of(file.url, lock_path)
    if digest is not None and entry is not None and digest == entry["sha256"] and UNVERIFIED in entry:
        return _recheck(file, dest, digest, entry, lock_path, source, allow, retries, timeout)
    if digest is not None and digest == (file.sha256 or (entry or {}).get("sha256")):
        return dest  # verified when it was recorded: no network needed to use it again
    published = publisher_sha256(file, source)
    check = _check_for(file, entry, published, source, allow)
    if digest is not None:
        verified = check.expected is not None and digest == check.expected
        if verified or (check.expected is None and not check.guarded):
            if not verified:
                check_integrity(dest, file.filename)
            if entry is None or UNVERIFIED in entry:  # a verified entry of another file stays (as before)
                record(file.url, file.filename, digest, dest.stat().st_size, str(dest), lock_path,
                       None if verified and check.from_publisher else check.unchecked)
            return dest
        # A stale, corrupt or unverifiable copy: fetch again; it is replaced only by a file that passes.
    origin = _sibling_copy(file, raw_dir, check.expected) or _origin(file, source)
    return _transfer(file, raw_dir, lock_path, origin, check, retries, timeout)


def _transfer(file: RawFile, raw_dir: Path, lock_path: Path, origin: str, check: _Check, retries: int,
              timeout: float) -> Path:
    """Fetch `file` from `origin` into raw_dir, check it, record it and move it into place."""
    dest, part = raw_dir / file.filename, raw_dir / f".{file.filename}.part"
    error: Exception | None = None
    attempts = 0
    for attempt in range(retries):
        attempts = attempt + 1
        try:
            if origin.startswith(("http://", "https://")):
                _download(origin, part, timeout)
            else:
                _copy_local(Path(origin), part)
            digest, why, theirs = _verify(part, file, check, origin, lock_path)
            record(file.url, file.filename, digest, part.stat().st_size, origin, lock_path, why, theirs)
            os.replace(part, dest)  # atomic: dest is either absent, the old file or the checked one
            return dest
        except _Unverifiable:
            part.unlink(missing_ok=True)
            raise  # the copy is what it is: only the user's word changes the outcome
        except (DownloadError, DataError, requests.RequestException) as exc:
            error = exc
            if not isinstance(exc, (_Truncated, requests.RequestException)):
                part.unlink(missing_ok=True)  # resuming a wrong file cannot help
            if isinstance(exc, _NotFound):
                break
            time.sleep(min(2.0**attempt, 30.0) * 0.1)
    part.unlink(missing_ok=True)
    raise DownloadError(f"{file.filename} from {origin}: failed after {attempts} attempt(s): {error}") from error


def _recheck(file: RawFile, dest: Path, digest: str, entry: dict, lock_path: Path, source: str | None,
             allow: bool, retries: int, timeout: float) -> Path:
    """A copy accepted unverified, in place: verified now when the publisher's checksum can be read
    and matches; replaced when its origin offers another file that passes; else used as it is
    (the accepted mark needs no option again), with a note on stderr."""
    published = publisher_sha256(file, source)
    if published.sha256 == digest:  # the publisher vouches for it after all: the mark goes
        record(file.url, file.filename, digest, dest.stat().st_size, entry.get("first_from", str(dest)), lock_path)
        return dest
    origin = _origin(file, source)
    note = ""
    if _another_candidate(origin, digest, entry, published):
        try:
            return _transfer(file, dest.parent, lock_path, origin, _check_for(file, entry, published, source, allow),
                             retries, timeout)
        except DataError as exc:  # the accepted copy stays usable: a candidate that fails is only reported
            note = f"; {origin} was not used instead: {exc}"
    print(f"ctsweep: note: {file.filename}: using the copy accepted as unverified in {lock_path.name} "
          f"({entry[UNVERIFIED]}){note}", file=sys.stderr)
    return dest


def _another_candidate(origin: str, digest: str, entry: dict, published: Published) -> bool:
    """Whether `origin` may hold a different file than the accepted copy: a local file that differs
    from it, or a URL the copy did not come from, or one whose publisher checksum changed since."""
    if not origin.startswith(("http://", "https://")):
        path = Path(origin)
        return path.is_file() and sha256_of(path) != digest
    return published.sha256 is not None and (origin != entry.get("first_from")
                                              or published.sha256 != entry.get(PUBLISHER_SHA256))


def fetch(files: Sequence[RawFile], raw_dir: Path, lock_path: Path, source: str | None = None,
          retries: int = 4, timeout: float = 60.0, allow_unverified: bool = False) -> dict[str, Path]:
    """Make every file present and checked in raw_dir; return {filename: path}.

    Files already there and matching their checksum are not fetched again. `source` defaults to
    the environment variable CTSWEEP_DATA_SOURCE, `allow_unverified` (use a mirror's copy that the
    publisher's checksums cannot vouch for, marked so in the lock file) to CTSWEEP_UNVERIFIED_COPY.
    """
    source = source or os.environ.get(SOURCE_ENV) or None
    allow_unverified = allow_unverified or allowed_by_env()
    read_lock(lock_path)  # a damaged lock file is reported now, not after the downloads
    raw_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    absent: dict[str, str] = {}
    for f in files:
        try:
            paths[f.filename] = _fetch_one(f, raw_dir, lock_path, source, allow_unverified, retries, timeout)
        except DownloadError as exc:
            if not isinstance(exc.__cause__, _NotFound):
                raise
            absent[f.filename] = str(exc.__cause__)  # the others are still fetched: one line names them all
    if absent:  # e.g. a copy of PhysioNet 2012 with set-a only, for a profile listing sets a, b and c
        raise DownloadError(f"{len(absent)} of the {len(files)} files the dataset's params list are absent: "
                            f"{', '.join(absent)}; found: {', '.join(paths) or 'none'} "
                            f"({next(iter(absent.values()))})")
    return paths
