"""The cluster-fill benchmark's report (benchmarks/fill/run.py writes it as fill.md): the workload,
then per mode the fill, what the busy time was, and where the idle slot time went; the modes
over several datasets (benchmarks/fill/datasets.py) add their own tables."""

from __future__ import annotations

from typing import Any


def _s(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(report: dict[str, Any]) -> str:
    """The report as Markdown (benchmarks/results/fill.md)."""
    m, w = report["machine"], report["workload"]
    lines = [
        "# Cluster fill: busy trial slots, one search after another against all at once", "",
        *(["**QUICK SMOKE RUN: not a measurement.**", ""] if report["quick"] else []),
        f"{m['date']} · {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB · Ray {m['ray']} · Optuna "
        f"{m['optuna']} · MLflow {m['mlflow']} · Python {m['python']} · commit {m.get('git_commit')} · "
        f"total {report['total_seconds']:.0f} s · load average (1 min) at start, end: {m['load_average']}", "",
        f"A local Ray head declaring {w['slots']} logical CPUs (trials ask cpu 1: {w['slots']} slots). "
        f"{len(w['families'])} families x {w['num_samples']} trials, epochs {w['epochs']} (ASHA grace "
        f"{w['grace_period']}, reduction {w['reduction_factor']:g}), max_concurrent {w['max_concurrent']} per "
        f"family, round_size {w.get('round_size', 'none: before rounds')}, rounds_in_flight "
        f"{w.get('rounds_in_flight', 1)}, n_startup_trials "
        f"{w['n_startup_trials']}. Trials sleep instead of training: per-epoch "
        f"median per family {w['medians']} s (lognormal around {w['epoch_s']} s, log-sd {w['family_sigma']}, "
        f"clipped to [{w['epoch_min_s']}, {w['epoch_max_s']}]), times a per-trial lognormal factor (log-sd "
        f"{w['trial_sigma']}) and a per-epoch one (log-sd {w['epoch_sigma']}). Ray's worker processes "
        + ("imported what a trial imports before the clock started (warm workers)." if w.get("warm_workers")
           else "were started, not warmed, before the clock started."), "",
        "Fill = busy trial time / (slots x wall); busy = trial function entry to exit; wall = first search "
        "call to last return (Ray start-up excluded). Fill after start-up: the same from the first trial's "
        "start, leaving out the trial processes' start (here all of them import on this machine's cores at "
        "once; a cluster starts each on its own core).", "",
    ]
    rows = [r for r in report["modes"] if "datasets" not in r]  # the one-dataset modes
    if rows:
        lines += _tables(rows, w)
    if len(rows) < len(report["modes"]):  # several datasets: their own tables
        lines += dataset_lines(report)
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


# How the fill tables name each mode's stores (fill.run_mode's `stores`).
STORES = {"sqlite_stores": ", MLflow and Optuna in SQLite files",
          "postgres_stores": ", MLflow through `mlflow server` on PostgreSQL, Optuna on PostgreSQL"}


def after_start_up(row: dict[str, Any], slots: int) -> float | None:
    """Busy time / (slots x the wall from the first trial's start to the last return); None
    without a first trial."""
    first = row.get("first_trial_s")
    return None if first is None or row["wall_s"] <= first else row["busy_s"] / (slots * (row["wall_s"] - first))


def _tables(rows: list[dict[str, Any]], w: dict[str, Any]) -> list[str]:
    """The one-dataset modes' tables: fill, what the busy time was, where the idle time went (per
    process and over the run's phases)."""
    lines = ["| mode | driver | wall (s) | busy (s) | fill | fill after start-up | trials | stopped by ASHA | failed "
             "| epochs | load avg start, end |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        driver = "`search()` per family, in turn" if r["sequential"] else "one `search_many()`"
        driver += "".join(f", {k}={v}" for k, v in r.get("environment", {}).items())
        driver += STORES.get(r.get("stores", "sqlite_stores"), "")
        lines.append(f"| {r['mode']} | {driver} | {r['wall_s']:.1f} | {r['busy_s']:.0f} | **{r['fill']:.3f}** | "
                     f"{_s(after_start_up(r, w['slots']), 3)} | {r['n_trials']}/{r['expected_trials']} | {r['asha_stopped']} | {r['n_failed']} | "
                     f"{r['epochs']} | {r['load_average'][0]}, {r['load_average'][1]} |")
    lines += [
        "", "What the busy time was, and how the slots came into use. Work fill counts the sleeps only (the "
        "'training'); report wait is time blocked in `tune.report` until the driver asks for the next epoch; "
        "MLflow is the trial's own run creation and metric logging. Trial processes: distinct processes that "
        "ran a trial (Tune reuses them); new process every: median spacing of their first trials; reuse gap: "
        "median time between one trial's end and the next one's start in the same process; Ray worker processes "
        f"started: by the Ray instance, {w['slots']} of them at its start-up.", "",
        "| mode | work fill | sleep (s) | report wait (s) | MLflow (s) | first trial at (s) | all slots busy at (s) "
        "| after last trial (s) | peak running | families at once | trial processes | Ray worker processes started "
        "| new process every (s) | reuse gap (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        full = "never" if r["all_slots_busy_s"] is None else f"{r['all_slots_busy_s']:.1f}"
        lines.append(f"| {r['mode']} | {r['work_fill']:.3f} | {r['sleep_s']:.0f} | {r['report_s']:.0f} | "
                     f"{r['mlflow_s']:.0f} | {r['first_trial_s']:.1f} | {full} | {r['after_last_trial_s']:.1f} | "
                     f"{r['peak_running']} | {r['families_at_once']} | {r['trial_processes']} | "
                     f"{r.get('worker_processes_started')} | {_s(r['new_process_spacing_median_s'])} | "
                     f"{_s(r['reuse_gap_median_s'], 2)} |")
    lines += ["", "Idle slot time (slots x wall - busy), counted per trial process: before each process's first "
              "trial (start-up), between its trials, after its last trial (drain), and slots no process took. Where Tune "
              "stopped processes while no trial was ready and started others later (more trial processes than "
              "slots), their times overlap and the shares can sum past 100 %: the phase table below does not.", "",
              "| mode | idle (slot-s) | start-up | between trials | drain | unused slots |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        idle, parts = w["slots"] * r["wall_s"] - r["busy_s"], r.get("idle_slot_s") or {}
        share = {k: f"{v:.0f} ({v / idle:.0%})" if idle > 0 else "–" for k, v in parts.items()}
        lines.append(f"| {r['mode']} | {idle:.0f} | {share.get('start_up', '–')} | {share.get('between', '–')} | "
                     f"{share.get('drain', '–')} | {share.get('unused', '–')} |")
    if any(r.get("idle_phase_s") for r in rows):
        lines += ["", "The same idle time over the run's phases (the concurrency timeline, whichever process ran "
                  "what): before the first trial started; from then to the last trial's start, trials still to "
                  "come but none ready (every family's round or live-trial cap full: a round's next trials wait "
                  "for its slowest to end); after the last start (the end of the work). Mean running: trials "
                  "running, time-weighted, between the first and the last start.", "",
                  "| mode | idle (slot-s) | before the first trial | waiting for trials | after the last start "
                  "| mean running |", "|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            idle, parts = w["slots"] * r["wall_s"] - r["busy_s"], r.get("idle_phase_s") or {}
            share = {k: f"{v:.0f} ({v / idle:.0%})" if idle > 0 else "–" for k, v in parts.items()}
            lines.append(f"| {r['mode']} | {idle:.0f} | {share.get('before_first', '–')} | "
                         f"{share.get('waiting', '–')} | {share.get('after_last', '–')} | "
                         f"{_s(r.get('running_while_waiting'))} |")
    return lines


def dataset_lines(report: dict[str, Any]) -> list[str]:
    """The dataset modes' part of fill.md."""
    rows = [r for r in report["modes"] if "datasets" in r]
    w, names, families = report["workload"], rows[0]["datasets"], rows[0]["families"]
    slots = w["slots"]
    lines = [
        "## Several datasets: one dataset after another against one run for all", "",
        f"{len(names)} alike XOR datasets ({', '.join(names)}), each searched over the first {len(families)} "
        f"families above ({', '.join(families)}) x {w['num_samples']} trials: {len(names) * len(families)} "
        f"searches, {len(names) * len(families) * w['num_samples']} trials, the settings, sleeps and scores "
        "above (keyed by family: every dataset's family sleeps alike). datasets-serial: `search_many()` per "
        "dataset, one after another (each dataset's search stage in turn, each holding all its families); "
        "datasets-shared: one `search_datasets()` over every dataset (one Ray Tune run, `search.share_datasets`). "
        "Both with the driver's own pending-trial limit, each in its own project, MLflow store and Ray.", "",
        "| mode | driver | wall (s) | busy (s) | fill | trials | failed | peak running | datasets at once "
        "| load avg start, end |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        driver = "`search_many()` per dataset, in turn" if r["sequential"] else "one `search_datasets()`"
        lines.append(f"| {r['mode']} | {driver} | {r['wall_s']:.1f} | {r['busy_s']:.0f} | **{r['fill']:.3f}** | "
                     f"{r['n_trials']}/{r['expected_trials']} | {r['n_failed']} | {r['peak_running']} | "
                     f"{r['datasets_at_once']} | {r['load_average'][0]}, {r['load_average'][1]} |")
    ratio = report.get("several_datasets", {}).get("shared_over_serial")
    if ratio:
        lines += ["", f"**datasets-shared / datasets-serial: fill x{ratio['fill']:.2f}, wall x{ratio['wall']:.2f}.**"]
    lines += ["", "Idle slot time (slots x wall - busy), counted per search call and trial process as above: "
              "start-up, between trials, drain (after each process's last trial until its call returns: the "
              "slots draining at the end of each dataset when one follows another), slots no process took "
              "during a call, and between calls (all slots, from one return to the next call).", "",
              "| mode | idle (slot-s) | start-up | between trials | drain | unused slots | between calls |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        idle, parts = slots * r["wall_s"] - r["busy_s"], r["idle_slot_s"]
        share = {k: f"{v:.0f} ({v / idle:.0%})" if idle > 0 else "–" for k, v in parts.items()}
        lines.append(f"| {r['mode']} | {idle:.0f} | {share['start_up']} | {share['between']} | {share['drain']} | "
                     f"{share['unused']} | {share['between_calls']} |")
    lines += ["", "Per dataset: trials, first trial start and last trial end (s from the first call), and in "
              "the serial mode its call's wall and the fill of the slots during it.", "",
              "| mode | dataset | trials | first trial at (s) | last trial ended at (s) | call wall (s) | call fill |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for d in r["per_dataset"]:
            lines.append(f"| {r['mode']} | {d['dataset']} | {d['trials']} | {_s(d['first_trial_s'])} | "
                         f"{_s(d['last_trial_end_s'])} | {_s(d.get('call_wall_s'))} | "
                         f"{_s(d.get('call_fill'), 3)} |")
    lines += ["", "Trials running, sampled every step from the first call (of the slots):", ""]
    for r in rows:
        lines.append(f"- {r['mode']}, every {r['timeline_step_s']:.1f} s: `{' '.join(map(str, r['timeline']))}`")
    return lines
