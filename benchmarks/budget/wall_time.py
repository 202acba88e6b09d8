"""What a saturating search costs against the fixed budget it replaces, read from two finished
searches of the same dataset: one with `search.saturation.enabled: false`, one with it on.

    .venv/bin/python -m benchmarks.budget.wall_time --fixed PROJECT [--fixed PROJECT ...] \
        --saturating PROJECT --dataset italy_power_demand [--slots 2] [--label NAME] \
        [--out benchmarks/results/saturation-wall]

Several --fixed runs of the same search (the same trials, run again) average each trial's seconds:
the run-to-run spread of identical work (up to 25 % here) is then measured, not mistaken for a
difference between the budgets. Each PROJECT holds the search's records (results/<dataset>/search/<family>.json) and its MLflow
store. A trial's seconds run from its MLflow run's start to its last logged metric (the run's end
time is set when the search ends, not the trial). Per search:

- trials, trial-epochs and busy seconds per family, and the wall span (first trial's start to the
  last trial's last metric);
- *utilisation*: busy seconds / (slots x span), the share of the slots the search kept busy;
- *at the fixed run's prices* (saturating search only): its trials priced by what the same trial
  took in the fixed runs (same family, trial number and epochs, as the first rounds of both
  searches are the same trials; the mean over the fixed runs), and at that family's mean seconds
  per trial-epoch in the fixed runs for a trial they did not have; against the fixed runs' mean
  busy seconds. Machine speed changes between two runs (the same trials took up to
  28 % longer in one run than in another here); this figure leaves it out and keeps what the
  saturating budget changes: which trials run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report


def trial_times(root: Path, dataset: str) -> list[dict[str, Any]]:
    """Every trial of the dataset's search: {family, number, epochs, start, end, seconds}."""
    from mlflow.tracking import MlflowClient

    from pipeline.stores.paths import search_result_path, tracking_uri

    client = MlflowClient(tracking_uri(root))
    rows = []
    for path in sorted(search_result_path(root, dataset, "x").parent.glob("*.json")):
        record = json.loads(path.read_text())
        for trial in record.get("trials", []):
            run = client.get_run(trial["mlflow_run_id"])
            ends = [m.timestamp for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)]
            start = run.info.start_time / 1000
            end = (max(ends) if ends else run.info.start_time) / 1000
            rows.append({"family": record["family"], "number": trial["number"], "epochs": int(trial["epochs"] or 0),
                         "start": start, "end": end, "seconds": end - start})
    return rows


def summary(trials: list[dict[str, Any]], slots: int) -> dict[str, Any]:
    """Per family {trials, epochs, seconds}, and the search's span, busy seconds and utilisation."""
    families: dict[str, dict[str, float]] = {}
    for t in trials:
        f = families.setdefault(t["family"], {"trials": 0, "epochs": 0, "seconds": 0.0})
        f["trials"] += 1
        f["epochs"] += t["epochs"]
        f["seconds"] += t["seconds"]
    span = max(t["end"] for t in trials) - min(t["start"] for t in trials)
    busy = sum(t["seconds"] for t in trials)
    return {"families": families, "trials": len(trials), "epochs": sum(t["epochs"] for t in trials),
            "span_s": span, "busy_s": busy, "utilisation": busy / (slots * span)}


def at_fixed_prices(saturating: list[dict[str, Any]], fixed_runs: list[list[dict[str, Any]]]) -> float:
    """The saturating search's busy seconds had each of its trials cost what it cost in the fixed runs (their mean)."""
    seen: dict[tuple, list[float]] = {}
    for run in fixed_runs:
        for t in run:
            seen.setdefault((t["family"], t["number"], t["epochs"]), []).append(t["seconds"])
    every = [t for run in fixed_runs for t in run]
    per_epoch = {f: sum(t["seconds"] for t in every if t["family"] == f) / max(1, sum(t["epochs"] for t in every if t["family"] == f))
                 for f in {t["family"] for t in every}}
    mean = statistics.mean(per_epoch.values())
    return sum(statistics.mean(seen[key]) if (key := (t["family"], t["number"], t["epochs"])) in seen
               else t["epochs"] * per_epoch.get(t["family"], mean) for t in saturating)


def compare(fixed_roots: list[Path], saturating_root: Path, dataset: str, slots: int) -> dict[str, Any]:
    fixed_runs = [trial_times(root, dataset) for root in fixed_roots]
    saturating = trial_times(saturating_root, dataset)
    fs, s = [summary(run, slots) for run in fixed_runs], summary(saturating, slots)
    f = {**fs[0], "span_s": statistics.mean(x["span_s"] for x in fs), "busy_s": statistics.mean(x["busy_s"] for x in fs),
         "utilisation": statistics.mean(x["utilisation"] for x in fs), "runs": len(fs),
         "busy_each_s": [x["busy_s"] for x in fs]}
    priced = at_fixed_prices(saturating, fixed_runs)
    return {"dataset": dataset, "slots": slots, "fixed": f, "saturating": s,
            "saturating_busy_at_fixed_prices_s": priced, "ratio_at_fixed_prices": priced / f["busy_s"],
            "ratio_wall": s["span_s"] / f["span_s"]}


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | dataset | fixed: trials, epochs | fixed: wall, busy, utilisation (mean of runs) | saturating: trials per family | "
             "saturating: epochs | saturating: wall, busy, utilisation | saturating at the fixed run's prices |",
             "|---|---|---|---|---|---:|---|---:|"]
    for r in rows:
        f, s = r["fixed"], r["saturating"]
        per = ", ".join(f"{name} {int(v['trials'])}" for name, v in s["families"].items())
        lines.append(f"| {r.get('label', '')} | {r['dataset']} | {f['trials']}, {f['epochs']} | "
                     f"{f['span_s']:.0f} s, {f['busy_s']:.0f} s ({' and '.join(f'{b:.0f}' for b in f.get('busy_each_s', [f['busy_s']]))}), "
                     f"{f['utilisation']:.2f} | {per} | {s['epochs']} | "
                     f"{s['span_s']:.0f} s, {s['busy_s']:.0f} s, {s['utilisation']:.2f} | "
                     f"{r['saturating_busy_at_fixed_prices_s']:.0f} s ({r['ratio_at_fixed_prices']:.3f} x fixed) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="benchmarks.budget.wall_time", description=__doc__.split("\n\n")[0])
    p.add_argument("--fixed", type=Path, action="append", required=True,
                   help="a project whose search ran with saturation off (repeat for runs of the same search)")
    p.add_argument("--saturating", type=Path, required=True, help="the project whose search ran with it on")
    p.add_argument("--dataset", required=True)
    p.add_argument("--slots", type=int, default=2, help="trials the searches ran at once")
    p.add_argument("--label", default="", help="a name for the row (the commit, the pricing)")
    p.add_argument("--out", type=Path, help="append the row to OUT/wall_time.json and write wall_time.md")
    args = p.parse_args(argv)
    row = {"label": args.label, **compare([f.resolve() for f in args.fixed], args.saturating.resolve(), args.dataset,
                                          args.slots)}
    rows = [row]
    if args.out is not None and (args.out / "wall_time.json").exists():
        rows = [r for r in json.loads((args.out / "wall_time.json").read_text())
                if (r.get("label"), r["dataset"]) != (row["label"], row["dataset"])] + [row]
    text = render(rows)
    save_report(args.out, "wall_time", rows, text)
    sys.stdout.write(text)
    return row


if __name__ == "__main__":
    main()
