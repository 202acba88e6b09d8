"""Which ranking of search trials picks configurations that do better on test: validation accuracy
with the validation loss as tie-break (the project's rule, pipeline.training.selection), or the
validation loss alone.

    .venv/bin/python -m benchmarks.rules.selection_rule --root PROJECT --dataset japanese_vowels \
        --families cfc,ode_rnn,ncde [--configs 16] [--seeds 3] [--epochs 15] [--folds K] [--out DIR]

PROJECT is a ctsweep project whose dataset is prepared (`ctsweep prepare DATASET`). For each
family: its reference configuration and `configs - 1` drawn at random from its search space
(Optuna's RandomSampler, seed 0: the same draws every run), each trained as a search trial is
(`epochs` epochs of at least `search.min_steps` optimiser steps, the family's own patience, no
ASHA) on `seeds` seeds, keeping the epoch the rule keeps; then scored at that epoch on
validation (accuracy, loss) and test (accuracy). One JSON line per (family, configuration, seed)
in OUT/runs.jsonl, written as each ends: a rerun resumes where the last one stopped.

Analysis (OUT/selection_rule.json and .md): a search of n trials is simulated by every subset of
n configurations (or 2,000 random ones where there are more); the search sees the first seed's
trial of each (a search trains one trial seed) and each rule picks one configuration; the pick is
scored by its mean test accuracy over the other seeds, which the search never saw (the final
stage retrains with fresh seeds). Per family and n: the mean test accuracy of each rule's picks,
how often the two rules pick different configurations, and the share of configurations at 100 %
validation accuracy (the ceiling that makes accuracy blind). Runs on one core.

With `--folds K`, a third rule sees more validation data per trial, at K times a trial's cost:
each configuration is also trained, at the first seed, on K stratified folds of the training and
validation series together (sklearn's StratifiedKFold, seed 0), each model scored on the fold it
did not see, and the rule ranks by the pooled fold accuracy (correct over all training and
validation series: a step of 1/67 on ItalyPowerDemand instead of 1/14), the pooled loss breaking
ties. A k-fold trial costs K trials, so the table also gives the k-fold rule's picks among n / K
configurations: what the same training time buys it. The folds reuse the prepared data's standardisation (the training split's statistics).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report

RULES = ("accuracy, then loss", "loss alone")
KFOLD = "k-fold accuracy, then loss"
MAX_SUBSETS = 2000


def configurations(root: Path, dataset: str, family: str, n: int, n_train: int) -> list[dict[str, Any]]:
    """The reference configuration, then n - 1 random draws from the family's space on `dataset`."""
    import optuna

    from pipeline.spaces import load_space
    from pipeline.spaces.load import space_path

    space, _ = load_space(space_path(root, family), family).for_dataset(dataset).clip_batch(n_train, dataset)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    sample = space.define_by_run()
    configs = [{**space.reference, **space.fixed}]
    while len(configs) < n:
        trial = study.ask()
        fixed = sample(trial)
        configs.append({**trial.params, **fixed})
        study.tell(trial, 0.0)
    return configs


def train_one(data: Any, family: str, config: dict[str, Any], seed: int, epochs: int, min_steps: int) -> dict[str, Any]:
    """One trial's scores at the epoch the rule keeps: val accuracy and loss, test accuracy."""
    import torch

    from pipeline.spaces import split_config
    from pipeline.training.loop import Trainer, TrainSettings
    from pipeline.training.stopping import train_to_budget

    torch.set_num_threads(1)
    train_cfg, model_cfg = split_config(config)
    trainer = Trainer(family, model_cfg, TrainSettings(**train_cfg), data, seed, "cpu", epochs, min_steps)
    started = time.perf_counter()
    run = train_to_budget(trainer, epochs, None, data.meta.mode)
    trainer.model.load_state_dict(run.best_state)
    val, val_loss, _ = trainer.evaluation("val")
    test, _, _ = trainer.evaluation("test")
    return {"val": val, "val_loss": val_loss, "test": test, "best_epoch": run.best_epoch,
            "epochs": len(run.curve), "seconds": round(time.perf_counter() - started, 2)}


