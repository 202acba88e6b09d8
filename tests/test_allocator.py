"""pipeline.allocator: glibc malloc keeps freed tensor memory for reuse in training processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Ten rounds of Eq. 2 forward and backward over a chunk of stage weights (the reference
# ODE-RNN-TW's: 28 intervals x 7 solver times x batch 32 for a 10 x 32 layer, 8 MiB per full
# tensor), after three untimed rounds, and the minor page faults the ten cost, after the
# Trainer's allocator call.
_FAULTS = """
import json, resource, torch
from pipeline.allocator import keep_freed_memory
from pipeline.models.temporal_weights import TemporalWeights
applied = keep_freed_memory()
torch.manual_seed(0)
layer, times = TemporalWeights(10, 32), torch.rand(28, 7, 32)
for _ in range(3):
    layer(times).square().sum().backward()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    layer(times).square().sum().backward()
print(json.dumps({"applied": applied, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CTSWEEP_MALLOC"}
    if mode is not None:
        env["CTSWEEP_MALLOC"] = mode
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_tensors_are_reused_without_page_faults() -> None:
    # glibc unmaps freed blocks above its mmap threshold and trims its heap: new 8 MiB tensors
    # fault their 2,048 pages again (measured: 39,000-59,000 faults in ten rounds). With the
    # settings freed memory is reused (200-7,800).
    system, kept = _faults("system"), _faults(None)
    assert system["applied"] is False and kept["applied"] is True
    assert system["faults"] >= 10 * 2048, system  # at least one full tensor's pages per round
    assert kept["faults"] < system["faults"] / 3, (kept, system)


def test_keep_is_the_default_and_applies_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline import allocator

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
