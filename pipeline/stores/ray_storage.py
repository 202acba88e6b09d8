"""`search.storage_path`, where Ray Tune keeps experiment checkpoints, checked before Ray starts.

Ray resolves it with pyarrow.fs.FileSystem.from_uri (ray/train/_internal/storage.py); a bad value
would otherwise fail inside Tune, after Ray started, with a traceback. A path must be a folder
that exists and is writable, or could be created (its nearest existing parent is a writable
folder); nothing is created here. A URI must have a scheme pyarrow opens and must parse as one:
checked by building its filesystem as Ray does, without network access (S3 is given a region
so pyarrow does not ask AWS for the bucket's), so whether a bucket exists is learnt only when
Ray first writes to it.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.errors import ConfigError
from pipeline.names import shown

_KEY = "params.yaml: key `search.storage_path`"
REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
_ALLOWED = ("allowed: a folder (relative to the root, or absolute), file:///absolute/folder, or a URI with "
            f"scheme {', '.join(REMOTE_SCHEMES)} (e.g. s3://bucket/ctsweep)")


def check_storage_path(root: Path, value: str) -> str:
    """The location Ray Tune is given (a URI as written, a path made absolute from `root`), once
    checked (module docstring); else a one-line ConfigError naming the key and what is allowed."""
    if any(ord(c) < 32 for c in value):
        raise ConfigError(f"{_KEY}: {shown(value)} contains control characters; {_ALLOWED}")
    if "://" not in value and value.split(":", 1)[0].lower() in ("file", *REMOTE_SCHEMES) and ":" in value:
        # s3:/bucket or file:x: a URI missing its //, which Ray would take for a local folder
        raise ConfigError(f"{_KEY}: {shown(value)} is not a valid URI (expected scheme://...); {_ALLOWED}")
    if "://" not in value:
        path = (root / value).resolve()
        _check_folder(path)
        return str(path)
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ConfigError(f"{_KEY}: {shown(value)} is not a valid URI ({_cut(str(exc))}); {_ALLOWED}") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise ConfigError(f"{_KEY}: {shown(value)} is not a valid URI (no scheme before ://); {_ALLOWED}")
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ConfigError(f"{_KEY}: {shown(value)} is not a file URI of an absolute folder; {_ALLOWED}")
        _check_folder(Path(parts.path).resolve())
        return value
    if scheme not in REMOTE_SCHEMES:
        raise ConfigError(f"{_KEY}: {shown(value)} has scheme {shown(scheme)}, which Ray cannot store to; {_ALLOWED}")
    _check_uri(value, scheme)
    return value


def _check_folder(path: Path) -> None:
    existing = path
    while not existing.exists():
        if existing.is_symlink():  # a dangling link: the folder could never be created there
            raise ConfigError(f"{_KEY}: {shown(str(existing), 80)} is a broken symbolic link; {_ALLOWED}")
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{_KEY}: {shown(str(existing), 80)} is a file, not a folder; {_ALLOWED}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{_KEY}: folder {shown(str(existing), 80)} is not writable; {_ALLOWED}")


def _check_uri(value: str, scheme: str) -> None:
    import pyarrow.fs  # late: only for a URI

    probe = value
    if scheme == "s3" and "region=" not in value:  # else pyarrow asks AWS where the bucket lives
        probe += ("&" if "?" in value else "?") + "region=us-east-1"
    try:
        pyarrow.fs.FileSystem.from_uri(probe)
    except Exception as exc:  # noqa: BLE001 - ArrowInvalid, OSError (no JVM for hdfs): the value's fault
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{_KEY}: {shown(value)} cannot be opened ({_cut(reason)}); {_ALLOWED}") from None


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
