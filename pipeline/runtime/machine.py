"""The machine a trial or a final seed ran on, as its results record it.

Two runs of the same code, params and data give the same numbers on the same machine; on another
they may not: torch picks its CPU kernels by instruction set (AVX2, AVX-512), BLAS libraries
differ in how they sum, and a GPU is another machine again. So every trial and seed tags its
MLflow run with what decides that, the search and final records carry it, the report prints it and
`ctsweep compare` names a difference of machine before the first differing number.

    cpu          the CPU model (/proc/cpuinfo's "model name"; the platform's processor elsewhere)
    cpu_flags    sha256 of the sorted CPU flags, first 12 hex digits (the full list is long)
    isa          the instruction set torch's CPU kernels use (torch.backends.cpu.get_cpu_capability)
    cores        logical CPUs of the machine
    torch, numpy  versions; blas: the BLAS each was built with (torch's build configuration;
                 numpy's build dependencies)
    python       the interpreter's version
    device       "cpu", or the CUDA device's name

The threads a trial or seed trains with are recorded beside it (`threads`), not in it: they are
the run's setting, and the machine is the same whatever they are.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

MACHINE_TAG, THREADS_TAG = "machine", "threads"


def _cpuinfo() -> tuple[str, list[str]]:
    """(model name, flags) from /proc/cpuinfo; the platform's processor and no flags elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine(), []
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
    return (model.group(1).strip() if model else platform.processor() or platform.machine(),
            sorted(flags.group(1).split()) if flags else [])


def _blas() -> str:
    import numpy as np
    import torch

    torch_blas = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    try:
        numpy_blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        numpy_shown = f"{numpy_blas.get('name', '?')} {numpy_blas.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 -- an older numpy without mode="dicts": say so, never fail a trial
        numpy_shown = "unknown"
    return f"torch: {torch_blas.group(1) if torch_blas else 'unknown'}; numpy: {numpy_shown}"


@functools.lru_cache(maxsize=1)
def _static() -> dict[str, Any]:
    import numpy as np
    import torch

    model, flags = _cpuinfo()
    return {"cpu": model, "cpu_flags": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12],
            "isa": torch.backends.cpu.get_cpu_capability(), "cores": os.cpu_count() or 1,
            "torch": torch.__version__, "numpy": np.__version__, "blas": _blas(),
            "python": platform.python_version()}


def describe(device: Any = "cpu") -> dict[str, Any]:
    """This process's machine (module docstring), with `device` (a torch.device or its name)."""
    import torch

    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {**_static(), "device": name}


def fingerprint(description: dict[str, Any]) -> str:
    """A short name for a machine description: the first 12 hex digits of its JSON's sha256."""
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:12]


def run_tags(device: Any, threads: int) -> dict[str, str]:
    """The MLflow tags a trial or seed run gets: its machine (JSON) and its threads."""
    return {MACHINE_TAG: json.dumps(describe(device), sort_keys=True), THREADS_TAG: str(threads)}


def from_tags(tags: dict[str, str]) -> tuple[dict[str, Any] | None, int | None]:
    """(machine description, threads) of a run from its tags; None for either one it lacks (a run
    logged before runs recorded them, or a tag that is not what run_tags writes)."""
    try:
        description = json.loads(tags[MACHINE_TAG]) if MACHINE_TAG in tags else None
    except json.JSONDecodeError:
        description = None
    threads = tags.get(THREADS_TAG, "")
    return (description if isinstance(description, dict) else None,
            int(threads) if threads.isdigit() else None)


class Machines:
    """The distinct machines of a record's trials or seeds: `described` maps each fingerprint to its
    description (sorted, so that the same machines give the same record); `name(description)` is
    the fingerprint a trial or seed refers to (None for a run that recorded none)."""

    def __init__(self, descriptions: list[dict[str, Any] | None]) -> None:
        found = {fingerprint(d): d for d in descriptions if d is not None}
        self.described: dict[str, dict[str, Any]] = {k: found[k] for k in sorted(found)}

    def name(self, description: dict[str, Any] | None) -> str | None:
        return None if description is None else fingerprint(description)