def folds(data: Any, k: int) -> list[Any]:
    """K datasets over the training and validation series together: fold j validates on the j-th
    stratified part and trains on the rest (the test split unchanged)."""
    import dataclasses

    import numpy as np
    from sklearn.model_selection import StratifiedKFold

    from pipeline.data.contract import take
    from pipeline.data.resplit import joined

    pool = joined(data.splits["train"], data.splits["val"], data.meta.per_step)
    out = []
    for fit, held in StratifiedKFold(n_splits=k, shuffle=True, random_state=0).split(np.zeros(len(pool)), pool.y):
        splits = {**data.splits, "train": take(pool, fit), "val": take(pool, held)}
        # folder=None: inputs precomputed or cached for the prepared splits (NCDE's spline
        # coefficients) belong to those splits, not to a fold's; they are built again in memory
        out.append(dataclasses.replace(data, splits=splits, folder=None, meta=dataclasses.replace(
            data.meta, sizes={**data.meta.sizes, "train": len(fit), "val": len(held)})))
    return out


def kfold_scores(runs: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[float, float]]:
    """(family, configuration) -> (pooled fold accuracy, pooled fold loss), where every fold ran."""
    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        if r.get("fold") is not None:
            by.setdefault((r["family"], r["config_index"]), []).append(r)
    out = {}
    for key, rows in by.items():
        if len(rows) == rows[0]["folds"]:
            n = sum(r["n_val"] for r in rows)
            out[key] = (sum(r["val"] * r["n_val"] for r in rows) / n, sum(r["val_loss"] * r["n_val"] for r in rows) / n)
    return out


def pick(trials: list[tuple[int, float, float]], rule: str) -> int:
    """The configuration index a rule picks from (index, val accuracy, val loss) of a search's
    trials: the project's rule (selection.best_index: accuracy, then loss, then the earlier), or
    the lowest loss (then the earlier)."""
    from pipeline.training.selection import best_index

    if rule == RULES[0]:
        return trials[best_index([(acc, loss) for _, acc, loss in trials], "max") or 0][0]
    return min(trials, key=lambda t: (t[2], t[0]))[0]


