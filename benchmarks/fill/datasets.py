"""Cluster fill over several datasets: one dataset's searches after another against one run for all.

    .venv/bin/python -m benchmarks.fill.run --modes datasets-serial,datasets-shared [--quick] [--out DIR]

The modes of the cluster-fill benchmark that search several datasets (benchmarks/fill/run.py's `main`
runs them, benchmarks/fill/report.py's `dataset_lines` tables them), with the same synthetic trial, workload settings, seeds and local
32-slot Ray:

- datasets-serial: `search_many()` per dataset, one dataset after another, each over all its
  families (what `dvc repro` ran before `search.share_datasets`: each dataset's stage in turn);
- datasets-shared: one `search_datasets()` over every dataset at once (one Ray Tune run; each
  (dataset, family) keeps its own study, rungs, parent run and result file).

The datasets are alike tiny XOR sets (xor_fill_0, ...), each searched over the first families of
the one-dataset workload; the trials' sleeps and scores are keyed by family and config, not by
dataset, so every dataset's families get the workload figures the one-dataset modes give them.
Fill = summed busy time / (slots x wall), wall from the first search call to the last return.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.cluster.run import local_tracking
from benchmarks.fill import workload as fill

MODES = {"datasets-serial": "serial", "datasets-shared": "shared"}

# Four datasets of six families each: a dataset holds 6 x max_concurrent 4 = 24 live trials at most,
# fewer than 32 slots (as the project's own 6 families x 2 per dataset are), and 96 trials, so
# one after another the slots drain at the end of every dataset. Both modes together should take
# about 10 to 15 minutes on this 2-core machine (the serial mode pays the trial processes' start-up
# once per dataset).
DATASETS = tuple(f"xor_fill_{i}" for i in range(4))
N_FAMILIES = 6
# --quick: 2 datasets x 1 family x 4 trials on 2 slots (max_concurrent 1 = 1 live per dataset: the
# slots are full only when both datasets run at once).
QUICK_DATASETS = DATASETS[:2]
QUICK_FAMILIES = 1


def setup(base: fill.Workload, quick: bool) -> tuple[fill.Workload, tuple[str, ...]]:
    """The workload of the dataset modes and their datasets: `base` (fill.Workload or fill.QUICK)
    cut to its first families. A prefix, so each family's seeded median and best learning rate are
    those of the one-dataset modes (Workload.medians draws them in order)."""
    n = QUICK_FAMILIES if quick else N_FAMILIES
    return replace(base, families=base.families[:n]), QUICK_DATASETS if quick else DATASETS


def run_mode(work: Path, label: str, base: fill.Workload, quick: bool) -> dict[str, Any]:
    """One dataset mode (MODES) in its own project and Ray: every search through the real driver, timed."""
    from pipeline.stores import tracking
    from pipeline.sweep.search import search_datasets, search_many

    workload, datasets = setup(base, quick)
    shared = MODES[label] == "shared"
    families = list(workload.families)
    root = fill.new_project(work, label, workload, datasets)
    p = workload.params()
    load_start = fill.load_average()
    with local_tracking(), fill.local_ray(workload.slots) as ray_startup_s:
        for name in datasets:  # the stores, created before the clock starts (as fill.run_mode)
            tracking.experiment_id(root, name)
        calls: list[dict[str, Any]] = []
        t0 = time.time()
        if shared:
            records = search_datasets(root, list(datasets), families, p, trial_fn=fill.synthetic_trial)
        else:
            records = {}
            for name in datasets:
                begin = time.time()
                records[name] = search_many(root, name, families, p, trial_fn=fill.synthetic_trial)
                calls.append({"dataset": name, "start": begin - t0, "end": time.time() - t0})
        t1 = time.time()
        workers = fill.worker_processes_started()
    busy = [json.loads(f.read_text()) for f in sorted((root / fill.BUSY_DIR).glob("*.json"))]
    out = {"mode": label, "sequential": not shared, "datasets": list(datasets), "families": families,
           "environment": {}, "ray_startup_s": ray_startup_s, "calls": calls, "worker_processes_started": workers,
           "load_average": [load_start, fill.load_average()],
           **summarise(busy, records, t0, t1, workload, calls)}
    print(f"  {label}: wall {out['wall_s']:.1f} s, fill {out['fill']:.3f}, {out['n_trials']} trials",
          file=sys.stderr, flush=True)
    return out


def summarise(busy: list[dict[str, Any]], records: dict[str, dict[str, dict[str, Any]]], t0: float, t1: float,
              workload: fill.Workload, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """fill.summarise over the (dataset, family) units ("<dataset>/<family>", as inside the run),
    its idle slot time counted per search call (`calls`: the serial mode's, relative to t0; none:
    one call), the datasets running at once and each dataset's share."""
    units = [{**b, "family": f"{b['dataset']}/{b['family']}"} for b in busy]
    flat = {f"{d}/{f}": r for d, by_family in records.items() for f, r in by_family.items()}
    out = fill.summarise(units, flat, t0, t1, replace(workload, families=tuple(flat)))
    windows = [(t0 + c["start"], t0 + c["end"]) for c in calls] or [(t0, t1)]
    out["idle_slot_s"] = idle_by_call(busy, windows, t0, t1, workload.slots)
    by_dataset = [{**b, "family": b["dataset"]} for b in busy]
    out["datasets_at_once"] = fill.families_at_once(by_dataset)
    out["dataset_switches"] = fill.family_switches(by_dataset)
    out["per_dataset"] = []
    for name in records:
        mine = [b for b in busy if b["dataset"] == name]
        row: dict[str, Any] = {"dataset": name, "trials": len(mine),
                               "busy_s": sum(min(b["end"], t1) - max(b["start"], t0) for b in mine),
                               "first_trial_s": min((b["start"] - t0 for b in mine), default=None),
                               "last_trial_end_s": max((b["end"] - t0 for b in mine), default=None)}
        call = next((c for c in calls if c["dataset"] == name), None)
        if call is not None:  # its own search call: its wall and the fill of the slots during it
            row["call_wall_s"] = call["end"] - call["start"]
            row["call_fill"] = row["busy_s"] / (workload.slots * row["call_wall_s"])
        out["per_dataset"].append(row)
    return out


