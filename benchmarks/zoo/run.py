"""Model-zoo benchmark: seconds per training epoch and peak memory of every registered family.

    .venv/bin/python -m benchmarks.zoo.run [--families cfc,ncde] [--device cuda] [--quick]

Each family trains with its paper's reference configuration (search_spaces/<family>.yaml,
`reference` + `fixed`) through pipeline.training.loop.Trainer on one seeded synthetic dataset
(benchmarks/zoo/data.py), each measurement in a process of its own (benchmarks/zoo/measure.py). Two
extra sections: CfC's speed-up over ODE-RNN with fixed-step rk4, and the training memory of
the fast weight programmers with and without the adjoint at two sequence lengths. Writes
zoo.md, zoo.json and zoo.csv to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.zoo.measure import Job
from benchmarks.zoo.render import render_markdown
from pipeline.models import MODELS, get_model_class
from pipeline.models.base import model_arguments
from pipeline.spaces import TRAINING_KEYS, load_space, space_path, split_config

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 30.0  # on top of a job's own limit, before the parent kills it (set-up can hang too)
CSV_FIELDS = ("family", "status", "params", "seconds_per_epoch", "train_mb", "peak_mb",
              "setup_seconds", "batch_size", "error")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.zoo.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="", help="comma-separated registry names (default: all)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs; the median is reported")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs before the timed ones")
    p.add_argument("--time-limit", type=float, default=300.0, help="seconds per family, set-up included")
    p.add_argument("--batch-size", type=int, default=32, help="0: the family's own (reference/fixed)")
    p.add_argument("--sequences", type=int, default=256)
    p.add_argument("--length", type=int, default=50)
    p.add_argument("--channels", type=int, default=12)
    p.add_argument("--adjoint-lengths", default="", help="two lengths for the FWP section (default L,4L)")
    p.add_argument("--adjoint-families", default="",
                   help="FWP families for the adjoint section (default: every selected one; 'none': skip)")
    p.add_argument("--adjoint-sequences", type=int, default=64, help="sequences in the FWP section")
    # 1, as a search trial runs (params.yaml resources cpu: 1); more threads on a shared
    # machine made an epoch up to 10x slower here, from threads waiting on each other.
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per measurement, as a 1-CPU trial (0: torch's default)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 64 sequences of length 20, 1 epoch, no warm-up, 120 s limit")
    args = p.parse_args(argv)
    if args.quick:
        args.sequences, args.length, args.epochs, args.warmup = 64, 20, 1, 0
        args.adjoint_sequences, args.time_limit = 32, min(args.time_limit, 120.0)
    lengths = args.adjoint_lengths or f"{args.length},{4 * args.length}"
    args.adjoint_lengths = [int(v) for v in lengths.split(",")]
    args.families = [f for f in args.families.split(",") if f] or list(MODELS)
    chosen = [f for f in args.adjoint_families.split(",") if f and f != "none"]
    args.adjoint_families = [] if args.adjoint_families == "none" else chosen or fwp_families(args.families)
    for family in args.families + args.adjoint_families:
        get_model_class(family)  # an unknown name raises, listing the valid ones
    if args.epochs < 1 or args.warmup < 0:
        p.error("--epochs must be >= 1 and --warmup >= 0")
    return args


def reference_config(family: str, batch_size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TrainSettings fields, model kwargs) of the family's reference configuration."""
    space = load_space(space_path(ROOT, family))
    train, model = split_config({**space.reference, **space.fixed})
    settings = {k: train[k] for k in TRAINING_KEYS - {"batch_size"} if k in train}
    settings["batch_size"] = batch_size or int(train["batch_size"])
    return settings, model


def run_isolated(job: Job) -> dict[str, Any]:
    """Run one Job in a fresh interpreter; its JSON result, or a timeout/error record."""
    cmd = [sys.executable, "-m", "benchmarks.zoo.measure", json.dumps(asdict(job))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=job.time_limit + GRACE_S)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"killed after {job.time_limit + GRACE_S:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = proc.stderr.strip().splitlines()[-3:]
        return {"status": "error", "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def make_job(args: argparse.Namespace, family: str, overrides: dict[str, Any] | None = None,
             **changes: Any) -> Job:
    settings, model = reference_config(family, args.batch_size)
    data = {"sequences": args.sequences, "length": args.length, "channels": args.channels}
    fields = {"epochs": args.epochs, "warmup": args.warmup, "device": args.device,
              "time_limit": args.time_limit, "threads": args.threads}
    fields.update(changes)
    data.update(fields.pop("data", {}))
    fraction = settings.pop("lr_step_fraction", None)
    if fraction is not None:
        # A step schedule given as a fraction of the run's epochs (CDR-NDE's): the benchmark's
        # run is its warm-up and timed epochs, and the Trainer it builds gets no run length.
        settings["lr_step_epoch"] = max(1, round(fraction * (fields["warmup"] + fields["epochs"])))
    return Job(family, {**model, **(overrides or {})}, settings, data, **fields)


