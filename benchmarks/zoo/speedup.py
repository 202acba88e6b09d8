"""Speed-up benchmark: seconds per training epoch of chosen families at their reference
configurations, this working tree against an earlier commit, measured in one run.

    python -m benchmarks.zoo.speedup --before <commit> --families ode_rnn_tw,latent_ode_tw

The earlier commit is checked out into a temporary `git worktree`; every measurement is the
model-zoo benchmark's job (benchmarks/zoo/measure.py: synthetic irregular data, one torch thread,
warm-up epochs untimed, median of the timed ones) run in a fresh interpreter whose PYTHONPATH
is that tree, with the same job (the current reference configuration and data) for both. This
tree is measured twice: as it runs (`after`) and with `CTSWEEP_MALLOC=system` (`after_system`:
glibc's malloc as the earlier tree has it, pipeline/runtime/allocator.py), so the code's share of the
speed-up and the allocator's are told apart. The sides alternate `--repeats` times so that a
noisy stretch of a shared machine hits all; each side's figure is the median over its repeats
and the ratios are before / after and before / after_system.
Writes benchmarks/results/speedup.{json,md} (`--name` for another name).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.zoo import run as zoo
from benchmarks.zoo.measure import Job

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 30.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.zoo.speedup", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="the commit to compare against (any git revision)")
    p.add_argument("--families", required=True, help="comma-separated registry names")
    p.add_argument("--repeats", type=int, default=3, help="alternating measurements per tree")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per measurement")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--sequences", type=int, default=256)
    p.add_argument("--length", type=int, default=50)
    p.add_argument("--channels", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="0: each family's own (its reference or fixed one)")
    p.add_argument("--name", default="speedup", help="the result files' name: <out>/<name>.{json,md}")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds per measurement")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.epochs < 1:
        p.error("--repeats and --epochs must be >= 1")
    return args


def job_for(args: argparse.Namespace, family: str) -> Job:
    """The model-zoo job of `family`'s current reference configuration, one thread, on CPU."""
    zoo_args = zoo.parse_args(["--families", family, "--epochs", str(args.epochs), "--warmup", str(args.warmup),
                               "--sequences", str(args.sequences), "--length", str(args.length),
                               "--channels", str(args.channels), "--time-limit", str(args.time_limit),
                               "--batch-size", str(args.batch_size)])
    return zoo.make_job(zoo_args, family)


# side -> (tree: "before" or "after", extra environment)
SIDES = {"before": ("before", {}), "after_system": ("after", {"CTSWEEP_MALLOC": "system"}), "after": ("after", {})}


def measure_module(tree: Path) -> str:
    """`tree`'s measurement module: benchmarks.zoo.measure, or benchmarks.measure in a commit from
    before benchmarks/ had folders by concept."""
    return "benchmarks.zoo.measure" if (tree / "benchmarks" / "zoo" / "measure.py").exists() else "benchmarks.measure"


def run_in(tree: Path, job: Job, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """One measurement with `tree`'s code (its measurement module and pipeline)."""
    env = {**os.environ, "PYTHONPATH": str(tree), **(extra_env or {})}
    try:
        proc = subprocess.run([sys.executable, "-m", measure_module(tree), json.dumps(asdict(job))], cwd=tree,
                              env=env, capture_output=True, text=True, timeout=job.time_limit + GRACE_S)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"status": "error", "error": " | ".join(proc.stderr.strip().splitlines()[-3:])}


def compare(args: argparse.Namespace, before: Path, family: str) -> dict[str, Any]:
    """{family, config, seconds per side, medians, ratios}: the sides alternate per repeat."""
    job = job_for(args, family)
    runs: dict[str, list[float]] = {side: [] for side in SIDES}
    malloc: dict[str, set[str]] = {side: set() for side in SIDES}  # as each side's measure reports it
    errors = []
    for _ in range(args.repeats):
        for side, (which, extra) in SIDES.items():
            result = run_in(before if which == "before" else ROOT, job, extra)
            if result.get("status") == "ok":
                runs[side].append(result["seconds_per_epoch"])
                malloc[side].add(result.get("malloc") or "system")  # an earlier measure.py does not say: glibc's
            else:
                errors.append(f"{side}: {result.get('status')} {result.get('error', '')}".strip())
            print(f"  {family} {side}: {result.get('seconds_per_epoch') or result.get('status')}", file=sys.stderr,
                  flush=True)
    medians = {side: statistics.median(v) if v else None for side, v in runs.items()}
    ok = all(medians.values())
    return {"family": family, "model_kwargs": job.model_kwargs, "batch_size": job.settings["batch_size"],
            **{f"{side}_s": runs[side] for side in SIDES}, **{f"{side}_median_s": medians[side] for side in SIDES},
            "ratio": medians["before"] / medians["after"] if ok else None,
            "code_ratio": medians["before"] / medians["after_system"] if ok else None,
            "malloc": {side: sorted(modes) for side, modes in malloc.items()}, "errors": errors}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Seconds per training epoch, commit {report['before']} (before) against {report['after']} (after), "
             f"reference configurations, {report['data']}, one torch thread; medians of {report['repeats']} "
             f"alternating measurements; after (system malloc): this tree with CTSWEEP_MALLOC=system. "
             f"{report['date']} · {report['machine']}", "",
             "| family | before (s / epoch) | after, system malloc | after | speed-up (code) | speed-up |",
             "|---|---|---|---|---|---|"]
    for row in report["rows"]:
        b, m, a = row["before_median_s"], row["after_system_median_s"], row["after_median_s"]
        lines.append(f"| {row['family']} | {b:.3f} | {m:.3f} | {a:.3f} | {row['code_ratio']:.2f}x | {row['ratio']:.2f}x |"
                     if row["ratio"] else f"| {row['family']} | {b} | {m} | {a} | — | — ({'; '.join(row['errors'])}) |")
    return "\n".join(lines) + "\n"


def _git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    before_rev = _git("rev-parse", "--short", args.before)
    with tempfile.TemporaryDirectory(prefix="ctsweep-before-") as folder:
        tree = Path(folder) / "tree"
        _git("worktree", "add", "--detach", "--quiet", str(tree), before_rev)
        try:
            rows = [compare(args, tree, family) for family in args.families.split(",") if family]
        finally:
            _git("worktree", "remove", "--force", str(tree))
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    report = {"before": before_rev, "after": _git("rev-parse", "--short", "HEAD") + dirty, "repeats": args.repeats,
              "data": f"{args.sequences} synthetic sequences of length {args.length} x {args.channels} channels, "
                      f"batches of {args.batch_size or 'each family' + chr(39) + 's own size'}",
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": zoo.machine_info("cpu", 1).get("cpu", ""), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / f"{args.name}.md").write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()
