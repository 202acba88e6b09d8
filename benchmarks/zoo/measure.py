"""One benchmark measurement, run in a process of its own: `python -m benchmarks.zoo.measure JOB`.

JOB is a JSON object (see `Job`); the last line printed is the JSON result. A fresh process per
measurement keeps the memory figures of one family out of the next one's, and lets the parent
kill a family that runs past its time limit.

Memory. CUDA: torch.cuda.max_memory_allocated() after reset_peak_memory_stats(), both the peak
and the peak above what was allocated when training started (data, model). CPU: the kernel's
resident-set high-water mark (VmHWM). After set-up (imports, data, prepare_inputs, model,
optimiser) the mark is reset to the current RSS by writing 5 to /proc/self/clear_refs, so the
training figure is the peak RSS during the epochs minus the RSS they started from. Where that
file cannot be written, the figure is ru_maxrss minus the RSS after set-up, which undercounts
when set-up itself peaked higher.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import re
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.zoo.data import DataSpec, synthetic_dataset
from pipeline.runtime.allocator import keep_freed_memory
from pipeline.errors import TrialFailedError
from pipeline.training.loop import TimeLimitReached, Trainer, TrainSettings

MB = 1024 * 1024


@dataclass(frozen=True)
class Job:
    family: str
    model_kwargs: dict[str, Any]
    settings: dict[str, Any]  # TrainSettings fields
    data: dict[str, Any]  # DataSpec fields
    epochs: int = 3
    warmup: int = 1
    device: str = "cpu"
    time_limit: float = 300.0  # seconds for the whole job, set-up included
    seed: int = 0
    threads: int = 0  # torch intra-op threads; 0 keeps torch's default


@dataclass
class Result:
    status: str = "ok"  # ok | timeout | error
    params: int | None = None
    setup_seconds: float | None = None
    epoch_seconds: list[float] = field(default_factory=list)
    seconds_per_epoch: float | None = None  # median of the timed epochs
    peak_mb: float | None = None  # process RSS peak (CPU) or allocated peak (CUDA)
    train_mb: float | None = None  # that peak above the level training started from
    memory_method: str = ""
    malloc: str = ""  # "keep": pipeline/runtime/allocator.py's settings were in force; "system": glibc's own
    error: str = ""


def _proc_status_kb(key: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def _release_free_heap() -> None:
    """Hand memory freed during set-up back to the OS (glibc's malloc_trim), so the RSS that
    training starts from is what set-up keeps alive and training cannot reuse cached pages
    unseen."""
    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the figure may undercount a little
        pass


def _reset_cpu_peak() -> bool:
    """Reset the RSS high-water mark to the current RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class MemoryMeter:
    """Peak memory of the training epochs, measured from `start()` to `stop()`."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.device = torch.device(device)

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            self.method = "torch.cuda.max_memory_allocated"
            return
        _release_free_heap()
        self.reset = _reset_cpu_peak()
        rss_kb = _proc_status_kb("VmRSS")
        self.base = (rss_kb or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        self.method = "VmHWM after clear_refs reset" if self.reset else "ru_maxrss (no reset; may undercount)"

    def stop(self) -> tuple[float, float]:
        """(peak, peak above the start level), in MiB."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            hwm_kb = _proc_status_kb("VmHWM") if self.reset else None
            peak = (hwm_kb or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        return peak / MB, max(peak - self.base, 0) / MB


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def _epochs(trainer: Trainer, job: Job, deadline: float, result: Result) -> None:
    """Warm-up epochs (untimed), then the timed ones; epoch_seconds fills in as they finish."""
    for _ in range(job.warmup):
        trainer.train_epoch(deadline)
    for _ in range(job.epochs):
        _sync(job.device)
        start = time.perf_counter()
        trainer.train_epoch(deadline)
        _sync(job.device)
        result.epoch_seconds.append(time.perf_counter() - start)


def run_job(job: Job) -> Result:
    """Build the family's Trainer on the synthetic data and time its training epochs."""
    deadline = time.monotonic() + job.time_limit
    result = Result()
    if job.threads > 0:
        torch.set_num_threads(job.threads)
    meter = MemoryMeter(job.device)
    try:
        start = time.perf_counter()
        dataset = synthetic_dataset(DataSpec(**job.data))
        trainer = Trainer(job.family, job.model_kwargs, TrainSettings(**job.settings), dataset,
                          seed=job.seed, device=job.device)
        result.params = trainer.model.num_parameters()
        result.malloc = "keep" if keep_freed_memory() else "system"  # what the Trainer's call set
        result.setup_seconds = time.perf_counter() - start
        meter.start()
        _epochs(trainer, job, deadline, result)
    except TimeLimitReached as exc:
        result.status, result.error = "timeout", str(exc)
    except (TrialFailedError, ValueError, RuntimeError, TypeError, AssertionError) as exc:
        result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
    if hasattr(meter, "base"):  # training started: its peak so far, also after a timeout
        result.peak_mb, result.train_mb = meter.stop()
        result.memory_method = meter.method
    if result.epoch_seconds:
        result.seconds_per_epoch = statistics.median(result.epoch_seconds)
    return result


def main(argv: list[str]) -> None:
    job = Job(**json.loads(argv[0]))
    print(json.dumps(asdict(run_job(job))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
