"""The cluster benchmark's report (benchmarks/cluster/run.py writes it as cluster.md and
cluster.json): the workload, the overhead against a plain loop per repeat and per driver call,
and the throughput of the ctsweep path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# ctsweep's whole run over the plain loop's: the target docs/benchmarks/cluster.md states.
TARGET_RATIO = 1.05


def _s(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def mean_epoch_s(plain: dict[str, Any]) -> float | None:
    """Seconds per epoch of the plain loop's trials (their seconds summed over their epochs)."""
    trials = [t for search in plain["searches"] for t in search["trials"]]
    epochs = sum(t["epochs"] for t in trials)
    return sum(t["seconds"] for t in trials) / epochs if epochs else None


def render(report: dict[str, Any]) -> str:
    """The report as Markdown (benchmarks/results/cluster.md)."""
    m, w, s = report["machine"], report["workload"], report["summary"]
    device = m.get("gpu") or f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB"
    p = w["search"]
    lines = [
        "# Cluster benchmark: pipeline overhead and throughput", "",
        *(["**QUICK SMOKE RUN: not a measurement.**", ""] if report["settings"]["quick"] else []),
        f"{m['date']} · {device} · Ray {m['ray']} · Optuna {m['optuna']} · MLflow {m['mlflow']} (SQLite) · "
        f"torch {m['torch']} · Python {m['python']} · commit {m.get('git_commit')} · total "
        f"{report['total_seconds']:.0f} s · load average (1 min) at start, end: {m['load_average']}", "",
        f"Workload: {', '.join(w['datasets'])} × {', '.join(w['families'])} ({len(w['pairs'])} searches); "
        f"num_samples {p['num_samples']}, epochs {p['epochs']} (ASHA grace {p['asha']['grace_period']}, "
        f"reduction {p['asha']['reduction_factor']:g}), trial_time_limit_s {p['trial_time_limit_s']}, "
        f"resources cpu {p['resources']['cpu']:g}, min_steps {p.get('min_steps', 1)}, round_size "
        f"{p.get('round_size', 1)}, rounds_in_flight {p.get('rounds_in_flight', 1)}, checkpoint_every_s "
        f"{p.get('checkpoint_every_s', 0):g} (0: every epoch), device {report['settings']['device']}. "
        f"Dataset sizes: {w['sizes']}.", "",
        "## Overhead: ctsweep against a plain loop", "",
        ("Driver: one `search` per (dataset, family), one after another (--sequential)."
         if report["settings"].get("sequential") else
         "Driver: one `search_many` per dataset, its families searched at once."), "",
        f"The same trials both ways, {report['settings']['workers']} at a time: ctsweep (Ray Tune + Optuna + "
        "MLflow, one Ray session per run) and a plain loop of `pipeline.training.loop.Trainer` in a pool of "
        "spawned processes (1 torch thread each) replaying each trial's config and reported epochs "
        "(time-limited trials train on to the same limit; failed ones up to their failure). "
        "Whole run = start-up + searches + shutdown; ratio = ctsweep ÷ plain.", "",
        "| repeat | ctsweep (s) | Ray start-up (s) | MLflow store (s) | plain (s) | pool start-up (s) "
        "| trials | epochs (ctsweep / plain) | ratio | ratio, searches only | overhead per trial (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(report["overhead"]):
        c, pl = r["ctsweep"], r["plain"]
        lines.append(f"| {i} | {_s(c['total_s'])} | {_s(c['ray_startup_s'])} | {_s(c['mlflow_store_s'])} | "
                     f"{_s(pl['total_s'])} | {_s(pl['pool_startup_s'])} | {pl['n_trials']} | {c['epochs']} / "
                     f"{pl['epochs']} | {r['ratio']:.3f} | {r['ratio_searches']:.3f} | "
                     f"{_s(r['overhead_per_trial_s'], 2)} |")
    lines += ["", f"Mean epoch of the plain loop (its trials' seconds over their epochs, first repeat): "
              f"{_s(mean_epoch_s(report['overhead'][0]['plain']), 2)} s."]
    lines += ["", f"**Ratio (median of {len(report['overhead'])}): {s['ratio']:.3f}** (target <= {TARGET_RATIO}: "
              f"{'met' if s['ratio'] <= TARGET_RATIO else 'NOT met'}); searches only {s['ratio_searches']:.3f}; "
              f"overhead {s['overhead_per_trial_s']:.2f} s of wall time per trial "
              f"({s['overhead_per_trial_searches_s']:.2f} s without start-ups).", ""]
    mism = [x for r in report["overhead"] for x in r["mismatches"]]
    same = [sum(x) for x in zip(*(r["same_best_val"] for r in report["overhead"]))]
    lines += [f"Replay check: {same[0]} of {same[1]} finished trials scored the same best validation metric "
              f"in both paths; trials whose replay trained other epochs: {len(mism)}"
              + (": " + "; ".join(mism[:10]) if mism else ""), "",
              "Per driver call (first repeat): one per dataset holding every family, or with --sequential one "
              "per (dataset, family):", "",
              "| dataset | families | trials | ctsweep (s) | plain (s) | ratio |",
              "|---|---|---:|---:|---:|---:|"]
    first = report["overhead"][0]
    plain_by = {(u["dataset"], tuple(u["families"])): u for u in first["plain"]["units"]}
    for c in first["ctsweep"]["units"]:
        pl = plain_by.get((c["dataset"], tuple(c["families"])))
        ratio = f"{c['wall_s'] / pl['wall_s']:.2f}" if pl else f"– ({c.get('error', '')[:60]})"
        lines.append(f"| {c['dataset']} | {', '.join(c['families'])} | {c.get('n_trials', 0)} | "
                     f"{_s(c['wall_s'])} | {_s(pl['wall_s']) if pl else '–'} | {ratio} |")
    lines += cpu_lines(first)
    lines += ["", "## Throughput of the ctsweep path", "",
              "Searches only (Ray start-up left out; listed apart). Concurrency changes what ASHA sees "
              "when it decides, so the trials can run different numbers of epochs: epochs per hour "
              "compares work done.", "",
              "| setting | max_concurrent | gpu share | trials | epochs | searches (s) | Ray start-up (s) "
              "| trials / hour | epochs / hour |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in report["throughput"]:
        lines.append(f"| {t['label']} | {t['max_concurrent']} | {t['gpu']:g} | {t['n_trials']} | {t['epochs']} | "
                     f"{_s(t['searches_s'])} | {_s(t['ray_startup_s'])} | {_s(t['trials_per_hour'], 0)} | "
                     f"{_s(t['epochs_per_hour'], 0)} |")
    lines += ["", f"Command: `{report['settings']['command']}`", ""]
    return "\n".join(lines)


def cpu_lines(first: dict[str, Any]) -> list[str]:
    """Where each path's CPU time went (benchmarks/cluster/cpu_account.py), first repeat; none for older reports."""
    c, pl = first["ctsweep"].get("cpu"), first["plain"].get("cpu")
    if not c or not pl:
        return []
    lines = ["", "CPU time by process (first repeat; benchmarks/cluster/cpu_account.py: polled every "
             f"{c['interval_s']:g} s, user + system). *trials*: the processes that ran trials (Tune's trial "
             "actors; the pool's workers); *helpers*: the other processes each path started (Ray's GCS, raylet, "
             "agents, idle workers; the pool's resource tracker); *other*: the rest of the machine.", "",
             "| path | wall (s) | trials (CPU s) | driver (CPU s) | helpers (CPU s) | other (CPU s) "
             "| cores busy, trials / the rest of the run |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, cpu in (("ctsweep", c), ("plain", pl)):
        t = cpu["cpu_s"]
        lines.append(f"| {name} | {_s(cpu['wall_s'])} | {_s(t['trials'])} | {_s(t['driver'])} | {_s(t['helpers'])} | "
                     f"{_s(t['other'])} | {cpu['cores']['trials']:.2f} / "
                     f"{cpu['cores']['driver'] + cpu['cores']['helpers']:.2f} |")
    if pl["cpu_s"]["trials"]:
        extra = c["cpu_s"]["driver"] + c["cpu_s"]["helpers"] - pl["cpu_s"]["driver"] - pl["cpu_s"]["helpers"]
        lines += ["", f"Trial processes' CPU, ctsweep ÷ plain: **{c['cpu_s']['trials'] / pl['cpu_s']['trials']:.3f}** "
                  "(what each trial does beyond training: checkpoints, reports, MLflow writes, Tune's trial "
                  f"wrapper). The driver and helpers took {_s(extra)} CPU-seconds more than the plain loop's: "
                  "with as many trial slots as cores they are taken from the trials; a cluster's head runs "
                  "them on cores no trial uses."]
    return lines


def write_outputs(report: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    markdown = render(report)
    (out / "cluster.md").write_text(markdown)
    return markdown
