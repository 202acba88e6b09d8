"""Why an epoch of latent_ode_tw costs more than one of latent_ode (Kohan et al. 2022, Table 1a:
the paper states 1.2-2.0x, Sec. 4; "about 1.5x" on PhysioNet, Sec. 3.1), on one core.

    .venv/bin/python -m benchmarks.papers.tw_ratio --root PROJECT [--batches 8] [--profile-batches 2] [--out DIR]

PROJECT holds physionet2012 prepared (`ctsweep prepare physionet2012` there). Every variant
trains the same `--batches` batches (a fixed random order, batch 50) in this process, one torch
thread, after one untimed warm-up batch:

    latent_ode         the paper's L-ODE (GRU 50 / hidden 40, ODE 50 x 3, latent 20)
    latent_ode_tw      the paper's TW model (GRU 25 / hidden 20, ODE 25 x 3, latent 20), Eq. 2
                       with each row's own time (tw_clock "time", the reference)
    latent_ode_small   latent_ode at the TW sizes: the same network without temporal weights
    latent_ode_tw_idx  latent_ode_tw with tw_clock "index": one W'(t) per solver evaluation for
                       the whole batch, as when a batch shares one time grid (the reference code's
                       union of the batch's times)

All run Euler with one step per observation interval (solver_steps 1, the references), so the
solver steps are equal by construction; the function evaluations (NFE, calls of each ODE
network's forward: torchdiffeq counts none) are counted, as are the weight entries Eq. 2 builds
(rows x cols of every temporal layer at every time it is built for). The encoder and the decoder
are timed apart, forward only; then torch.profiler splits a few batches of latent_ode_tw: Eq. 2
forward and backward (FactoredEq2), the per-row weights gathered from the distinct times
(stages.at_distinct_times), the rest (the layers' per-row products, GRU cell, classifier,
optimiser). Writes tw_ratio.json and tw_ratio.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.outputs import save_report

DATASET = "physionet2012"
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "latent_ode": ("latent_ode", {"sequence_readout": "decoded"}),
    "latent_ode_tw": ("latent_ode_tw", {}),
    "latent_ode_small": ("latent_ode", {"sequence_readout": "decoded", "rec_size": 20, "units": 25}),
    "latent_ode_tw_idx": ("latent_ode_tw", {"tw_clock": "index"}),
}
# torch.profiler events -> where latent_ode_tw's time goes: Eq. 2 forward and backward are the
# CPU totals of the autograd Function (its children included); the gather its self times
REGIONS = {
    "Eq. 2 forward (FactoredEq2)": ("FactoredEq2",),
    "Eq. 2 backward (FactoredEq2Backward)": ("FactoredEq2Backward",),
    "per-row weights from the distinct times (unique, index_select, its backward)": (
        "aten::sort", "aten::unique_consecutive", "aten::_unique2", "aten::index_select", "aten::scatter_add_"),
}


def trainer_for(root: Path, family: str, overrides: dict[str, Any]):
    """A Trainer of `family` at the physionet2012 reference of its space with `overrides`."""
    from pipeline.data.contract import load_dataset
    from pipeline.spaces import load_space, space_path, split_config
    from pipeline.training.loop import Trainer, TrainSettings

    data = load_dataset(root / "data" / "processed" / DATASET)
    space = load_space(space_path(root, family), family).for_dataset(DATASET)
    train_cfg, model_cfg = split_config({**space.reference, **space.fixed, **overrides})
    return Trainer(family, model_cfg, TrainSettings(**train_cfg), data, 0, epochs=1, min_steps=1), \
        {**train_cfg, **model_cfg}


class Counter:
    """Counts calls of the ODE networks (NFE, each a batch of rows) and the Eq. 2 weight entries built."""

    def __init__(self, model: torch.nn.Module) -> None:
        from pipeline.models.temporal_weights.weights import TemporalWeights

        self.nfe = {"encoder": 0, "decoder": 0}
        self.weight_entries = 0
        for name, net in (("encoder", model.rec_field), ("decoder", model.gen_field)):
            if net is not None:
                net.register_forward_hook(lambda *_, key=name: self._count(key))
        for module in model.modules():
            if isinstance(module, TemporalWeights):
                module.register_forward_hook(lambda _m, _i, out: self._entries(out))

    def _count(self, key: str) -> None:
        self.nfe[key] += 1

    def _entries(self, out: torch.Tensor) -> None:
        self.weight_entries += out.numel()


def batch_stats(trainer, batches: list[torch.Tensor]) -> dict[str, float]:
    """Padded length L, observations per row, and distinct times per batch (the union of the
    batch's observation times: the times one shared grid would solve at)."""
    lengths, observed, distinct = [], [], []
    for idx in batches:
        batch = trainer._batch("train", idx)
        mask, times = batch["mask"], torch.cumsum(batch["dt"], dim=1)
        lengths.append(mask.shape[1])
        observed.append(mask.sum(1).float().mean().item())
        distinct.append(torch.unique(times[mask]).numel())
    n = len(batches)
    return {"padded_length": sum(lengths) / n, "observations_per_row": sum(observed) / n,
            "distinct_times_per_batch": sum(distinct) / n}


def time_variant(root: Path, name: str, batches: list[torch.Tensor]) -> dict[str, Any]:
    """Seconds per training batch (forward + backward + step) and NFE per batch of one variant."""
    family, overrides = VARIANTS[name]
    torch.manual_seed(0)
    trainer, config = trainer_for(root, family, overrides)
    trainer.model.train()
    trainer._step(batches[0])  # warm-up
    counter = Counter(trainer.model)
    start = time.perf_counter()
    for idx in batches:
        trainer._step(idx)
    seconds = (time.perf_counter() - start) / len(batches)
    n = len(batches)
    return {"variant": name, "family": family, "config": config, "batch_s": seconds,
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "nfe_per_batch": {k: v / n for k, v in counter.nfe.items()},
            "eq2_entries_per_batch": counter.weight_entries / n,
            "batches_per_epoch": trainer.steps_per_epoch}


def profile_variant(root: Path, name: str, batches: list[torch.Tensor]) -> dict[str, float]:
    """CPU seconds per batch by region (REGIONS) over `batches`, under torch.profiler; "the rest"
    is the ODE networks' per-row products, the GRU cell, the classifier, the optimiser."""
    from torch.profiler import ProfilerActivity, profile

    family, overrides = VARIANTS[name]
    torch.manual_seed(0)
    trainer, _ = trainer_for(root, family, overrides)
    trainer.model.train()
    trainer._step(batches[0])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for idx in batches:
            trainer._step(idx)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6 / len(batches)
    shares = {}
    for key, names in REGIONS.items():
        field = "cpu_time_total" if key.startswith("Eq. 2") else "self_cpu_time_total"
        shares[key] = sum(getattr(e, field) for e in events if e.key in names) / 1e6 / len(batches)
    shares["the rest"] = total - sum(shares.values())
    return shares


def forward_split(root: Path, name: str, batches: list[torch.Tensor]) -> dict[str, float]:
    """Seconds per batch of the encoder and the decoder, forward only (no gradient)."""
    family, overrides = VARIANTS[name]
    torch.manual_seed(0)
    trainer, _ = trainer_for(root, family, overrides)
    model = trainer.model.train()
    spent = {"encoder": 0.0, "decoder": 0.0}
    with torch.no_grad():
        for idx in batches:
            batch = trainer._batch("train", idx)
            start = time.perf_counter()
            mean, _ = model.encode(batch["x"], batch["dt"], batch["mask"])
            middle = time.perf_counter()
            model.decode(mean, batch["dt"])
            spent["encoder"] += middle - start
            spent["decoder"] += time.perf_counter() - middle
    return {k: v / len(batches) for k, v in spent.items()}


def run(root: Path, n_batches: int, n_profiled: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    trainer, _ = trainer_for(root, "latent_ode", VARIANTS["latent_ode"][1])
    order = torch.randperm(len(trainer.targets["train"]), generator=torch.Generator().manual_seed(0))
    batches = [order[i * 50:(i + 1) * 50] for i in range(n_batches + 1)]
    rows = []
    for name in VARIANTS:
        row = time_variant(root, name, batches)
        row["epoch_train_s"] = row["batch_s"] * row["batches_per_epoch"]
        row["nfe_per_epoch"] = sum(row["nfe_per_batch"].values()) * row["batches_per_epoch"]
        row["forward_s"] = forward_split(root, name, batches[1:])
        print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)
        rows.append(row)
    base = rows[0]["batch_s"]
    for row in rows:
        row["ratio_to_latent_ode"] = row["batch_s"] / base
    return {"date": datetime.date.today().isoformat(), "commit": _commit(), "cpu": _cpu(),
            "torch_threads": torch.get_num_threads(), "batches_timed": n_batches,
            "batch_stats": batch_stats(trainer, batches[1:]), "rows": rows,
            "profile_latent_ode_tw": profile_variant(root, "latent_ode_tw", batches[:n_profiled + 1])}


def render(report: dict[str, Any]) -> str:
    stats = report["batch_stats"]
    lines = [f"# latent_ode_tw vs latent_ode per batch, one core ({report['date']}, commit {report['commit']}, "
             f"{report['cpu']})", "",
             f"{report['batches_timed']} training batches of 50 (forward, backward, Adamax step), the same for every "
             f"variant; per batch: padded length {stats['padded_length']:.0f}, "
             f"{stats['observations_per_row']:.1f} observation times per row, "
             f"{stats['distinct_times_per_batch']:.0f} distinct times in the batch.", "",
             "| variant | parameters | s/batch | x latent_ode | NFE/batch (enc + dec) | NFE/epoch | "
             "Eq. 2 weight entries/batch | forward s, encoder + decoder | train s/epoch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        nfe = r["nfe_per_batch"]
        lines.append(f"| {r['variant']} | {r['parameters']:,} | {r['batch_s']:.3f} | {r['ratio_to_latent_ode']:.2f} | "
                     f"{nfe['encoder']:.0f} + {nfe['decoder']:.0f} | {r['nfe_per_epoch']:,.0f} | "
                     f"{r['eq2_entries_per_batch'] / 1e6:.1f} M | {r['forward_s']['encoder']:.3f} + "
                     f"{r['forward_s']['decoder']:.3f} | {r['epoch_train_s']:.1f} |")
    shares = report["profile_latent_ode_tw"]
    total = sum(shares.values())
    lines += ["", "latent_ode_tw, CPU time per batch under torch.profiler (which adds its own overhead):", "",
              "| where | s/batch | share |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:.3f} | {100 * v / total:.0f} % |" for k, v in shares.items()]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    return done.stdout.strip() or "unknown"


def _cpu() -> str:
    from benchmarks.papers.profile_cost import _cpu as cpu

    return cpu()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the project whose data/processed holds physionet2012")
    ap.add_argument("--batches", type=int, default=8, help="training batches timed per variant")
    ap.add_argument("--profile-batches", type=int, default=2, help="batches of latent_ode_tw under torch.profiler")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report = run(args.root.resolve(), args.batches, args.profile_batches)
    text = render(report)
    save_report(args.out, "tw_ratio", report, text)
    print(text)
    return report


if __name__ == "__main__":
    main()
