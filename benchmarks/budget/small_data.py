"""Small-data benchmark (issue 29): which validation choice makes a small dataset's results
converge and agree across reruns, with the default's final budget.

    .venv/bin/python -m benchmarks.budget.small_data --root PROJECT [--datasets gunpoint,arrowhead]
        [--families cfc,ncde] [--modes prepared,per_seed] [--seeds 10] [--long-seeds 5]
        [--factor 4] [--workers 2] [--out benchmarks/results]

For every (dataset, family, validation mode) each family's reference configuration
(search_spaces/<family>.yaml, the dataset's own reference where the file gives one) trains as
the final stage trains a seed (benchmarks/budget/convergence.py `train_seed`: the same loop, the same
early stopping and kept epoch, `final.validation` applied), with PROJECT's params.yaml `final`
budget (epochs, patience, min_steps), on `--seeds` seeds: two reruns of half as many seeds each
(seeds 0..k-1 and k..2k-1). Then `--long-seeds` of them again with `--factor` times that budget.

Per row: the test mean ± std of all seeds; *agreement*: |mean of rerun A − mean of rerun B| in
points; *convergence*: long-budget mean − default mean in points (within 3 counts); the share of
seeds the † rule calls not converged (pipeline.reporting.marks). Search is left out on purpose:
the question is the final stage's validation and budget, and the reference configuration is the
same for both modes. Seeds already in --out's small_data.jsonl are not trained again, so an
interrupted run resumes (a run's rows are appended as each seed ends).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 3.0  # points, as the convergence benchmark


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.budget.small_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="a project with params.yaml and prepared datasets")
    p.add_argument("--datasets", default="gunpoint,arrowhead")
    p.add_argument("--families", default="cfc,ncde")
    p.add_argument("--modes", default="prepared,per_seed")
    p.add_argument("--seeds", type=int, default=10, help="seeds per row at the default budget: two reruns of half")
    p.add_argument("--long-seeds", type=int, default=5, help="of those, retrained at --factor x the budget (0: none)")
    p.add_argument("--factor", type=float, default=4.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    if args.seeds < 2 or args.seeds % 2 or not 0 <= args.long_seeds <= args.seeds or args.factor <= 0:
        p.error("--seeds must be even and >= 2, --long-seeds in [0, --seeds], --factor > 0")
    args.root = args.root.resolve()
    return args


def reference(root: Path, family: str, dataset: str) -> dict[str, Any]:
    """The configuration the search would try first on `dataset`: its reference and fixed values."""
    from pipeline.spaces import load_space, space_path

    space = load_space(space_path(root, family), family).for_dataset(dataset)
    return {**space.fixed, **space.reference}


def jobs(args: argparse.Namespace) -> list[Any]:
    from benchmarks.budget.convergence import SeedJob
    from pipeline.config import load_params
    from pipeline.stores.paths import processed_dir

    final = load_params(args.root / "params.yaml").final
    out = []
    for dataset in args.datasets.split(","):
        for family in args.families.split(","):
            budget = final.for_family(family)
            config = reference(args.root, family, dataset)
            for mode in args.modes.split(","):
                for factor, seeds in ((1.0, range(args.seeds)), (args.factor, range(args.long_seeds))):
                    patience = None if budget.patience is None else max(1, round(budget.patience * factor))
                    out += [SeedJob(dataset, family, str(processed_dir(args.root, dataset)), config, s,
                                    max(1, round(budget.epochs * factor)), patience,
                                    None if budget.time_limit_s is None else budget.time_limit_s * factor, "cpu",
                                    max(1, round(budget.min_steps * factor)), mode) for s in seeds]
    return out


def _key(job: Any) -> tuple[str, str, str, int, int]:
    return job.dataset, job.family, job.validation, job.epochs, job.seed


def _points(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def summarise(done: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per (dataset, family, mode) from the seeds' results."""
    from pipeline.reporting.marks import seed_reasons

    rows = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in done:
        groups.setdefault((r["dataset"], r["family"], r["validation"]), []).append(r)
    for (dataset, family, mode), runs in sorted(groups.items()):
        short_epochs = min(r["max_epochs"] for r in runs)
        base = sorted((r for r in runs if r["max_epochs"] == short_epochs and r["status"] == "ok"), key=lambda r: r["seed"])
        long = [r for r in runs if r["max_epochs"] != short_epochs and r["status"] == "ok"]
        half = args.seeds // 2
        a = [r["test"] for r in base if r["seed"] < half]
        b = [r["test"] for r in base if r["seed"] >= half]
        mean = statistics.fmean(r["test"] for r in base) if base else None
        long_mean = statistics.fmean(r["test"] for r in long) if long else None
        paired = statistics.fmean(r["test"] for r in base if r["seed"] < args.long_seeds) if base else None
        rows.append({
            "dataset": dataset, "family": family, "validation": mode, "n": len(base),
            "test_mean": mean, "test_std": statistics.stdev(r["test"] for r in base) if len(base) > 1 else None,
            "rerun_a": statistics.fmean(a) if a else None, "rerun_b": statistics.fmean(b) if b else None,
            "agreement_points": abs(statistics.fmean(a) - statistics.fmean(b)) * 100 if a and b else None,
            "long_mean": long_mean, "long_n": len(long),
            "convergence_points": None if long_mean is None or paired is None else (long_mean - paired) * 100,
            "not_converged": sum(bool(seed_reasons(r, "max")) for r in base),
            "steps_median": statistics.median(r["steps"] for r in base) if base else None,
            "failed": sum(r["status"] != "ok" for r in runs),
        })
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["# Small-data benchmark", "",
             f"Reference configurations trained as final seeds ({meta['budget']}); agreement = |mean of seeds "
             f"0-{meta['half'] - 1} − mean of seeds {meta['half']}-{2 * meta['half'] - 1}|; convergence = "
             f"{meta['factor']:g}x budget mean − default mean of the same {meta['long']} seeds (points; within "
             f"{TOLERANCE:g} counts). {meta['date']} · {meta['machine']} · wall time {meta['wall']:.0f} s", "",
             "| dataset | family | validation | test (all seeds) | rerun A | rerun B | agreement | "
             f"{meta['factor']:g}x test | convergence | † seeds | median steps |", "|" + "---|" * 11]
    for r in rows:
        conv = "–" if r["convergence_points"] is None else f"{r['convergence_points']:+.1f}"
        agree = "–" if r["agreement_points"] is None else f"{r['agreement_points']:.1f}"
        lines.append(f"| {r['dataset']} | {r['family']} | {r['validation']} | {_points(r['test_mean'])} ± "
                     f"{_points(r['test_std'])} (n = {r['n']}) | {_points(r['rerun_a'])} | {_points(r['rerun_b'])} | "
                     f"{agree} | {_points(r['long_mean'])} (n = {r['long_n']}) | {conv} | {r['not_converged']} of "
                     f"{r['n']} | {r['steps_median']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from benchmarks.budget.convergence import run_jobs
    from benchmarks.zoo.run import machine_info
    from pipeline.config import load_params

    args = parse_args(argv)
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "small_data.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    seen = {(r["dataset"], r["family"], r["validation"], r["max_epochs"], r["seed"]) for r in done}
    todo = [j for j in jobs(args) if _key(j) not in seen]
    todo.sort(key=lambda j: j.epochs)  # the default budget first: a cut-short run still answers agreement
    print(f"small_data: {len(todo)} seeds to train ({len(seen)} already done)", file=sys.stderr, flush=True)

    def keep(job: Any, out: dict[str, Any]) -> None:
        with log.open("a") as f:
            f.write(json.dumps({**out, "dataset": job.dataset, "family": job.family, "validation": job.validation,
                                "max_epochs": job.epochs}) + "\n")

    run_jobs(todo, args.workers, on_result=keep)
    done = [json.loads(line) for line in log.read_text().splitlines()]
    final = load_params(args.root / "params.yaml").final
    m = machine_info("cpu", 1)
    meta = {"budget": f"final.epochs {final.epochs}, patience {final.patience}, min_steps {final.min_steps}",
            "half": args.seeds // 2, "factor": args.factor, "long": args.long_seeds, "date": m["date"],
            "machine": f"{m['cpu']}, {m['cores']} cores, {args.workers} workers x 1 torch thread",
            "wall": time.perf_counter() - start}
    rows = summarise(done, args)
    (args.out / "small_data.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    markdown = render(rows, meta)
    (args.out / "small_data.md").write_text(markdown)
    print(markdown)
    return rows


if __name__ == "__main__":
    from benchmarks.budget.small_data import main as _main  # the module's own name, so spawned workers find train_seed

    _main()
