"""What a trial or seed process spends before its first batch, two ways.

1. *Imports* (`--repeats` fresh interpreters, 5 by default): the modules a Ray worker imports to run
   a search trial (`pipeline.sweep.trial`) or a final seed (`pipeline.final.seeds`), timed one
   library after another in the order they load (ray, torch, Ray Tune, MLflow, the rest of the
   package), then the first optimizer built (torch imports torch._dynamo on it). `--code DIR`
   times another checkout's `pipeline/` with this environment, for a before-and-after comparison.
2. *Real trials* (`--store URI`): the start-up tags (pipeline/runtime/startup.py) of every search
   trial and final seed in an MLflow store, for example the one a kept cluster run left
   (`benchmarks.cluster.run --workers 1 --throughput-workers 1 --keep --work DIR`: DIR/ctsweep-0/mlflow.db):
   for each process's first trial or seed, the process's start to the imports, the imports, the
   imports to the trial, and the trial's set-up to its first batch; for the trials a process ran
   after its first, the set-up alone.

    .venv/bin/python -m benchmarks.cluster.trial_startup --out benchmarks/results/trial-startup [--store URI]
    .venv/bin/python -m benchmarks.cluster.trial_startup --code /path/to/other/checkout --out DIR

Writes trial_startup.json and trial_startup.md to --out and prints the Markdown. Figures move with
the machine's load: compare runs made one after the other.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.commands.startup import machine_facts
from benchmarks.outputs import save_report

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("ray", "torch", "ray.tune", "mlflow", "package", "first optimizer")
PROBE = """
import json, sys, time
stamps = [time.perf_counter()]
import ray; stamps.append(time.perf_counter())
import torch; stamps.append(time.perf_counter())
import ray.tune; stamps.append(time.perf_counter())
import mlflow; stamps.append(time.perf_counter())
import {module}; stamps.append(time.perf_counter())
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1); stamps.append(time.perf_counter())
print(json.dumps({{"steps": [b - a for a, b in zip(stamps, stamps[1:])],
                  "optuna": "optuna" in sys.modules}}))
"""
TAGS = ("startup_worker_s", "startup_imports_s", "startup_to_trial_s", "startup_setup_s")


def probe(module: str, code: Path, repeats: int) -> dict[str, Any]:
    """Median seconds per STEP over `repeats` fresh interpreters importing `module` from `code`."""
    runs = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True,
                              check=True, timeout=600, cwd=code, env={**os.environ, "PYTHONPATH": str(code)})
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    steps = {name: statistics.median(r["steps"][i] for r in runs) for i, name in enumerate(STEPS)}
    totals = [sum(r["steps"]) for r in runs]
    return {"module": module, "repeats": repeats, "median_s": steps, "total_median_s": statistics.median(totals),
            "total_range_s": [min(totals), max(totals)], "imports_optuna": any(r["optuna"] for r in runs)}


def from_store(uri: str) -> dict[str, Any]:
    """The start-up tags of a store's search trials and final seeds, summed up per kind."""
    from mlflow import MlflowClient  # late: the import probe needs no MLflow here

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    out: dict[str, Any] = {"store": uri}
    for stage in ("search", "final"):
        runs = [r for r in client.search_runs(experiments, f"tags.stage = '{stage}'", max_results=50_000)
                if "startup_setup_s" in r.data.tags]
        firsts = [r.data.tags for r in runs if r.data.tags["startup_trial_in_process"] == "1"]
        later = [float(r.data.tags["startup_setup_s"]) for r in runs if r.data.tags["startup_trial_in_process"] != "1"]
        first = {tag: statistics.median(float(t[tag]) for t in firsts if tag in t) for tag in TAGS
                 if any(tag in t for t in firsts)}
        out[stage] = {"runs": len(runs), "processes": len(firsts), "first_median_s": first,
                      "first_to_batch_median_s": statistics.median(sum(float(t.get(tag, 0)) for tag in TAGS)
                                                                   for t in firsts) if firsts else None,
                      "later_setup_median_s": statistics.median(later) if later else None}
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Trial start-up ({result['date']}, commit `{result['commit']}`, {result['cpu']})", "",
             f"Code: `{result['code']}`. Load average {result['machine']['load_1min']} at the start. "
             f"Imports: median of {result['repeats']} fresh interpreters, seconds.", "",
             "| module | " + " | ".join(STEPS) + " | total (range) | Optuna imported |",
             "|---|" + "---:|" * (len(STEPS) + 1) + "---|"]
    for p in result["imports"]:
        lines.append(f"| `{p['module']}` | " + " | ".join(f"{p['median_s'][s]:.2f}" for s in STEPS)
                     + f" | {p['total_median_s']:.2f} ({p['total_range_s'][0]:.2f}-{p['total_range_s'][1]:.2f})"
                     + f" | {'yes' if p['imports_optuna'] else 'no'} |")
    if "store" in result:
        s = result["store"]
        lines += ["", f"Real trials and seeds (`{s['store']}`), medians in seconds:", "",
                  "| stage | runs | processes | process start to imports | imports | imports to trial "
                  "| set-up to first batch | first trial: start to first batch | later trials: set-up |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for stage in ("search", "final"):
            k = s[stage]
            if not k["runs"]:
                continue
            f = k["first_median_s"]
            cells = [f"{f[t]:.2f}" if t in f else "-" for t in TAGS]
            to_batch = "-" if k["first_to_batch_median_s"] is None else f"{k['first_to_batch_median_s']:.2f}"
            later = "-" if k["later_setup_median_s"] is None else f"{k['later_setup_median_s']:.2f}"
            lines.append(f"| {stage} | {k['runs']} | {k['processes']} | " + " | ".join(cells) + f" | {to_batch} | {later} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="benchmarks.cluster.trial_startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose pipeline/ is imported (default: this one)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--store", help="an MLflow store whose trials' start-up tags to sum up")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.code, capture_output=True, text=True)
    facts = machine_facts()  # the CPU, cores and load at the start, read without torch
    result: dict[str, Any] = {"date": datetime.date.today().isoformat(),
                              "commit": commit.stdout.strip() or "unknown", "cpu": facts["cpu"], "machine": facts,
                              "code": str(args.code.resolve()), "repeats": args.repeats,
                              "imports": [probe(m, args.code.resolve(), args.repeats)
                                          for m in ("pipeline.sweep.trial", "pipeline.final.seeds")]}
    if args.store:
        result["store"] = from_store(args.store)
    text = markdown(result)
    save_report(args.out, "trial_startup", result, text)
    print(text)
    return result


if __name__ == "__main__":
    main()