def idle_by_call(busy: list[dict[str, Any]], windows: list[tuple[float, float]], t0: float, t1: float,
                 slots: int) -> dict[str, float]:
    """fill.idle_slot_time within each search call's window (start, end; absolute), summed, with
    the trials of the call that started them (a call's trial processes end with its Tune run), and
    `between_calls`: all slots idle outside every window (the driver between one return and the
    next call). One window for the whole wall gives fill.summarise's own split."""
    out = {"start_up": 0.0, "between": 0.0, "drain": 0.0, "unused": 0.0}
    for start, end in windows:
        by_pid: dict[int, list[dict[str, Any]]] = {}
        for b in busy:
            if start <= b["start"] < end:
                by_pid.setdefault(b["pid"], []).append(b)
        for key, value in fill.idle_slot_time(by_pid, start, end, slots).items():
            out[key] += value
    outside = (t1 - t0) - sum(end - start for start, end in windows)
    out["between_calls"] = max(0.0, outside) * slots
    return out


def report_fields(results: list[dict[str, Any]]) -> dict[str, Any]:
    """What fill.json says about the dataset modes as a whole: their datasets, families and the
    ratio shared / serial of fill and wall (when both ran); {} when none ran."""
    rows = {r["mode"]: r for r in results if "datasets" in r}
    if not rows:
        return {}
    first = next(iter(rows.values()))
    out: dict[str, Any] = {"datasets": first["datasets"], "families": first["families"]}
    if "datasets-serial" in rows and "datasets-shared" in rows:
        serial, shared = rows["datasets-serial"], rows["datasets-shared"]
        out["shared_over_serial"] = {"fill": shared["fill"] / serial["fill"],
                                     "wall": shared["wall_s"] / serial["wall_s"]}
    return {"several_datasets": out}