def measure(args: argparse.Namespace, family: str, overrides: dict[str, Any] | None = None,
            **changes: Any) -> dict[str, Any]:
    """One family's row: its configuration and the measurement (or the reason there is none)."""
    try:
        job = make_job(args, family, overrides, **changes)
    except Exception as exc:  # a family's search space mid-edit must not stop the whole run
        row = {"family": family, "status": "error", "error": f"search space: {exc}"}
    else:
        row = {"family": family, "batch_size": job.settings["batch_size"], "model_kwargs": job.model_kwargs}
        row.update(run_isolated(job))
    print(f"  {family} {overrides or ''} {changes or ''}: {row['status']} "
          f"{row.get('seconds_per_epoch') or ''} {row.get('error') or ''}", file=sys.stderr, flush=True)
    return row


def cfc_vs_ode_rnn(args: argparse.Namespace, rows: dict[str, dict]) -> dict[str, Any] | None:
    """CfC's speed-up per epoch over ODE-RNN with fixed-step rk4, as ratios of medians.

    Two pairs: both reference configurations, and CfC at ODE-RNN's hidden size (the reference
    CfC is 7x wider). The main table's rows are reused where the configuration is the same.
    """
    if not {"cfc", "ode_rnn"} <= set(args.families):
        return None
    ode = rows["ode_rnn"]
    if ode.get("model_kwargs", {}).get("method") != "rk4":
        ode = measure(args, "ode_rnn", {"method": "rk4"})
    cfc = rows["cfc"]
    hidden = ode.get("model_kwargs", {}).get("hidden_size")
    pairs = [("reference configurations", cfc)]
    if hidden and cfc.get("model_kwargs", {}).get("hidden_size") != hidden:
        pairs.append((f"CfC at hidden_size {hidden}", measure(args, "cfc", {"hidden_size": hidden})))
    out = {"ode_rnn": ode, "pairs": []}
    for label, row in pairs:
        ratio = None
        if row.get("status") == ode.get("status") == "ok":
            ratio = ode["seconds_per_epoch"] / row["seconds_per_epoch"]
        out["pairs"].append({"label": label, "cfc": row, "speedup": ratio})
    return out


def fwp_families(families: list[str]) -> list[str]:
    """The fast weight programmers among `families` that take an `adjoint` argument."""
    return [f for f in families if "fwp" in f and "adjoint" in model_arguments(get_model_class(f))]


def fwp_adjoint(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Training memory of each FWP at two lengths, without and with the adjoint (one epoch)."""
    rows = []
    data = {"sequences": args.adjoint_sequences}
    for family in args.adjoint_families:
        for length in args.adjoint_lengths:
            for adjoint in (False, True):
                row = measure(args, family, {"adjoint": adjoint}, epochs=1, warmup=0,
                              data={**data, "length": length})
                rows.append({**row, "length": length, "adjoint": adjoint})
    return rows


def machine_info(device: str, threads: int) -> dict[str, Any]:
    cpu = platform.processor()
    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu, "cores": os.cpu_count(), "torch_threads": threads or torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
            "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    try:  # a copy of the tree without git (a lent GPU machine) has no commit to name
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        info["git_commit"] = commit.stdout.strip() or None
    except OSError:
        info["git_commit"] = None
    return info


def write_outputs(report: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "zoo.json").write_text(json.dumps(report, indent=2) + "\n")
    with open(out / "zoo.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(report["families"])
    markdown = render_markdown(report)
    (out / "zoo.md").write_text(markdown)
    _write_trial_costs(report, out)
    return markdown


def _write_trial_costs(report: dict[str, Any], out: Path) -> None:
    """The search's price table (pipeline.sweep.costs) follows the committed zoo figures: written
    when this run is the committed one (benchmarks/results, every built-in family, on a CPU)."""
    from pipeline.models.builtin import BUILTIN_FAMILIES
    from pipeline.sweep.costs import TABLE, costs_from_zoo

    ran = {f["family"] for f in report["families"] if f.get("status") == "ok"}
    if out.resolve() == (ROOT / "benchmarks" / "results").resolve() and set(BUILTIN_FAMILIES) <= ran \
            and report["machine"].get("device") == "cpu" and not report["settings"].get("quick"):
        TABLE.write_text(json.dumps(costs_from_zoo(report), indent=2) + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the report written to zoo.json."""
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here")
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    rows = {family: measure(args, family) for family in args.families}
    report = {
        "machine": machine_info(args.device, args.threads),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "families": list(rows.values()),
        "cfc_vs_ode_rnn": cfc_vs_ode_rnn(args, rows),
        "fwp_adjoint": fwp_adjoint(args),
    }
    report["total_seconds"] = time.perf_counter() - start
    # Other work on the machine slows every family; the 1-minute load average flags it.
    report["machine"]["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(write_outputs(report, args.out))
    return report


if __name__ == "__main__":
    main()
