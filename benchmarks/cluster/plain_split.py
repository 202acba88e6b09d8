"""The plain loop's side of a trial timeline: the same trials a kept cluster run searched, replayed
one after another in one spawned process (1 torch thread), their seconds split as
`trial_timeline.py` splits the ctsweep path's: training (`epoch_seconds`, train_epoch only),
validation (the rest of each `run_epoch`) and set-up (the rest of each trial: its trainer built).

    .venv/bin/python -m benchmarks.cluster.run --workers 1 --throughput-workers 1 --keep --work DIR --out OUT
    .venv/bin/python -m benchmarks.cluster.trial_timeline sqlite:///DIR/ctsweep-0/mlflow.db
    .venv/bin/python -m benchmarks.cluster.plain_split OUT/cluster.json DIR

Together they say whether the ctsweep path's extra seconds are inside the epochs (training slower
in a Tune trial process) or around them (set-up, logging, reports, hand-overs). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def replay(jobs: list[Any]) -> dict[str, float]:
    """Train `jobs` (benchmarks.cluster.run.TrialJob) in turn, each for its reported epochs (a time-limited
    trial's dropped part epoch is not trained: only whole epochs are split); seconds by part, summed."""
    import torch

    from benchmarks.cluster.run import build_trainer
    from pipeline.training.loop import TimeLimitReached

    torch.set_num_threads(1)
    parts = {"setup": 0.0, "training": 0.0, "validation": 0.0, "epochs": 0}
    for job in jobs:
        start = time.perf_counter()
        trainer = build_trainer(job)
        parts["setup"] += time.perf_counter() - start
        deadline = time.monotonic() + job.time_limit_s if job.time_limit_s else None  # run_trial's clock
        try:
            while trainer.epoch < job.epochs:
                before = time.perf_counter()
                metrics = trainer.run_epoch(deadline)
                parts["training"] += metrics["epoch_seconds"]
                parts["validation"] += time.perf_counter() - before - metrics["epoch_seconds"]
                parts["epochs"] += 1
        except TimeLimitReached:
            pass
    return parts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="benchmarks.cluster.plain_split", description=__doc__.split("\n\n")[0])
    ap.add_argument("cluster_json", type=Path, help="the kept run's cluster.json (its first repeat is replayed)")
    ap.add_argument("work", type=Path, help="the kept run's --work folder (DIR/ctsweep-0/data/processed)")
    args = ap.parse_args(argv)
    from benchmarks.cluster.run import plan_replay
    from pipeline.config import SearchParams

    run = json.loads(args.cluster_json.read_text())
    p = SearchParams(**run["workload"]["search"])
    jobs = [job for search in run["overhead"][0]["ctsweep"]["searches"] if search["status"] == "ok"
            for job in plan_replay(search, args.work / "ctsweep-0" / "data" / "processed" / search["dataset"], p)]
    with mp.get_context("spawn").Pool(1) as pool:  # a fresh interpreter, as the plain loop's workers
        pool.apply(replay, (jobs[:1],))  # first uses (imports, the first optimizer) out of the figures
        parts = pool.apply(replay, (jobs,))
    result = {"trials": len(jobs), **parts, "in_trials_s": parts["setup"] + parts["training"] + parts["validation"]}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
