"""pipeline.runtime.allocator: glibc malloc keeps freed tensor memory for reuse in training processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# One 8 MiB tensor, the size of a chunk of Eq. 2's intermediates, allocated and freed: where
# glibc served it (mmap or its heap) and whether the freed memory stayed with the process, from
# glibc's own accounting (mallinfo2, glibc >= 2.33). Page-fault counts would say the same less
# reliably: the kernel's reclaim and huge pages make them vary from run to run.
_PROBE = """
import ctypes, json, torch
from pipeline.runtime.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = keep_freed_memory()
before = libc.mallinfo2()
tensor = torch.empty(2 * 1024 * 1024)
tensor.fill_(1.0)
during = libc.mallinfo2()
del tensor
after = libc.mallinfo2()
print(json.dumps({"applied": applied, "mmapped": during.hblkhd - before.hblkhd,
                  "kept_free": after.fordblks - before.fordblks}))
"""
MIB = 1024 * 1024


def _probe(mode: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CTSWEEP_MALLOC"}
    if mode is not None:
        env["CTSWEEP_MALLOC"] = mode
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_tensors_stay_with_the_process() -> None:
    # glibc's own settings map an 8 MiB block on its own and unmap it on free, so the next one
    # faults every page in again; with the allocator's, it comes from the heap and stays there.
    system, kept = _probe("system"), _probe(None)
    assert system["applied"] is False and kept["applied"] is True
    assert system["mmapped"] >= 8 * MIB and system["kept_free"] < 8 * MIB, system
    assert kept["mmapped"] == 0 and kept["kept_free"] >= 8 * MIB, kept


def test_keep_is_the_default_and_applies_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.runtime import allocator

    monkeypatch.delenv(allocator.ENV, raising=False)
    assert allocator.mode() == "keep"
    monkeypatch.setenv(allocator.ENV, " System ")
    assert allocator.mode() == "system"


def test_a_bad_mode_is_refused_before_ray_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from pipeline.errors import ConfigError
    from pipeline.sweep.cluster import ray_session

    monkeypatch.setenv("CTSWEEP_MALLOC", "jemalloc")
    started = ray.is_initialized()
    with pytest.raises(ConfigError, match=r"CTSWEEP_MALLOC='jemalloc'; allowed: keep, system"):
        with ray_session():
            pass
    assert ray.is_initialized() == started
