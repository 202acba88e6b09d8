"""GPU benchmark: search trials per hour with 1, 2 and 4 trials packed on one GPU, and the fill of
that GPU's trial slots with the families searched at once against one after another.

    python -m benchmarks.gpu.run [--quick] [--out DIR] [--packing 1,2,4] [--family ncde] [--trials 8]
                             [--epochs 4] [--fill-families cfc,ncde,ode_rnn,lstm_dt] [--fill-trials 4]

Every search goes through the real driver (`pipeline.sweep.search`: Ray Tune, Optuna, MLflow in a
SQLite file of the run's own project) on JapaneseVowels as `ctsweep prepare japanese_vowels`
wrote it (data/processed/japanese_vowels: the cluster benchmark's data), with a local Ray of the
run's own declaring the machine's CPUs and `--gpus` GPUs. Ray start-up is not timed.

- packing k: one search of `--trials` trials of `--family`, each asking `gpu: 1/k` and 1 CPU,
  `max_concurrent: k`, so k trials share the GPU at a time. The sampler is random
  (n_startup_trials = trials) and ASHA never stops a trial (grace period = epochs), so every k
  trains the same configurations for the same epochs. Trials per hour = trials / wall x 3600.
- fill: the `--fill-families` at `gpu: 1/4` each (4 trial slots on one GPU), `max_concurrent: 2`
  per family: one `search()` per family in turn (`before`) and one `search_many()` (`after`).
  Busy = each trial's MLflow run from its start to its last logged epoch (the model's set-up
  included); fill = busy /
  (slots x wall).

GPU utilisation and memory are sampled with nvidia-smi every 0.5 s while a mode runs. Without a
CUDA device the run still works (trials train on the CPU, the GPUs are logical): a smoke test
of the script, not a measurement. Writes gpu.md and gpu.json to --out after every mode.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster.run import local_tracking  # noqa: E402
from benchmarks.fill.workload import concurrency, families_at_once, load_average, local_ray  # noqa: E402
from pipeline.config import AshaParams, Resources, SearchParams  # noqa: E402

DATASET = "japanese_vowels"


@dataclass(frozen=True)
class Settings:
    """What one run measures; the defaults fit in about 6 minutes of an H100 machine's time."""

    packing: tuple[int, ...] = (1, 2, 4)
    family: str = "ncde"
    trials: int = 8
    epochs: int = 4
    fill_families: tuple[str, ...] = ("cfc", "ncde", "ode_rnn", "lstm_dt")
    fill_trials: int = 4
    fill_slots: int = 4
    gpus: int = 1
    seed: int = 0

    def packing_params(self, k: int) -> SearchParams:
        return SearchParams(num_samples=self.trials, max_concurrent=k, epochs=self.epochs,
                            n_startup_trials=self.trials, sampler_seed=self.seed, trial_time_limit_s=3600.0,
                            asha=AshaParams(grace_period=self.epochs), resources=Resources(cpu=1, gpu=1 / k),
                            max_failures=0)

    def fill_params(self) -> SearchParams:
        return SearchParams(num_samples=self.fill_trials, max_concurrent=2, epochs=self.epochs,
                            n_startup_trials=self.fill_trials, sampler_seed=self.seed, trial_time_limit_s=3600.0,
                            asha=AshaParams(grace_period=self.epochs),
                            resources=Resources(cpu=1, gpu=1 / self.fill_slots), max_failures=0)


# --quick, a smoke run of every code path at its smallest: one packing mode (1 GPU a trial: the two trials
# must run one after the other), whose path is every k's; the fill modes ask a fractional GPU (1/4).
QUICK = Settings(packing=(1,), family="cfc", trials=2, epochs=1, fill_families=("cfc", "lstm_dt"), fill_trials=2)


def new_project(work: Path, label: str, data: Path) -> Path:
    """A project root with the repository's search spaces and params.yaml and the processed data."""
    root = (work / label).resolve()
    shutil.copytree(ROOT / "search_spaces", root / "search_spaces")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(data, root / "data" / "processed" / DATASET)
    return root


@contextlib.contextmanager
def gpu_sampler(out: Path) -> Iterator[list[tuple[float, float]]]:
    """(utilisation %, memory used MiB) every 0.5 s from nvidia-smi while the block runs; empty
    where there is no nvidia-smi (a CPU machine)."""
    samples: list[tuple[float, float]] = []
    if shutil.which("nvidia-smi") is None:
        yield samples
        return
    with out.open("w") as log:
        proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                 "--format=csv,noheader,nounits", "-lms", "500"], stdout=log,
                                stderr=subprocess.DEVNULL)
    try:
        yield samples
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for line in out.read_text().splitlines():
            with contextlib.suppress(ValueError):
                util, mem = (float(v) for v in line.split(",")[:2])
                samples.append((util, mem))


