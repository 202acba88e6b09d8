"""glibc malloc settings for the processes that train models.

PyTorch's CPU allocator asks malloc for every tensor and frees it when the last reference goes.
glibc serves a block of 128 KiB or more with its own mmap and unmaps it on free, and hands the
top of its heap back to the kernel past 128 KiB: an epoch that allocates and frees the same few
MiB-sized tensors thousands of times pays a page fault for every 4 KiB page of each of them
(kernel time, counted in the epoch). The temporal-weight families allocate (times x rows x
weights) tensors of several MiB per call of Eq. 2 (pipeline/models/temporal_weights/fused.py), and their epochs
lost up to 16 % to it (benchmarks/zoo/speedup.py measures with and without these settings in one run).

`keep_freed_memory` raises glibc's mmap threshold to its maximum (32 MiB on 64-bit) and stops
trimming, so freed blocks return to malloc's free lists and are reused without new faults. The
cost: a process keeps its peak heap until it exits (the training processes are short-lived trial
and seed processes; RSS is what the peak was anyway). This is glibc's documented mallopt
interface (mallopt(3)), applied once per process by the Trainer. `CTSWEEP_MALLOC=system` leaves
malloc as it is (`keep`, the default, applies them). Elsewhere than glibc nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from pipeline.errors import ConfigError

ENV = "CTSWEEP_MALLOC"
MODES = ("keep", "system")
# mallopt(3) parameters, from glibc's malloc.h
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
_TRIM_THRESHOLD = 1 << 30  # trim only when 1 GiB is free at the top of the heap
_TOP_PAD = 64 * 1024 * 1024  # grow the heap 64 MiB at a time

_applied: bool | None = None


def mode() -> str:
    """CTSWEEP_MALLOC's value ("keep" when unset). Raises ConfigError for a value not in MODES:
    the drivers ask before Ray starts (sweep.cluster.ray_session), so a typo fails at once
    instead of in every trial."""
    value = os.environ.get(ENV, "").strip().lower() or "keep"
    if value not in MODES:
        raise ConfigError(f"environment variable {ENV}={os.environ[ENV]!r}; allowed: {', '.join(MODES)}")
    return value


def keep_freed_memory() -> bool:
    """Apply the settings above once per process; True when they are in force.

    Returns False where `CTSWEEP_MALLOC=system` is set or the C library has no mallopt (not glibc).
    Raises ConfigError for another value of CTSWEEP_MALLOC.
    """
    global _applied
    if _applied is not None:
        return _applied
    chosen = mode()
    _applied = False
    if chosen == "system":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX), (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD), (_M_TOP_PAD, _TOP_PAD))
    _applied = all(mallopt(param, value) == 1 for param, value in settings)
    return _applied
