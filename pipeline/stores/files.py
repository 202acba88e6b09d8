"""Small file helpers: outputs are written whole or not at all, and a failed write says why."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from pipeline.errors import CorruptInputError, OutputError

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only filesystem",
}


def _output_error(path: Path, exc: OSError, action: str) -> OutputError:
    reason = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
    return OutputError(f"cannot {action} {path}: {reason}; nothing was written there")


def write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename, so readers never see half a
    file; on failure (disk full, no permission) the old file, if any, is left as it was.

    The file gets the mode a plain open() would give it: an existing file's own, else 0666 less
    the umask (mkstemp's 0600 would make results unreadable to everyone else on a shared machine).
    """
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = _mode_for(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # a full disk shows here, not after the rename
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise _output_error(path, exc, "write") from exc
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    """The permission bits `path` has, or a new file would get under the current umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return new_mode()


def new_mode(folder: bool = False) -> int:
    """The mode open() (0666) or mkdir() (0777) gives under the current umask: what a file or
    folder made through mkstemp / mkdtemp (0600 / 0700) is set to before it is moved into place."""
    umask = os.umask(0o022)  # the only way to read it; set straight back
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def corrupt(path: Path, why: str, producer: str) -> CorruptInputError:
    """The one-line error for an unusable intermediate file: what is wrong and which command
    rebuilds it (a hand-edit or a crash of another tool can leave any file half-written)."""
    return CorruptInputError(f"{path} is corrupt ({why}); rebuild it with `{producer}` (or `dvc repro`)")


def read_json(path: Path, producer: str | None = None) -> Any:
    """Parse a JSON file. With `producer` (the command that writes the file), a file that is not
    UTF-8 JSON raises CorruptInputError naming the file, where it breaks off and that command."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        if producer is None:
            raise
        raise corrupt(path, json_problem(exc), producer) from None


def json_problem(exc: UnicodeDecodeError | json.JSONDecodeError) -> str:
    """'empty file', 'truncated JSON at line 3' or 'invalid JSON at line 2, column 5: <why>'."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: byte {exc.start}"
    if not exc.doc.strip():
        return "empty file"
    if _cut_short(exc):
        return f"truncated JSON at line {exc.lineno}"
    return f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"


def _cut_short(exc: json.JSONDecodeError) -> bool:
    """Whether the parser ran out of text (a truncated file) rather than met a wrong character:
    nothing follows the failing point but, at most, the start of a literal or a string."""
    rest = exc.doc[exc.pos:].strip()
    if exc.msg.startswith("Unterminated string") or not rest:
        return True
    return exc.msg == "Expecting value" and any(word.startswith(rest) for word in ("true", "false", "null"))


def check_writable(folder: Path, need_bytes: int = 1 << 20) -> None:
    """Before a long stage starts: write (and remove) a probe file of `need_bytes` in `folder`, so a
    read-only path or a full disk fails now, not hours later. The folders it had to create for the
    probe are removed again (the stage's writers create them when they write): a command refused
    after this check leaves nothing behind."""
    folder = Path(folder)
    created = [f for f in (folder, *folder.parents) if not f.exists()]  # deepest first
    probe = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".ctsweep-probe-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0" * need_bytes)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise _output_error(folder, exc, "write to") from exc
    finally:
        if probe is not None:
            Path(probe).unlink(missing_ok=True)
        for made in created:
            with contextlib.suppress(OSError):  # something else wrote there meanwhile: it stays
                made.rmdir()
