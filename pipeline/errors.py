"""Errors a user can act on. Each names the file, key or value at fault and what is allowed."""

from __future__ import annotations


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
