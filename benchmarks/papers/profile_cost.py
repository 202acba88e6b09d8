"""What a paper profile's final stage costs on this machine: seconds per epoch of each (dataset,
family) at the paper's configuration, on one core, and the core-hours of its seeds.

    .venv/bin/python -m benchmarks.papers.profile_cost --root PROJECT --profile cfc-walker2d \
        [--profile cdrnde] [--datasets walker2d] [--families cfc,ltc] [--budget-s 60] [--out DIR]

PROJECT holds the prepared datasets (`ctsweep prepare <dataset>` there). Each (dataset, family)
is measured in a process of its own with one torch thread: the configuration the profile's
search records and its final stage trains (the space's reference for the dataset with the
profile's `search.fixed` over it, made causal for a per-step task, as pipeline/sweep/plans.py
plans it), the final stage's epoch (`final.min_steps`), its training batches timed for
`--budget-s` seconds after one untimed warm-up batch, then one full validation pass. An epoch is
the mean batch time times the batches of an epoch, plus the validation pass; a table row costs
seeds x the family's epochs (`final.family_epochs`) x that. Writes profile_cost.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report


def final_trainer(root: Path, profile: str, dataset: str, family: str, seed: int = 0,
                  overrides: dict[str, Any] | None = None):
    """(Trainer, config, the profile's final settings for the cell): the configuration the
    profile's search records and its final stage trains (the space's reference for the dataset with
    the profile's `search.fixed` over it, made causal for a per-step task, as
    pipeline/sweep/plans.py plans it), `overrides` over that, at the final stage's epochs and
    `min_steps`, seeded as the final stage seeds seed `seed`."""
    from pipeline import profiles
    from pipeline.data.contract import load_dataset
    from pipeline.spaces import causal_space, fix_values, load_space, space_path, split_config
    from pipeline.training.loop import Trainer, TrainSettings

    _, params = profiles.load(profile, root / "params.yaml")
    final = params.final.for_cell(dataset, family)
    data = load_dataset(root / "data" / "processed" / dataset)
    space = load_space(space_path(root, family), family).for_dataset(dataset)
    space, _ = fix_values(space, params.search.fixed.get(family, {}))
    if data.meta.per_step:
        space, _ = causal_space(space, dataset)
    train_cfg, model_cfg = split_config({**space.reference, **space.fixed, **(overrides or {})})
    trainer = Trainer(family, model_cfg, TrainSettings(**train_cfg), data, seed, epochs=final.epochs,
                      min_steps=final.min_steps)
    return trainer, {**train_cfg, **model_cfg}, final


def measure(root: Path, profile: str, dataset: str, family: str, budget_s: float) -> dict[str, Any]:
    """One (dataset, family) in this process: {batches, batch_s, val_s, epoch_s, ...}."""
    import torch

    from pipeline.training.loop import TimeLimitReached

    torch.set_num_threads(1)
    trainer, config, final = final_trainer(root, profile, dataset, family)
    try:  # one warm-up batch (allocations, first-call costs), untimed
        trainer.train_epoch(deadline=time.monotonic())
    except TimeLimitReached:
        pass
    trainer.epoch, before = 0, trainer.steps
    start = time.perf_counter()
    try:
        trainer.train_epoch(deadline=time.monotonic() + budget_s)
    except TimeLimitReached:
        pass
    batch_s = (time.perf_counter() - start) / (trainer.steps - before)
    start = time.perf_counter()
    trainer.evaluate_with_loss("val")
    val_s = time.perf_counter() - start
    per_epoch = trainer.steps_per_epoch
    return {"dataset": dataset, "family": family, "config": config,
            "batches_timed": trainer.steps - before, "batches_per_epoch": per_epoch, "batch_s": batch_s,
            "val_s": val_s, "epoch_s": batch_s * per_epoch + val_s, "epochs": final.epochs,
            "seeds": len(final.seeds)}


def _one(root: Path, profile: str, dataset: str, family: str, budget_s: float) -> dict[str, Any]:
    """measure() in a fresh process (its own memory, one thread); an error is kept, not raised."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.papers.profile_cost", "--one",
                           json.dumps([str(root), profile, dataset, family, budget_s])],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"dataset": dataset, "family": family, "error": tail[:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(root: Path, profile_names: list[str], datasets: list[str] | None, budget_s: float,
        families: list[str] | None = None) -> list[dict[str, Any]]:
    """Every (dataset, family) of the profiles (only `datasets` and `families` where given)."""
    from pipeline import profiles

    rows = []
    for name in profile_names:
        _, params = profiles.load(name, root / "params.yaml")
        for dataset in params.datasets:
            if datasets and dataset not in datasets:
                continue
            for family in params.families:
                if families and family not in families:
                    continue
                row = {"profile": name, **_one(root, name, dataset, family, budget_s)}
                if "epoch_s" in row:
                    row["table_core_h"] = row["epoch_s"] * row["epochs"] * row["seeds"] / 3600
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], machine: str, when: str) -> str:
    lines = [f"# Paper profiles: seconds per epoch on one core ({when}, {machine})", "",
             "| profile | dataset | family | batches/epoch | s/batch (timed) | validation s | s/epoch | epochs | "
             "seeds | core-hours, all seeds |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['profile']} | {r['dataset']} | {r['family']} | failed: {r['error']} ||||||| ")
            continue
        lines.append(f"| {r['profile']} | {r['dataset']} | {r['family']} | {r['batches_per_epoch']} | "
                     f"{r['batch_s']:.3f} ({r['batches_timed']}) | {r['val_s']:.1f} | {r['epoch_s']:.1f} | "
                     f"{r['epochs']} | {r['seeds']} | {r['table_core_h']:.1f} |")
    by_profile: dict[str, list[float]] = {}
    for r in rows:
        if "table_core_h" in r:
            by_profile.setdefault(f"{r['profile']} / {r['dataset']}", []).append(r["table_core_h"])
    lines += [""] + [f"- {k}: {sum(v):.1f} core-hours for every row it has, median row {statistics.median(v):.1f}"
                     for k, v in by_profile.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, help="the project whose data/processed holds the datasets")
    ap.add_argument("--profile", action="append", default=[])
    ap.add_argument("--datasets", default="", help="comma-separated: only these of the profiles' datasets")
    ap.add_argument("--families", default="", help="comma-separated: only these of the profiles' families")
    ap.add_argument("--budget-s", type=float, default=60.0, help="seconds of training batches timed per family")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child: one measurement
    args = ap.parse_args(argv)
    if args.one:
        root, profile, dataset, family, budget_s = json.loads(args.one)
        print(json.dumps(measure(Path(root), profile, dataset, family, float(budget_s))))
        return []
    if args.root is None or not args.profile:
        ap.error("--root and at least one --profile are needed")
    rows = run(args.root.resolve(), args.profile, [d for d in args.datasets.split(",") if d] or None, args.budget_s,
               [f for f in args.families.split(",") if f] or None)
    when = datetime.date.today().isoformat()
    text = render(rows, f"{platform.processor() or platform.machine()}, {_cpu()}", when)
    save_report(args.out, "profile_cost", rows, text)
    print(text)
    return rows


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
