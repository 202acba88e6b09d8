"""Errors a user can act on. Each names the file, key or value at fault and what is allowed."""

from __future__ import annotations

from itertools import islice


class CtsweepError(Exception):
    """Base class: the CLI prints these as one line and exits with status 2, no traceback."""


class ConfigError(CtsweepError):
    """A wrong key, type or value in params.yaml or a search-space file."""


class MissingInputError(CtsweepError):
    """A stage's input does not exist yet; the message names the stage that produces it."""


class TrialFailedError(CtsweepError):
    """A trial could not go on: non-finite loss or a solver failure. Ray marks the trial ERROR."""


class DataError(CtsweepError):
    """Raw data missing, corrupt or not in the expected format; names the file and the value."""


class DownloadError(DataError):
    """A download failed after its retries, or its checksum does not match the recorded one."""


class ResourceError(CtsweepError):
    """A resource request (CPUs, GPUs, workers) that no node of the Ray cluster can satisfy."""


class OutputError(CtsweepError):
    """An output cannot be written (disk full, read-only or missing permissions); names the path."""


class CorruptInputError(CtsweepError):
    """An earlier stage's output exists but cannot be used (truncated, hand-edited, missing or
    mistyped fields); the message names the file and the command that rebuilds it."""


def excerpt(value: object, limit: int = 40) -> str:
    """A value as an error message echoes it: its repr when it has at most `limit` characters,
    else the repr of its first `limit` characters, `...`, and its full length, e.g.
    `'77777...' (30000000 characters)`. A cell, label or name may be megabytes: a message shows a
    prefix of it, never all of it, and stays one line (repr escapes newlines and NUL bytes).

    Lists, tuples and sets show at most 10 items, each shortened the same way; other containers
    (a dict, a deeply aliased YAML structure) only their type and size, as repr() could take minutes.
    """
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        head = repr(value[:limit])
        return f"{head[:-1]}...{head[-1]} ({len(value)} {unit})"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str)[:10] if isinstance(value, (set, frozenset)) else list(islice(value, 10))
        inner = ", ".join(f"<{type(v).__name__} of {len(v)}>" if isinstance(v, (list, tuple, set, frozenset, dict))
                          else excerpt(v, limit) for v in items)
        more = f", ... ({len(value)} items)" if len(value) > len(items) else ""
        return f"[{inner}{more}]"
    if isinstance(value, dict):
        return f"<dict of {len(value)}>"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
