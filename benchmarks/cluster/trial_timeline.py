"""Where a one-slot search's time goes trial by trial, read from the MLflow store a kept cluster run
left (`benchmarks.cluster.run --workers 1 --keep --work DIR`: DIR/ctsweep-0/mlflow.db).

    .venv/bin/python -m benchmarks.cluster.trial_timeline sqlite:///DIR/ctsweep-0/mlflow.db

For each search trial's run, in the order they started: *setup* (the run's start to the end of its
first epoch, less that epoch's training), *training* (its epochs' `epoch_seconds`: train_epoch only),
*between epochs* (the first epoch's end to the last's, less the later epochs' training: validation,
the MLflow write and the report to Tune) and the *hand-over* (the previous trial's last epoch to this
run's start: Tune ending one trial and starting the next on the slot, Optuna's ask, the MLflow run's
creation). An epoch's timestamp is when its metrics were logged, right after it. Runs end when the
driver closes them after the search, so their end times say nothing here and are not used.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

PARTS = ("setup", "training", "between_epochs", "hand_over")


def timeline(client: Any, experiment_ids: list[str]) -> list[dict[str, Any]]:
    """One row per search trial run that logged an epoch, in start order; seconds per PARTS."""
    runs = client.search_runs(experiment_ids, "tags.stage = 'search' and tags.run_level = 'child'",
                              max_results=50_000)
    rows, previous_end = [], None
    for run in sorted(runs, key=lambda r: r.info.start_time):
        epochs = sorted(client.get_metric_history(run.info.run_id, "epoch_seconds"), key=lambda m: m.step)
        if not epochs:
            continue
        first, last = epochs[0].timestamp / 1000, epochs[-1].timestamp / 1000
        start = run.info.start_time / 1000
        rows.append({"run": run.info.run_name, "epochs": len(epochs),
                     "setup": first - start - epochs[0].value,
                     "training": sum(m.value for m in epochs),
                     "between_epochs": last - first - sum(m.value for m in epochs[1:]),
                     "hand_over": 0.0 if previous_end is None else start - previous_end})
        previous_end = last
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The parts summed over the trials, their total, and per trial and per epoch where that reads better."""
    totals = {part: sum(r[part] for r in rows) for part in PARTS}
    epochs = sum(r["epochs"] for r in rows)
    return {"trials": len(rows), "epochs": epochs, "seconds": totals, "in_trials_s": sum(totals.values()),
            "hand_over_per_trial_s": totals["hand_over"] / max(1, len(rows) - 1),
            "setup_per_trial_s": totals["setup"] / max(1, len(rows)),
            "between_epochs_per_epoch_s": totals["between_epochs"] / max(1, epochs)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="benchmarks.cluster.trial_timeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("tracking_uri", help="the kept run's MLflow store, e.g. sqlite:///DIR/ctsweep-0/mlflow.db")
    args = ap.parse_args(argv)
    from mlflow import MlflowClient  # late: --help needs no MLflow

    client = MlflowClient(args.tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    rows = timeline(client, experiments)
    result = summary(rows)
    for r in rows:
        print(f"{r['run']:32s} {r['epochs']:3d} epochs " + " ".join(f"{p} {r[p]:6.2f}" for p in PARTS))
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
