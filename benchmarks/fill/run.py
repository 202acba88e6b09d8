"""Cluster-fill benchmark: how much of a 32-slot Ray cluster the search driver keeps busy.

    .venv/bin/python -m benchmarks.fill.run [--quick] [--out DIR] [--modes before,after] [--keep]
    .venv/bin/python -m benchmarks.fill.run --modes datasets-serial,datasets-shared   # several datasets

A local Ray head declares 32 logical CPUs (trials ask `cpu: 1`: 32 trial slots) on whatever
machine this runs on. Trials do not train: `synthetic_trial` does what `pipeline.sweep.trial.
run_trial` does around training (opens its MLflow child run with `trial_run`, logs `val_metric`
every epoch, `tune.report`s it with a small checkpoint) and sleeps for the epoch instead. The
sweep goes through the real driver, two ways, with the same workload and seeds:

- before: `search()` per family, one after another (what `dvc repro` ran before concurrent searches);
- after:  one `search_many()` over every family (one Ray Tune run holding all the searches).

Over several datasets (benchmarks/fill/datasets.py): datasets-serial, `search_many()` per dataset,
one after another; datasets-shared, one `search_datasets()` over every dataset at once.

Each trial writes its busy interval (entry and exit of the trial function, wall clock) to a
file the driver reads afterwards. Fill = summed busy time / (slots x wall), wall from the first
search call to the last return. Writes fill.md and fill.json to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python benchmarks/fill/run.py` as well as `-m benchmarks.fill.run`
    sys.path.insert(0, str(ROOT))

from benchmarks.fill import datasets as fill_datasets  # noqa: E402  (the modes over several datasets)
from benchmarks.fill import stores as fill_stores  # noqa: E402  (the modes over the stores)
from benchmarks.fill.report import render  # noqa: E402  (fill.md: the tables)
from benchmarks.fill.workload import MODES, QUICK, Workload, load_average, machine, run_mode  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the modes (before, after by default); returns the report written to fill.json."""
    known = [*MODES, *fill_datasets.MODES, *fill_stores.MODES]
    ap = argparse.ArgumentParser(prog="benchmarks.fill.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 families x 4 trials on 2 slots")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--modes", default="before,after",
                    help=f"comma-separated, run in this order; of {', '.join(known)}")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (projects, MLflow, busy files)")
    ap.add_argument("--workload", choices=("default", "long"), default="default",
                    help="long: trials of 30 s and more on warm workers (benchmarks/fill/stores.py)")
    ap.add_argument("--round-size", type=int, default=None, help="trials per round of a family's study "
                    "(default: the workload's, 4; 2 on --quick)")
    ap.add_argument("--max-concurrent", type=int, default=None, help="live trials per family at most "
                    "(default: the workload's, 4; 1 on --quick)")
    ap.add_argument("--rounds-in-flight", type=int, default=None, help="rounds of a family's study live at once, "
                    "1 to 8 (search.rounds_in_flight; default: the workload's, 1)")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.replace(" ", "").split(",") if m]
    if not modes or any(m not in known for m in modes):
        ap.error(f"--modes {args.modes!r}: expected names of {', '.join(known)}")
    workload = QUICK if args.quick else fill_stores.LONG if args.workload == "long" else Workload()
    if args.quick and args.workload == "long":  # the smoke run's sizes, the long workload's warm workers
        workload = replace(QUICK, warm_workers=True)
    if args.round_size is not None:
        workload = replace(workload, round_size=args.round_size)
    if args.max_concurrent is not None:
        workload = replace(workload, max_concurrent=args.max_concurrent)
    if args.rounds_in_flight is not None:
        if not 1 <= args.rounds_in_flight <= 8:
            ap.error(f"--rounds-in-flight {args.rounds_in_flight}: allowed 1 to 8")
        workload = replace(workload, rounds_in_flight=args.rounds_in_flight)
    start, load_start = time.perf_counter(), load_average()
    work = Path(tempfile.mkdtemp(prefix="ctsweep-bench-fill-")).resolve()
    try:
        results = [fill_datasets.run_mode(work, mode, workload, args.quick) if mode in fill_datasets.MODES
                   else fill_stores.run_mode(work, mode, workload) if mode in fill_stores.MODES
                   else run_mode(work, mode, workload) for mode in modes]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {"quick": args.quick, "machine": machine(),
              "workload": {**asdict(workload), "medians": workload.medians()}, "search": workload.params().model_dump(),
              "modes": results, **fill_datasets.report_fields(results),
              "total_seconds": time.perf_counter() - start, "work": str(work) if args.keep else None,
              "command": "python -m benchmarks.fill.run " + " ".join(sys.argv[1:] if argv is None else argv)}
    # Other work on the machine slows the driver and the trials' start-up; the load average flags it.
    report["machine"]["load_average"] = [load_start, load_average()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fill.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    markdown = render(report)
    (args.out / "fill.md").write_text(markdown)
    print(markdown)
    return report


if __name__ == "__main__":
    main()
