"""GPU trainer benchmark: the training loop itself on one CUDA device, without Ray or MLflow.

    python -m benchmarks.gpu.trainer --data data/processed/japanese_vowels [--families cfc,ncde]
                                     [--epochs 3] [--device cuda] [--out DIR]

For each family's reference configuration (search_spaces/<family>.yaml, its `default`
reference and fixed values), on the processed dataset given:

- seconds per epoch (median of the epochs after the first, which pays CUDA's warm-up) with
  torch's deterministic algorithms on (the default, pipeline.training.loop.deterministic_cuda)
  and off (CTSWEEP_CUDA_DETERMINISTIC=0 set before the process starts: `--deterministic off`);
- repeatability: the same seed trained twice in this process gives bit-identical validation
  losses per epoch (issue 28's claim, on the GPU);
- the step floor (issue 29): the first 32 training series at batch 256 with the default's
  `final.min_steps` (700) over 100 epochs make 7 passes of one step per epoch; the run checks
  that the trainer took them.

Writes gpu_trainer.json and prints one line per family. Run it twice, once per `--deterministic`,
in fresh processes: torch's deterministic switch is process-wide.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def reference_config(family: str) -> dict[str, Any]:
    """The family's default reference configuration with its default fixed values."""
    space = yaml.safe_load((ROOT / "search_spaces" / f"{family}.yaml").read_text())
    ref, fixed = space.get("reference") or {}, space.get("fixed") or {}
    ref = ref["default"] if isinstance(ref.get("default"), dict) else ref
    fixed = fixed["default"] if isinstance(fixed.get("default"), dict) else fixed
    return {**fixed, **ref}


def _trainer(family: str, config: dict[str, Any], data: Any, device: str, epochs: int, min_steps: int = 1) -> Any:
    from pipeline.config.protocol import TRAINING_KEYS
    from pipeline.training.loop import Trainer, TrainSettings

    train = {k: v for k, v in config.items() if k in TRAINING_KEYS}
    model = {k: v for k, v in config.items() if k not in TRAINING_KEYS}
    return Trainer(family, model, TrainSettings(**train), data, seed=0, device=device, epochs=epochs,
                   min_steps=min_steps)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(family: str, data: Any, device: str, epochs: int) -> dict[str, Any]:
    """Seconds per epoch and the validation losses of two runs of the same seed."""
    config = reference_config(family)
    losses, seconds = [], []
    for _ in range(2):
        trainer = _trainer(family, config, data, device, epochs)
        run_losses = []
        for _ in range(epochs):
            _sync(device)
            start = time.perf_counter()
            m = trainer.run_epoch()
            _sync(device)
            seconds.append(time.perf_counter() - start)
            run_losses.append(m["val_loss"])
        losses.append(run_losses)
    per_epoch = statistics.median(seconds[1:epochs] + seconds[epochs + 1:]) if epochs > 1 else seconds[0]
    return {"family": family, "batch_size": config.get("batch_size"), "seconds_per_epoch": per_epoch,
            "repeatable": losses[0] == losses[1], "val_losses": losses}


def step_floor(family: str, data: Any, device: str) -> dict[str, Any]:
    """32 training series at batch 256, the default's final floor: 7 one-step passes per epoch."""
    from dataclasses import replace

    from pipeline.data.contract import Split

    train = data.splits["train"]
    small = replace(data, splits={**data.splits, "train": Split(train.x[:32], train.t[:32], train.mask[:32],
                                                                  train.y[:32])})
    trainer = _trainer(family, {**reference_config(family), "batch_size": 256}, small, device, 100, 700)
    trainer.run_epoch()
    return {"family": family, "passes": trainer.passes, "steps_after_one_epoch": trainer.steps,
            "ok": trainer.passes == 7 and trainer.steps == 7}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="benchmarks.gpu.trainer", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="a processed dataset folder")
    p.add_argument("--families", default="cfc,cde_fwp_delta,cdr_nde,ode_rnn_tw,ncde,ode_rnn")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    import torch

    from pipeline.data.contract import load_dataset

    data = load_dataset(args.data)
    deterministic = os.environ.get("CTSWEEP_CUDA_DETERMINISTIC", "1") != "0"
    rows = []
    for family in [f for f in args.families.split(",") if f]:
        row = {**measure(family, data, args.device, args.epochs), "step_floor": step_floor(family, data, args.device)}
        rows.append(row)
        print(f"{family}: {row['seconds_per_epoch']:.3f} s/epoch (batch {row['batch_size']}), repeatable "
              f"{row['repeatable']}, step floor {row['step_floor']}", flush=True)
    report = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
              "torch": torch.__version__, "deterministic": deterministic, "epochs": args.epochs,
              "date": time.strftime("%Y-%m-%d"), "dataset": str(args.data.name), "families": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"gpu_trainer_{'det' if deterministic else 'fast'}.json"
    (args.out / name).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
