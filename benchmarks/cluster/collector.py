"""Python's garbage collector inside a Ray Tune trial, with and without pipeline/runtime/collector.py.

    .venv/bin/python -m benchmarks.cluster.collector --out benchmarks/results/collector

One local Ray with one CPU, so one trial at a time; trials alternate between the two modes,
`repeats` of each: *frozen* calls `freeze_survivors()` before building the trial's Trainer and again
once it is built (as pipeline.sweep.trial does), *as before* does not. Each trial trains one family's
reference configuration (batch 32) on one prepared dataset for `epochs` epochs and reports each to
Tune, as a search trial does, without MLflow. Recorded: the objects the collector tracks when the
set-up begins (what each of its old-generation collections walks), the collector's seconds and runs
while the Trainer is built (reading the dataset, building the model: gc.callbacks), and per epoch
the training seconds (`epoch_seconds`, train_epoch only) and the collector's seconds and runs over
the epoch and its report. The first epoch of each trial is left out (it warms the caches). Medians
over the trials and epochs of each mode, read in one run.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("as_before", "frozen")


def _gc_clock() -> dict[str, float]:
    """Seconds and number of the collector's runs from now on, summed in the returned dict."""
    state = {"seconds": 0.0, "collections": 0, "_start": 0.0}

    def tick(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            state["_start"] = time.perf_counter()
        else:
            state["seconds"] += time.perf_counter() - state["_start"]
            state["collections"] += 1

    gc.callbacks.append(tick)
    return state


def trial(config: dict[str, Any]) -> None:
    """The Tune trainable: build the Trainer, freeze or not, train `epochs` epochs, write the timings."""
    from ray import tune

    from pipeline.data.contract import load_dataset
    from pipeline.runtime.collector import freeze_survivors
    from pipeline.spaces import split_config
    from pipeline.spaces.load import load_space
    from pipeline.training.loop import Trainer, TrainSettings

    space = load_space(Path(config["space"]), config["family"])
    cfg = {**space.reference_for(config["dataset"]), "batch_size": 32}
    train_cfg, model_cfg = split_config(cfg)
    frozen = config["mode"] == "frozen"
    if frozen:  # as pipeline.sweep.trial: before the set-up, and again once the Trainer is built
        freeze_survivors()
    walked = len(gc.get_objects())  # what an old-generation collection walks during the set-up
    clock = _gc_clock()
    trainer = Trainer(config["family"], model_cfg, TrainSettings(**train_cfg), load_dataset(Path(config["data"])),
                      0, "cpu", config["epochs"], 1)
    gc.callbacks.pop()
    setup = {"gc_seconds": clock["seconds"], "collections": clock["collections"], "tracked_objects": walked}
    if frozen:
        freeze_survivors()
    epochs = []
    for _ in range(config["epochs"]):
        clock = _gc_clock()
        metrics = trainer.run_epoch(None)
        tune.report({"epoch": metrics["epoch"]})
        gc.callbacks.pop()
        epochs.append({"epoch_seconds": metrics["epoch_seconds"], "gc_seconds": clock["seconds"],
                       "collections": clock["collections"]})
    Path(config["out"]).write_text(json.dumps({"mode": config["mode"], "tracked_objects": walked, "setup": setup,
                                               "epochs": epochs}))


def summarise(trials: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mode: medians over the trials (set-up) and over every epoch but each trial's first."""
    out = {}
    for mode in MODES:
        mine = [t for t in trials if t["mode"] == mode]
        epochs = [e for t in mine for e in t["epochs"][1:]]
        if not epochs:
            continue
        out[mode] = {"trials": len(mine), "epochs": len(epochs),
                     "epoch_s": statistics.median(e["epoch_seconds"] for e in epochs),
                     "gc_s_per_epoch": statistics.median(e["gc_seconds"] for e in epochs),
                     "collections_per_epoch": statistics.median(e["collections"] for e in epochs),
                     "tracked_objects": statistics.median(t["tracked_objects"] for t in mine),
                     "setup_gc_s": statistics.median(t["setup"]["gc_seconds"] for t in mine),
                     "setup_collections": statistics.median(t["setup"]["collections"] for t in mine)}
    if len(out) == len(MODES):
        out["ratio"] = {"epoch_s": out["as_before"]["epoch_s"] / out["frozen"]["epoch_s"],
                        "setup_gc_s": out["as_before"]["setup_gc_s"] / max(out["frozen"]["setup_gc_s"], 1e-9)}
    return out


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = ["# The garbage collector in a Tune trial", "",
             f"{report['date']} · {m.get('cpu', '?')}, {m.get('cores', '?')} cores · {report['workload']} · "
             f"total {report['total_seconds']:.0f} s", "",
             "| mode | trials | objects tracked at set-up | set-up: collector s | set-up: collections | epochs "
             "| training s / epoch | collector s / epoch (with its report) | collections / epoch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in MODES:
        r = report["summary"].get(mode)
        if r:
            lines.append(f"| {mode} | {r['trials']} | {r['tracked_objects']:,.0f} | {r['setup_gc_s']:.3f} | "
                         f"{r['setup_collections']:.0f} | {r['epochs']} | {r['epoch_s']:.4f} | {r['gc_s_per_epoch']:.4f} | "
                         f"{r['collections_per_epoch']:.0f} |")
    ratio = report["summary"].get("ratio")
    if ratio:
        lines += ["", f"as before ÷ frozen: training per epoch {ratio['epoch_s']:.3f}, "
                      f"the collector during the set-up {ratio['setup_gc_s']:.2f}"]
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="benchmarks.cluster.collector", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="japanese_vowels", help="a prepare key of params.yaml")
    ap.add_argument("--family", default="cfc")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="trials of each mode")
    ap.add_argument("--out", type=Path, default=None, help="folder for collector.json and collector.md")
    args = ap.parse_args(argv)
    import datetime
    import sys

    from ray import tune

    from benchmarks.cluster.run import ROOT, machine, prepare_data, ray_for_run
    from pipeline.config import load_params
    from pipeline.stores.paths import processed_dir

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp).resolve()  # Ray's trial processes change their working directory: absolute paths
        prepare_data(load_params(ROOT / "params.yaml"), [args.dataset], work, quick=False)
        trials = []
        with ray_for_run(num_cpus=1):
            for k in range(args.repeats):
                for mode in MODES:
                    out = work / f"{mode}-{k}.json"
                    config = {"mode": mode, "family": args.family, "dataset": args.dataset, "epochs": args.epochs,
                              "space": str(ROOT / "search_spaces" / f"{args.family}.yaml"),
                              "data": str(processed_dir(work, args.dataset)), "out": str(out)}
                    tune.Tuner(tune.with_resources(trial, {"cpu": 1}), param_space=config,
                               run_config=tune.RunConfig(storage_path=str(work / "ray"), verbose=0)).fit()
                    trials.append(json.loads(out.read_text()))
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine("cpu", 1), "workload": f"{args.family} on {args.dataset}, {args.epochs} epochs, "
              f"{args.repeats} trial(s) of each mode", "summary": summarise(trials), "trials": trials,
              "total_seconds": time.perf_counter() - start,
              "command": "python -m benchmarks.cluster.collector " + " ".join(argv if argv is not None else sys.argv[1:])}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "collector.json").write_text(json.dumps(report, indent=1))
        (args.out / "collector.md").write_text(render(report))
    print(render(report))
    return report


if __name__ == "__main__":
    main()
