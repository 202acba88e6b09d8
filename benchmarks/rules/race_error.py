"""The race's error rates, by simulation on hand-made families (pipeline.final.race).

    .venv/bin/python -m benchmarks.rules.race_error [--runs 2000] [--families 3] [--sd 0.01]
        [--margin 0.01] [--max-seeds 10] [--seeds-per-round 1] [--out DIR]

Each run draws every family's per-seed test and validation scores from a normal distribution
(standard deviation --sd) and races them exactly as the final stage does (pipeline.final.race.look,
seeds added a round at a time), for three kinds of field:

    equal        every family has the same mean: a race that calls any pair separated errs
    at margin    the others' means lie exactly at the margin below the best's: a race that calls
                 any of them equivalent errs
    clear gap    the others lie 3 sd below: the share of pairs separated is the race's power

and reports the share of runs with an error (the family-wise error rate, which must stay at or
under --alpha), the share decided, and the mean seeds per family. Writes race_error.json and .md
to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report
from pipeline.config.race import RaceParams
from pipeline.final.race import AT_CAP, EQUIVALENT, SEPARATED, look

FIELDS = ("equal", "at margin", "clear gap")


def _record(val: list[float], test: list[float]) -> dict[str, Any]:
    return {"metric": "auroc", "mode": "max", "status": "ok", "val_mean": statistics.fmean(val),
            "val_loss_mean": -statistics.fmean(val), "seeds": [{"test": t} for t in test]}


def race_once(means: dict[str, float], sd: float, p: RaceParams, base: int, rng: random.Random
              ) -> tuple[dict[str, str], dict[str, int], str | None]:
    """One race on families of these true means: (the last look's decisions, seeds per family,
    the best family at the end)."""
    draws = {f: ([rng.gauss(m, sd) for _ in range(base)], [rng.gauss(m, sd) for _ in range(base)])
             for f, m in means.items()}
    while True:
        current = look({f: _record(v, t) for f, (v, t) in draws.items()}, p, base)
        if not current.extend:
            return current.decisions, {f: len(t) for f, (_, t) in draws.items()}, current.best
        for family in current.extend:
            val, test = draws[family]
            for _ in range(p.seeds_per_round):
                val.append(rng.gauss(means[family], sd))
                test.append(rng.gauss(means[family], sd))


def field_means(kind: str, families: int, sd: float, margin: float) -> dict[str, float]:
    """True means of a field: the first family at 0.9, the others per `kind` (module docstring)."""
    other = {"equal": 0.9, "at margin": 0.9 - margin, "clear gap": 0.9 - 3 * sd}[kind]
    return {"f0": 0.9, **{f"f{i}": other for i in range(1, families)}}


def simulate(kind: str, runs: int, families: int, sd: float, p: RaceParams, base: int, seed: int = 0
             ) -> dict[str, Any]:
    """Error, decided and power shares over `runs` races of one kind of field."""
    rng = random.Random(seed)
    means = field_means(kind, families, sd, p.margin)
    errors = decided = separated = pairs = 0
    seeds: list[int] = []
    for _ in range(runs):
        decisions, used, best = race_once(means, sd, p, base, rng)
        values = list(decisions.values())
        if kind == "equal":
            errors += SEPARATED in values
        elif kind == "at margin":
            # only a pair whose true difference is the margin: the best on validation may be another
            errors += any(d == EQUIVALENT and abs(means[f] - means[best]) >= p.margin - 1e-12
                          for f, d in decisions.items())
        separated += values.count(SEPARATED)
        pairs += len(values)
        decided += all(d != AT_CAP for d in values)
        seeds += list(used.values())
    return {"field": kind, "runs": runs, "error_rate": errors / runs, "decided_share": decided / runs,
            "separated_share": separated / max(pairs, 1), "mean_seeds": statistics.fmean(seeds),
            "max_seeds_used": max(seeds)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--families", type=int, default=3)
    parser.add_argument("--sd", type=float, default=0.01)
    parser.add_argument("--margin", type=float, default=0.01)
    parser.add_argument("--max-seeds", type=int, default=10)
    parser.add_argument("--seeds-per-round", type=int, default=1)
    parser.add_argument("--base", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    p = RaceParams(enabled=True, margin=args.margin, max_seeds=args.max_seeds, seeds_per_round=args.seeds_per_round,
                   alpha=args.alpha)
    rows = [simulate(kind, args.runs, args.families, args.sd, p, args.base) for kind in FIELDS]
    lines = [f"Race error rates by simulation: {args.runs} races per field, {args.families} families, per-seed sd "
             f"{args.sd:g}, margin {args.margin:g}, {args.base} seeds then {args.seeds_per_round} a round up to "
             f"{args.max_seeds}, alpha {args.alpha:g} ({p.looks(args.base)} looks at most, "
             f"{p.alpha_per_look(args.base):.4f} each).", "",
             "| field | error rate | decided | pairs separated | mean seeds | most seeds |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['field']} | {r['error_rate']:.3f} | {r['decided_share']:.3f} | {r['separated_share']:.3f} | "
              f"{r['mean_seeds']:.2f} | {r['max_seeds_used']} |" for r in rows]
    text = "\n".join(lines) + "\n"
    save_report(args.out, "race_error", {"params": vars(args) | {"out": str(args.out)}, "rows": rows}, text)
    print(text)


if __name__ == "__main__":
    main()
