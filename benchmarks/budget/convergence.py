"""Convergence benchmark: is the final stage's budget long enough for the searched best configurations?

    .venv/bin/python -m benchmarks.budget.convergence [--root .] [--factor 4] [--families a,b] [--datasets d]
                                               [--seeds N] [--workers 2] [--device cpu]
                                               [--out benchmarks/results] [--quick]

For every (dataset, family) of the project's params.yaml with a final record
(results/<dataset>/final/<family>.json) of status "ok", each nominal seed of that record trains
its best configuration again from scratch with `--factor` times the budget: maximum epochs,
patience, the floor of optimiser steps (`final.min_steps`, so an epoch keeps its passes and the
run --factor times its steps) and wall-clock cap all multiplied. The loop is the final stage's (best validation epoch's
weights kept, then scored on val and test), without Ray or MLflow. Writes convergence.json and
convergence.md to --out and prints the Markdown. `--seeds N` retrains the record's first N seeds only.

Each seed's result is appended to SEEDS_LOG in --out as it ends; a run started again with the
same --out, factor and records trains only the seeds that log lacks (a run of hours on a small
machine resumes where it was stopped). A seed is the same when its cell, seed, configuration and
long budget are.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
SEEDS_LOG = "convergence-seeds.jsonl"  # one finished seed per line: the run resumes from it
TOLERANCE = 3.0  # points: a default test mean this close to the long budget's counts as converged
QUICK_EPOCHS = 2
# Only light imports up here: spawned workers import this module; torch and the pipeline come in later.


@dataclass(frozen=True)
class SeedJob:
    """One seed of one cell at the long budget; paths absolute (workers share no working directory)."""

    dataset: str
    family: str
    data_dir: str
    config: dict[str, Any]
    seed: int
    epochs: int
    patience: int | None
    time_limit_s: float | None
    device: str = "cpu"
    min_steps: int = 1  # the record's `final.min_steps` times --factor: the same passes per epoch, --factor x the steps
    validation: str = "prepared"  # `final.validation`: "per_seed" redraws the validation series for the seed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.budget.convergence", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=Path("."), help="project root (params.yaml, results/, data/)")
    p.add_argument("--factor", type=float, default=4.0, help="budget multiplier (epochs, patience, time limit)")
    p.add_argument("--families", default="", help="comma-separated (default: params.yaml's families)")
    p.add_argument("--datasets", default="", help="comma-separated (default: params.yaml's datasets)")
    p.add_argument("--seeds", type=int, default=0, help="retrain only each record's first N seeds (0: all)")
    p.add_argument("--workers", type=int, default=2, help="seeds trained at a time, one process and torch thread each")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (every worker on it)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--quick", action="store_true", help=f"smoke run: 1 seed, factor 1, at most {QUICK_EPOCHS} epochs")
    args = p.parse_args(argv)
    if args.quick:
        args.factor = 1.0
    if args.factor <= 0 or args.workers < 1 or args.seeds < 0:
        p.error("--factor must be > 0, --workers >= 1 and --seeds >= 0")
    args.root = args.root.resolve()
    return args


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def plan(record: dict[str, Any], data_dir: Path, args: argparse.Namespace) -> list[SeedJob]:
    """The long-budget jobs of one final record: its nominal seeds, its budget times --factor."""
    epochs = max(1, round(record.get("max_epochs", record["epochs"]) * args.factor))
    patience = _scaled(record.get("patience"), args.factor)
    patience = None if patience is None else max(1, round(patience))
    seeds = [s["seed"] for s in record["seeds"]][:args.seeds or None]
    if args.quick:
        seeds, epochs = seeds[:1], min(epochs, QUICK_EPOCHS)
        patience = None if patience is None else min(patience, epochs)
    min_steps = max(1, round(record.get("min_steps", 1) * args.factor))
    return [SeedJob(record["dataset"], record["family"], str(data_dir), record["config"], s, epochs, patience,
                    _scaled(record.get("time_limit_s"), args.factor), args.device, min_steps,
                    record.get("validation", "prepared")) for s in seeds]


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)  # parallel seeds must not fight over cores, as `resources: cpu: 1`


def train_seed(job: SeedJob) -> dict[str, Any]:
    """Train one seed as the final stage does (pipeline/final/stage.py train_seed), without MLflow."""
    from pipeline.data.contract import load_dataset
    from pipeline.errors import TrialFailedError
    from pipeline.spaces import split_config
    from pipeline.training.loop import Trainer, TrainSettings
    from pipeline.training.stopping import train_to_budget, with_patience

    start = time.monotonic()
    try:
        data = load_dataset(Path(job.data_dir))
        if job.validation == "per_seed":  # as the final stage does (pipeline/final/seeds.py)
            from pipeline.data.resplit import per_seed_validation

            data = per_seed_validation(data, job.seed)
        train_cfg, model_cfg = split_config(job.config)
        trainer = Trainer(job.family, model_cfg, TrainSettings(**with_patience(train_cfg, job.patience)), data,
                          job.seed, job.device, job.epochs, job.min_steps)
        # the final stage's own stopping rules (pipeline.training.stopping.train_to_budget), without its MLflow logging
        run = train_to_budget(trainer, job.epochs, job.time_limit_s, data.meta.mode)
        trainer.model.load_state_dict(run.best_state)
        val, test = trainer.evaluate("val"), trainer.evaluate("test")
    except TrialFailedError as exc:  # a NaN loss or a solver failure: recorded, the other seeds go on
        return {"seed": job.seed, "status": "failed", "error": str(exc), "seconds": time.monotonic() - start}
    return {"seed": job.seed, "status": "ok", "val": val, "test": test, "curve": run.curve, "stop": run.stop,
            "train_loss_curve": run.train_losses, "val_loss_curve": run.val_losses,
            "best_epoch": run.best_epoch, "epochs_trained": len(run.curve), "steps": run.steps,
            "seconds": time.monotonic() - start}


def cells(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(final records to retrain, skipped cells with their reason) over params.yaml's grid."""
    from pipeline.config import load_params
    from pipeline.stores.paths import final_result_path

    params = load_params(args.root / "params.yaml")
    datasets = [d for d in args.datasets.split(",") if d] or params.datasets
    families = [f for f in args.families.split(",") if f] or params.families
    todo, skipped = [], []
    for dataset in datasets:
        for family in families:
            path = final_result_path(args.root, dataset, family)
            if not path.is_file():
                skipped.append({"dataset": dataset, "family": family, "reason": "no final record"})
                continue
            record = json.loads(path.read_text())
            if record.get("status", "ok") != "ok":  # records from before `status` existed are ok
                reason = record.get("reason") or f"status {record.get('status')}"
                skipped.append({"dataset": dataset, "family": family, "reason": reason})
                continue
            todo.append({**record, "dataset": dataset, "family": family})
    return todo, skipped


