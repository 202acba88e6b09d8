"""A final-stage seed's first epochs, as the profile trains it, beside variants of its configuration:
why a seed falls to the constant predictor, without a whole run.

    .venv/bin/python -m benchmarks.papers.learning_curves --root PROJECT --profile tw-physionet2012-cpu \
        --dataset physionet2012 --family latent_ode_tw [--seed 0] [--epochs 3] \
        [--variant lr_1e-3=lr:0.001] [--variant no_sampling=sample_z0:false,lr:0.001] [--out DIR]

PROJECT holds the dataset prepared. "reference" is the configuration and seed the profile's final
stage trains (benchmarks.papers.profile_cost.final_trainer: the space's reference with the
profile's `search.fixed`, the final stage's epochs for the learning-rate schedule and its
`min_steps`), so its curve is the final record's first epochs, number for number; each
`--variant NAME=key:value,...` changes those keys (values read as YAML) and nothing else. Per
epoch: the training loss, the validation metric and loss, and, for a model with an encoder
(`encode`, the latent models), how far apart the rows' encodings are: the standard deviation
across validation rows of q(z0 | x)'s mean, averaged over the latent dimensions. An encoder
that learns nothing keeps it near its value at initialisation, and a decoder-read classifier then
sees one trajectory for every patient. One torch thread. Writes learning_curves.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report
from benchmarks.papers.profile_cost import _cpu, final_trainer


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """"NAME=key:value,key:value" -> (NAME, {key: value}); values are YAML (0.001, false, index)."""
    import yaml

    name, sep, body = text.partition("=")
    if not sep or not name or not body:
        raise ValueError(f"--variant {text!r}: expected NAME=key:value[,key:value...]")
    changes = {}
    for item in body.split(","):
        key, colon, value = item.partition(":")
        if not colon or not key:
            raise ValueError(f"--variant {text!r}: {item!r} is not key:value")
        changes[key.strip()] = yaml.safe_load(value)
    return name, changes


def encoding_spread(trainer) -> float | None:
    """Mean over latent dimensions of the std across validation rows of q(z0 | x)'s mean; None
    for a model without an encoder."""
    import torch

    model = trainer.model
    if not hasattr(model, "encode"):
        return None
    model.eval()
    n = len(trainer.targets["val"])
    means = []
    with torch.no_grad():
        for start in range(0, n, 512):
            batch = trainer._batch("val", torch.arange(start, min(start + 512, n)))
            dt = batch["dt"] * getattr(model, "time_scale", 1.0)  # as forward() scales it
            means.append(model.encode(batch["x"], dt, batch["mask"])[0])
    return float(torch.cat(means).std(dim=0).mean())


def curve(root: Path, profile: str, dataset: str, family: str, seed: int, epochs: int,
          overrides: dict[str, Any]) -> dict[str, Any]:
    """`epochs` epochs of one configuration: per epoch train loss, validation metric and loss,
    encoding spread (epoch 0: at initialisation), seconds."""
    trainer, config, final = final_trainer(root, profile, dataset, family, seed, overrides)
    rows = [{"epoch": 0, "encoding_spread": encoding_spread(trainer)}]
    for _ in range(epochs):
        start = time.perf_counter()
        out = trainer.run_epoch()
        rows.append({"epoch": out["epoch"], "train_loss": out["train_loss"], "val_metric": out["val_metric"],
                     "val_loss": out["val_loss"], "encoding_spread": encoding_spread(trainer),
                     "seconds": time.perf_counter() - start})
        print(json.dumps(rows[-1]), flush=True)
    return {"config": config, "changes": overrides, "final_epochs": final.epochs,
            "parameters": trainer.model.num_parameters(), "epochs": rows}


def run(root: Path, profile: str, dataset: str, family: str, seed: int, epochs: int,
        variants: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    curves = {}
    for name, changes in [("reference", {}), *variants]:
        curves[name] = curve(root, profile, dataset, family, seed, epochs, changes)
    return {"date": datetime.date.today().isoformat(), "cpu": _cpu(), "profile": profile, "dataset": dataset,
            "family": family, "seed": seed, "curves": curves}


def render(report: dict[str, Any]) -> str:
    lines = [f"# {report['family']} on {report['dataset']}, seed {report['seed']}: the first epochs "
             f"({report['date']}, {report['cpu']}, one thread)", "",
             f"The configuration the profile `{report['profile']}` trains (reference) and variants of it; "
             "validation metric (training loss), and the spread of the rows' encodings (std across "
             "validation rows of q(z0 | x)'s mean; epoch 0 at initialisation).", "",
             "| variant | changes | parameters | epoch | val | train loss | encoding spread | s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, c in report["curves"].items():
        changes = ", ".join(f"{k}: {v}" for k, v in c["changes"].items()) or "-"
        for e in c["epochs"]:
            spread = "-" if e["encoding_spread"] is None else f"{e['encoding_spread']:.4f}"
            if e["epoch"] == 0:
                lines.append(f"| {name} | {changes} | {c['parameters']:,} | 0 | - | - | {spread} | - |")
                continue
            lines.append(f"| {name} | | | {e['epoch']} | {e['val_metric']:.4f} | {e['train_loss']:.4f} | "
                         f"{spread} | {e['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the project whose data/processed holds the dataset")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--family", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=key:value,...")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as exc:
        ap.error(str(exc))
    if args.epochs < 1:
        ap.error(f"--epochs {args.epochs}: at least 1")
    report = run(args.root.resolve(), args.profile, args.dataset, args.family, args.seed, args.epochs, variants)
    text = render(report)
    save_report(args.out, "learning_curves", report, text)
    print(text)
    return report


if __name__ == "__main__":
    main()