def analyse(runs: list[dict[str, Any]], sizes: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """Per family and search size: each rule's mean test accuracy of its picks (module docstring)."""
    rng = random.Random(seed)
    rows = []
    cv = kfold_scores(runs)
    k = max((r["folds"] for r in runs if r.get("fold") is not None), default=0)
    runs = [r for r in runs if r.get("fold") is None]
    for family in sorted({r["family"] for r in runs}):
        mine = [r for r in runs if r["family"] == family]
        seeds = sorted({r["seed"] for r in mine})
        first, others = seeds[0], seeds[1:]
        by = {(r["config_index"], r["seed"]): r for r in mine}
        complete = sorted(i for i in {r["config_index"] for r in mine} if all((i, s) in by for s in seeds))
        if not others or len(complete) < 2:
            continue
        kfold = bool(cv) and all((family, i) in cv for i in complete)  # the third rule only where every fold ran
        rules = (*RULES, KFOLD) if kfold else RULES
        held_out = {i: statistics.fmean(by[(i, s)]["test"] for s in others) for i in complete}
        for n in (n for n in sizes if n <= len(complete)):
            every = list(itertools.combinations(complete, n))
            subsets = every if len(every) <= MAX_SUBSETS else [tuple(rng.sample(complete, n)) for _ in range(MAX_SUBSETS)]
            picks = {rule: [] for rule in rules}
            differ = 0
            for subset in subsets:
                trials = [(i, by[(i, first)]["val"], by[(i, first)]["val_loss"]) for i in subset]
                chosen = {rule: pick(trials, rule) for rule in RULES}
                if kfold:  # the project's rule on the pooled fold scores
                    chosen[KFOLD] = pick([(i, *cv[(family, i)]) for i in subset], RULES[0])
                differ += chosen[RULES[0]] != chosen[RULES[1]]
                for rule, i in chosen.items():
                    picks[rule].append(held_out[i])
            same_cost = {}
            if kfold:  # k-fold at the same cost: n trials' training buys n / k configurations of k folds
                m = max(1, round(n / k))
                every = list(itertools.combinations(complete, m))
                fewer = every if len(every) <= MAX_SUBSETS else [tuple(rng.sample(complete, m)) for _ in range(MAX_SUBSETS)]
                same_cost = {"kfold_same_cost_n": m, f"test {KFOLD} same cost": statistics.fmean(
                    held_out[pick([(i, *cv[(family, i)]) for i in subset], RULES[0])] for subset in fewer)}
            rows.append({"family": family, "n": n, "configs": len(complete), "subsets": len(subsets),
                         **{f"test {rule}": statistics.fmean(picks[rule]) for rule in rules}, **same_cost,
                         "differ_share": differ / len(subsets),
                         "at_ceiling": sum(by[(i, first)]["val"] == 1.0 for i in complete) / len(complete),
                         "oracle": max(held_out.values()), "mean_config": statistics.fmean(held_out.values())})
    return rows


def markdown(rows: list[dict[str, Any]], title: str) -> str:
    kfold = any(f"test {KFOLD}" in r for r in rows)
    lines = [title, "", "| family | trials | test: accuracy, then loss | test: loss alone | "
             + ("test: k-fold | k-fold at the same cost (configurations) | " if kfold else "")
             + "picks differ | configs at 100 % val | best config | mean config |",
             "|---|---|---|---|" + ("---|---|" if kfold else "") + "---|---|---|---|"]
    for r in rows:
        cv = r.get(f"test {KFOLD}")
        lines.append(f"| {r['family']} | {r['n']} | {100 * r['test ' + RULES[0]]:.2f} | {100 * r['test ' + RULES[1]]:.2f} | "
                     + (("– | – | " if cv is None else f"{100 * cv:.2f} | {100 * r[f'test {KFOLD} same cost']:.2f} "
                                                           f"({r['kfold_same_cost_n']}) | ") if kfold else "")
                     + f"{100 * r['differ_share']:.0f} % | {100 * r['at_ceiling']:.0f} % | {100 * r['oracle']:.2f} | "
                     f"{100 * r['mean_config']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--families", required=True, help="comma-separated")
    parser.add_argument("--configs", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration: the first selects, the others test")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--min-steps", type=int, default=100)
    parser.add_argument("--sizes", default="6,12", help="search sizes simulated, comma-separated")
    parser.add_argument("--seed-base", type=int, default=1000, help="the first seed (the search's trial seed)")
    parser.add_argument("--folds", type=int, default=0, help="K: also rank by K-fold validation (0: off)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from pipeline.data.contract import load_dataset
    from pipeline.stores.paths import processed_dir

    root = args.root.resolve()
    data = load_dataset(processed_dir(root, args.dataset))
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    have = {(r["family"], r["config_index"], r["seed"], r.get("fold")) for r in done}
    seeds = [args.seed_base + k for k in range(args.seeds)]
    parts = folds(data, args.folds) if args.folds else []
    jobs = [(seed, None, data) for seed in seeds] + [(seeds[0], j, part) for j, part in enumerate(parts)]
    for family in args.families.split(","):
        configs = configurations(root, args.dataset, family, args.configs, len(data.splits["train"].y))
        for index, config in enumerate(configs):
            for seed, fold, subset in jobs:
                if (family, index, seed, fold) in have:
                    continue
                try:
                    scores = train_one(subset, family, config, seed, args.epochs, args.min_steps)
                except Exception as exc:  # a diverging configuration is a result too: it is never picked
                    scores = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                where = {} if fold is None else {"fold": fold, "folds": args.folds, "n_val": len(subset.splits["val"])}
                row = {"family": family, "config_index": index, "seed": seed, **where, "config": config, **scores}
                with log.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                done.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)
    ok = [r for r in done if "error" not in r]
    rows = analyse(ok, [int(n) for n in args.sizes.split(",")])
    title = (f"Selection rules on {args.dataset}: {args.configs} configurations per family (the reference and random "
             f"draws), {args.seeds} seeds each (the first selects, the others score), {args.epochs} epochs"
             + (f", and {args.folds}-fold validation at the first seed" if args.folds else "") + "; "
             f"{len(done) - len(ok)} runs failed. Test accuracy in % of the configuration each rule picks.")
    text = markdown(rows, title)
    save_report(args.out, "selection_rule", {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, text)
    print(text)


if __name__ == "__main__":
    main()