def run_jobs(jobs: list[SeedJob], workers: int,
             on_result: Callable[[SeedJob, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Every job in a pool of spawned processes (fresh interpreters: fork would share torch's state);
    `on_result` sees each job's result as it ends (to keep it before the others finish)."""
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init_worker) as pool:
        futures = {pool.submit(train_seed, job): job for job in jobs}
        for future in as_completed(futures):
            job, out = futures[future], future.result()
            if on_result is not None:
                on_result(job, out)
            results.append({**out, "dataset": job.dataset, "family": job.family})
            print(f"  {job.dataset}/{job.family} seed {job.seed}: {out['status']} "
                  f"{out.get('test', out.get('error', ''))} ({out['seconds']:.0f} s)", file=sys.stderr, flush=True)
    return results


def job_key(job: SeedJob) -> str:
    """What makes two seed jobs the same (SEEDS_LOG): every field of the job but where its data lies."""
    from dataclasses import asdict

    return json.dumps({k: v for k, v in asdict(job).items() if k != "data_dir"}, sort_keys=True)


def logged(out: Path) -> dict[str, dict[str, Any]]:
    """{job_key: result} of the seeds SEEDS_LOG in `out` holds (a line cut short by a stop is skipped)."""
    path = out / SEEDS_LOG
    found = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        found[entry["key"]] = entry["result"]
    return found


def log_result(out: Path, job: SeedJob, result: dict[str, Any]) -> None:
    """Append one finished seed to SEEDS_LOG in `out` (one line, flushed: a stop loses no finished seed)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / SEEDS_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"key": job_key(job), "result": result}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _default_epochs(seed: dict[str, Any], record: dict[str, Any]) -> int:
    # records from before early stopping have no `epochs_trained`: their curve has one value per epoch
    return seed.get("epochs_trained") or len(seed.get("curve") or []) or record["epochs"]


def summarise(record: dict[str, Any], jobs: list[SeedJob], runs: list[dict[str, Any]],
              factor: float) -> dict[str, Any]:
    """One cell's row: the default's figures from its record, the long budget's (`jobs`) from `runs`."""
    runs = sorted(runs, key=lambda r: r["seed"])
    ok = [r for r in runs if r["status"] == "ok"]
    mean, std = _mean_std([r["test"] for r in ok])
    scale = 100.0 if record["mode"] == "max" else 1.0  # every 'max' metric (accuracy, auroc) lies in [0, 1]
    diff = None if mean is None else (mean - record["test_mean"]) * scale
    return {
        "dataset": record["dataset"], "family": record["family"], "metric": record["metric"], "mode": record["mode"],
        "points_scale": scale, "default_test_mean": record["test_mean"], "default_test_std": record["test_std"],
        "default_max_epochs": record.get("max_epochs", record["epochs"]),
        "default_epochs_median": statistics.median(_default_epochs(s, record) for s in record["seeds"]),
        "default_stops": dict(Counter(s.get("stop", "max_epochs") for s in record["seeds"])),
        "default_steps_median": _median([s.get("steps") for s in record["seeds"]]),
        "long_steps_median": _median([r.get("steps") for r in ok]),
        "long_max_epochs": jobs[0].epochs, "long_patience": jobs[0].patience,
        "long_time_limit_s": jobs[0].time_limit_s,
        "long_test_mean": mean, "long_test_std": std, "long_n_seeds": len(ok),
        "long_epochs_median": statistics.median(r["epochs_trained"] for r in ok) if ok else None,
        "long_stops": dict(Counter(r["stop"] for r in ok)), "difference_points": diff,
        "within_tolerance": None if diff is None else abs(diff) <= TOLERANCE, "factor": factor,
        "seeds": runs, "failed_seeds": [{"seed": r["seed"], "error": r["error"]} for r in runs if r["status"] != "ok"],
    }


def _median(values: list[int | None]) -> float | None:
    """The median of the known values; None when a record predates counting steps."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _steps(median: float | None) -> str:
    return "" if median is None else f", {median:g} steps"


def _value(v: float | None, scale: float) -> str:
    return "–" if v is None else (f"{v * scale:.1f}" if scale == 100.0 else f"{v:.4g}")


def _stops(stops: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(stops.items())) or "–"


def _header(report: dict[str, Any]) -> list[str]:
    m, f = report["machine"], report["factor"]
    quick = " · **--quick smoke run: figures mean nothing**" if report["quick"] else ""
    return ["# Convergence benchmark", "",
            f"Each searched best configuration retrained with {f:g}x the final budget (epochs, patience, step "
            f"floor, time limit); epochs and steps are medians over seeds; difference = {f:g}x test mean − default test mean, in points (x100 for accuracy and AUROC, "
            f"raw for MSE); converged when |difference| ≤ {TOLERANCE:g}. {m['date']} · {m['cpu']}, {m['cores']} "
            f"cores, {report['workers']} workers x 1 torch thread · device {m['device']} · commit "
            f"{m.get('git_commit')} · wall time {report['wall_seconds']:.0f} s{quick}", "",
            f"| dataset | family | metric | default test | default epochs (stops) | {f:g}x test | "
            f"{f:g}x epochs (stops) | difference | within {TOLERANCE:g} |", "|" + "---|" * 9]


def _row(c: dict[str, Any]) -> str:
    s = c["points_scale"]
    diff = "–" if c["difference_points"] is None else f"{c['difference_points']:+.{1 if s == 100.0 else 4}f}"
    long_epochs = "–" if c["long_epochs_median"] is None else f"{c['long_epochs_median']:g}"
    verdict = {True: "yes", False: "**no**", None: "–"}[c["within_tolerance"]]
    return (f"| {c['dataset']} | {c['family']} | {c['metric']} | {_value(c['default_test_mean'], s)} ± "
            f"{_value(c['default_test_std'], s)} | {c['default_epochs_median']:g} of {c['default_max_epochs']} "
            f"({_stops(c['default_stops'])}{_steps(c.get('default_steps_median'))}) | "
            f"{_value(c['long_test_mean'], s)} ± {_value(c['long_test_std'], s)} | "
            f"{long_epochs} of {c['long_max_epochs']} ({_stops(c['long_stops'])}{_steps(c.get('long_steps_median'))}) "
            f"| {diff} | {verdict} |")


def render(report: dict[str, Any]) -> str:
    """The report as Markdown: the rule and machine line, one row per cell, what was left out."""
    lines = _header(report) + [_row(c) for c in report["cells"]]
    failed = [f"{c['dataset']}/{c['family']} seed {x['seed']} ({x['error'][:80]})"
              for c in report["cells"] for x in c["failed_seeds"]]
    skipped = [f"{s['dataset']}/{s['family']} ({s['reason']})" for s in report["skipped"]]
    for label, items in (("Failed seeds (left out of the means)", failed), ("Skipped", skipped)):
        if items:
            lines += ["", f"{label}: " + "; ".join(items)]
    return "\n".join(lines) + "\n"


def estimate_seconds(per_epoch: dict[tuple[str, str], float], jobs: list[SeedJob], workers: int) -> float:
    """Σ over seeds of min(long max epochs x the final stage's seconds per epoch, long time limit),
    over `workers`: training only (validation, set-up and a loaded machine add; early stopping takes off)."""
    return sum(min(j.epochs * per_epoch[(j.dataset, j.family)], j.time_limit_s or float("inf"))
               for j in jobs) / workers


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the report written to convergence.json."""
    from benchmarks.zoo.run import machine_info
    from pipeline.stores.paths import processed_dir

    args = parse_args(argv)
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    records, skipped = cells(args)
    jobs = {(r["dataset"], r["family"]): plan(r, processed_dir(args.root, r["dataset"]), args) for r in records}
    # the final stage's median training seconds per epoch of each cell (0 where not recorded)
    per_epoch = {(r["dataset"], r["family"]): r.get("seconds_per_epoch") or 0.0 for r in records}
    # longest seeds first: a slow family started last would leave the other workers idle at the end
    flat = sorted((j for js in jobs.values() for j in js), key=lambda j: -estimate_seconds(per_epoch, [j], 1))
    estimate = estimate_seconds(per_epoch, flat, args.workers)
    print(f"convergence: {len(flat)} seeds in {len(records)} cells, about {estimate / 60:.0f} min of training",
          file=sys.stderr, flush=True)
    kept = logged(args.out)
    done = [{**kept[job_key(j)], "dataset": j.dataset, "family": j.family} for j in flat if job_key(j) in kept]
    todo = [j for j in flat if job_key(j) not in kept]
    if done:
        print(f"convergence: {len(done)} seeds already in {args.out / SEEDS_LOG}, {len(todo)} to train",
              file=sys.stderr, flush=True)
    done += run_jobs(todo, args.workers, lambda job, out: log_result(args.out, job, out)) if todo else []
    rows = [summarise(r, jobs[(r["dataset"], r["family"])],
                      [x for x in done if (x["dataset"], x["family"]) == (r["dataset"], r["family"])], args.factor)
            for r in records]
    report = {"machine": machine_info(args.device, 1), "factor": args.factor, "quick": args.quick,
              "workers": args.workers, "tolerance_points": TOLERANCE, "estimated_seconds": estimate,
              "cells": rows, "skipped": skipped, "wall_seconds": time.perf_counter() - start}
    report["machine"]["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "convergence.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = render(report)
    (args.out / "convergence.md").write_text(markdown)
    print(markdown)
    return report


if __name__ == "__main__":
    from benchmarks.budget.convergence import main as _main  # the module's own name, so spawned workers find train_seed

    _main()