def trial_spans(root: Path, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every trial's busy span (seconds since the epoch) and family: from its MLflow run's start
    to its last logged epoch. Not the run's end: the driver closes the trials' runs after the
    search (pipeline.sweep.records.close_runs), so that end is when the search ended."""
    from pipeline.stores import tracking
    from pipeline.sweep import run_lookup
    from pipeline.sweep.records import METRIC

    client, exp_id = tracking.experiment_id(root, DATASET)
    spans = []
    for family, record in records.items():
        for run in run_lookup.children(client, exp_id, record["mlflow_parent_run_id"]):
            logged = [m.timestamp for m in client.get_metric_history(run.info.run_id, METRIC)]
            if logged:
                spans.append({"family": family, "start": run.info.start_time / 1e3, "end": max(logged) / 1e3})
    return spans


def run_mode(work: Path, label: str, data: Path, s: Settings, families: list[str], p: SearchParams,
             sequential: bool, slots: int) -> dict[str, Any]:
    """One search (or one per family) in its own project and Ray, timed from the first call to the last return."""
    from pipeline.stores import tracking
    from pipeline.sweep.search import search, search_many

    root = new_project(work, label, data)
    load_start = load_average()
    with local_tracking(), local_ray(os.cpu_count() or 1, gpus=s.gpus), gpu_sampler(work / f"{label}.smi") as smi:
        tracking.experiment_id(root, DATASET)  # the store, created before the clock starts
        t0 = time.time()
        if sequential:
            records = {f: search(root, DATASET, f, p) for f in families}
        else:
            records = search_many(root, DATASET, families, p)
        t1 = time.time()
        spans = trial_spans(root, records)
    wall = t1 - t0
    busy = sum(min(b["end"], t1) - max(b["start"], t0) for b in spans)
    trials = [t for r in records.values() for t in r["trials"]]
    out = {"mode": label, "families": families, "sequential": sequential, "slots": slots,
           "gpu_per_trial": p.resources.gpu, "max_concurrent": p.max_concurrent, "wall_s": wall, "busy_s": busy,
           "fill": busy / (slots * wall), "n_trials": len(trials),
           "n_failed": sum(t["status"] == "error" for t in trials), "epochs": sum(t["epochs"] for t in trials),
           "trials_per_hour": len(trials) / wall * 3600,
           "peak_running": max((n for _, n in concurrency([(b["start"], b["end"]) for b in spans])), default=0),
           "families_at_once": families_at_once(spans),
           "trial_s_median": statistics.median([b["end"] - b["start"] for b in spans]) if spans else None,
           "gpu_util_mean": statistics.mean(u for u, _ in smi) if smi else None,
           "gpu_mem_max_mib": max(m for _, m in smi) if smi else None,
           "errors": sorted({e for r in records.values() for e in r.get("errors", [])}),
           "load_average": [load_start, load_average()]}
    print(f"  {label}: wall {wall:.1f} s, {out['trials_per_hour']:.0f} trials/h, fill {out['fill']:.3f}, "
          f"GPU {out['gpu_util_mean']}", file=sys.stderr, flush=True)
    return out


def machine(gpus: int) -> dict[str, Any]:
    import torch

    from benchmarks.cluster.run import machine as describe

    info = describe("cuda" if torch.cuda.is_available() else "cpu", 1)
    info["cuda"] = torch.cuda.is_available()
    info["declared_gpus"] = gpus
    return info


def render(report: dict[str, Any]) -> str:
    """The report as Markdown (gpu.md)."""
    m, s = report["machine"], report["settings"]
    device = m.get("gpu") or f"no CUDA device ({m['cpu']}): {s['gpus']} logical GPU(s), trials on the CPU"
    lines = [
        "# GPU benchmark: trials packed per GPU, and the fill of its slots", "",
        *(["**QUICK SMOKE RUN: not a measurement.**", ""] if report["quick"] else []),
        f"{m['date']} · {device} · {m['cores']} cores · torch {m['torch']} · Ray {m['ray']} · Optuna {m['optuna']} "
        f"· MLflow {m['mlflow']} (SQLite) · total {report['total_seconds']:.0f} s", "",
        f"JapaneseVowels through the real search driver. Packing: {s['trials']} trials of `{s['family']}` "
        f"(random sampler, {s['epochs']} epochs each, no ASHA stop), k trials asking gpu 1/k with "
        f"max_concurrent k. Fill: {', '.join(s['fill_families'])} x {s['fill_trials']} trials at gpu "
        f"1/{s['fill_slots']} ({s['fill_slots']} slots), max_concurrent 2 per family. Busy = a trial's MLflow "
        "run from its start to its last logged epoch; fill = busy / (slots x wall); wall from the first search call to the last return.", "",
        "| mode | trials at once (asked) | wall (s) | trials | failed | trials per hour | median trial (s) "
        "| fill | peak running | families at once | GPU util mean (%) | GPU memory max (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["modes"]:
        util = "–" if r["gpu_util_mean"] is None else f"{r['gpu_util_mean']:.0f}"
        mem = "–" if r["gpu_mem_max_mib"] is None else f"{r['gpu_mem_max_mib']:.0f}"
        med = "–" if r["trial_s_median"] is None else f"{r['trial_s_median']:.1f}"
        lines.append(f"| {r['mode']} | {r['max_concurrent'] * (1 if r['sequential'] else len(r['families']))} | "
                     f"{r['wall_s']:.1f} | {r['n_trials']} | {r['n_failed']} | **{r['trials_per_hour']:.0f}** | {med} "
                     f"| {r['fill']:.3f} | {r['peak_running']} | {r['families_at_once']} | {util} | {mem} |")
    packed = {r["mode"]: r for r in report["modes"] if r["mode"].startswith("pack")}
    if "pack1" in packed:
        base = packed["pack1"]["trials_per_hour"]
        lines += ["", "Trials per hour against one trial per GPU: " + ", ".join(
            f"{k}: {r['trials_per_hour'] / base:.2f}x" for k, r in packed.items()) + "."]
    errors = sorted({e for r in report["modes"] for e in r["errors"]})
    if errors:
        lines += ["", "Trial errors: " + "; ".join(errors[:5])]
    lines += ["", f"Command: `{report['command']}`", *(["", report["note"]] if report.get("note") else []), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="benchmarks.gpu.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 trials of 1 epoch per mode, packing 1 only")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "processed" / DATASET)
    ap.add_argument("--packing", default=None, help="comma-separated trials per GPU, e.g. 1,2,4")
    ap.add_argument("--family", default=None)
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--fill-families", default=None, help="comma-separated; 'none' skips the fill modes")
    ap.add_argument("--fill-trials", type=int, default=None)
    ap.add_argument("--gpus", type=int, default=1, help="GPUs the local Ray declares")
    ap.add_argument("--modes", default=None, help="comma-separated subset of pack<k>, fill-before, fill-after")
    args = ap.parse_args(argv)
    base = QUICK if args.quick else Settings()
    change: dict[str, Any] = {"gpus": args.gpus}
    if args.packing:
        change["packing"] = tuple(int(k) for k in args.packing.split(","))
    if args.fill_families:
        change["fill_families"] = () if args.fill_families == "none" else tuple(args.fill_families.split(","))
    for key in ("family", "trials", "epochs", "fill_trials"):
        if getattr(args, key) is not None:
            change[key] = getattr(args, key)
    s = Settings(**{**asdict(base), **change})
    if not (args.data / "meta.json").exists():
        ap.error(f"--data {args.data}: no processed dataset there; run `ctsweep prepare {DATASET}` first")
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="ctsweep-bench-gpu-")).resolve()
    report = {"quick": args.quick, "machine": machine(s.gpus), "settings": asdict(s), "modes": [],
              "command": "python -m benchmarks.gpu.run " + " ".join(sys.argv[1:] if argv is None else argv)}
    args.out.mkdir(parents=True, exist_ok=True)
    plan = [(f"pack{k}", [s.family], s.packing_params(k), False, k) for k in s.packing]
    if s.fill_families:
        plan += [(mode, list(s.fill_families), s.fill_params(), mode == "fill-before", s.fill_slots)
                 for mode in ("fill-before", "fill-after")]
    if args.modes:
        wanted = args.modes.split(",")
        unknown = sorted(set(wanted) - {m[0] for m in plan})
        if unknown:
            ap.error(f"--modes {args.modes!r}: {unknown} not among {[m[0] for m in plan]}")
        plan = [m for m in plan if m[0] in wanted]
    try:
        for label, families, p, sequential, slots in plan:
            report["modes"].append(run_mode(work, label, args.data, s, families, p, sequential, slots))
            report["total_seconds"] = time.perf_counter() - start
            (args.out / "gpu.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
            (args.out / "gpu.md").write_text(render(report))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(render(report))
    return report


if __name__ == "__main__":
    main()
