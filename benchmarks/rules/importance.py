"""How many trials fANOVA needs before its importances mean something: a synthetic check.

    .venv/bin/python -m benchmarks.rules.importance [--counts 3,4,6,8,10,12,13,14,15,16,20,30] [--resamples 20]
        [--out benchmarks/results]

A synthetic search space shaped like a family's (six keys: a log-uniform learning rate, a
log-uniform integer width, a dropout, a log-uniform weight decay, a categorical batch size and a
log-uniform time scale) and an objective whose truly important key is known: the validation
score falls with the squared distance of log10(lr) from its best value (the learning rate is the
most sensitive hyperparameter of every family searched here), the width and the dropout matter a
little, the rest not at all, plus noise. For each count n, `--resamples` searches of n random
configurations (Optuna's RandomSampler, one seed per resample) are scored and Optuna's fANOVA
evaluator (the one the search uses, pipeline/sweep/sensitivity.py) ranks their keys. The table
gives, per n, how often the learning rate ranks first.

The report shows a search's importances only from pipeline.sweep.sensitivity.MIN_TRIALS
completed trials: the smallest count at which the learning rate ranks first in at least
REQUIRED of 20 resamples, here and at every larger count measured. tests/test_importance.py
repeats the check at that count. Random configurations are the easy case: TPE's trials cluster
near the good ones, which leaves fANOVA less spread to learn from.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.importance import FanovaImportanceEvaluator, get_param_importances
from optuna.trial import create_trial

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = 15  # of 20 resamples: "in most of them", with room for a few unlucky draws
SPACE = {"lr": FloatDistribution(1e-4, 1e-1, log=True), "hidden_size": IntDistribution(16, 256, log=True),
         "dropout": FloatDistribution(0.0, 0.5), "weight_decay": FloatDistribution(1e-6, 1e-2, log=True),
         "batch_size": CategoricalDistribution([32, 64, 128]), "time_scale": FloatDistribution(0.1, 10.0, log=True)}
IMPORTANT = "lr"


def objective(params: dict[str, Any], rng: np.random.Generator) -> float:
    """A validation accuracy: best at lr = 10^-2.5, a little better wider and with less dropout,
    blind to the other keys, with noise of sd 0.01."""
    score = 0.9 - 0.12 * (math.log10(params["lr"]) + 2.5) ** 2
    score += 0.02 * math.log2(params["hidden_size"] / 16) / 4 - 0.04 * params["dropout"]
    return score + float(rng.normal(0.0, 0.01))


def ranks_first(n: int, seed: int) -> bool:
    """Whether fANOVA ranks IMPORTANT first on one search of n random configurations."""
    sampler = optuna.samplers.RandomSampler(seed=seed)
    rng = np.random.default_rng(seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(n):
        trial = study.ask(SPACE)
        study.tell(trial, objective(trial.params, rng))
    frozen = optuna.create_study(direction="maximize")
    for t in study.trials:
        frozen.add_trial(create_trial(params=t.params, distributions=t.distributions, value=t.value))
    values = get_param_importances(frozen, evaluator=FanovaImportanceEvaluator(seed=seed))
    return max(values, key=values.get) == IMPORTANT


def share_first(n: int, resamples: int = 20) -> int:
    """In how many of `resamples` searches of n trials the important key ranks first."""
    return sum(ranks_first(n, seed) for seed in range(resamples))


def minimum(table: dict[int, int]) -> int | None:
    """The smallest count from which every measured count reaches REQUIRED (of 20)."""
    ok = [n for n in sorted(table) if all(table[m] >= REQUIRED for m in table if m >= n)]
    return ok[0] if ok else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="benchmarks.rules.importance", description=__doc__.split("\n\n")[0])
    p.add_argument("--counts", default="3,4,6,8,10,12,13,14,15,16,20,30")
    p.add_argument("--resamples", type=int, default=20)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    table = {n: share_first(n, args.resamples) for n in (int(c) for c in args.counts.split(","))}
    report = {"resamples": args.resamples, "required": REQUIRED, "first": table, "minimum": minimum(table),
              "seconds": round(time.perf_counter() - start, 1), "optuna": optuna.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "importance.json").write_text(json.dumps(report, indent=1) + "\n")
    for n, k in table.items():
        print(f"{n:4d} trials: lr ranks first in {k:2d} of {args.resamples}")
    print(f"minimum: {report['minimum']}")
    return report


if __name__ == "__main__":
    main()
