"""When would Optuna's terminator have stopped a recorded search, against `search.saturation`'s rule?

    .venv/bin/python -m benchmarks.rules.terminator_compare --root PROJECT --dataset japanese_vowels \
        [--error 0.0185] [--rise 0.01] [--out DIR]

For each family's search record (results/<dataset>/search/<family>.json), its completed trials
are replayed in trial-number order into a fresh Optuna study (the searched keys with the
record's ranges as distributions, each trial's kept validation score as its value). After every
round of two trials, two rules say whether to stop:

- **expected best** (pipeline.sweep.saturation.rising, what `search.saturation` uses): stop once
  E[best of all trials] beats E[best of half] by no more than `rise` of its value;
- **Optuna's terminator** (`optuna.terminator.Terminator`: Makarova et al. 2022, "Automatic
  termination for hyperparameter optimization"): stop once its upper bound on the regret (a
  Gaussian-process bound over the top half of the trials, `RegretBoundEvaluator`) falls below
  the objective's statistical error. No cross-validation scores exist here, so the error is a
  constant (`StaticErrorEvaluator`): one validation series' worth of accuracy (1/54 on
  JapaneseVowels' validation split) by default, the smallest step the score can take.

`optuna.terminator` is deprecated since Optuna 4.9 and goes in 6.0: this script only reads its
decisions to compare; ctsweep builds on neither it nor a copy of it. Its own default waits for 20
trials (`min_n_trials`) before it decides anything, more than the default searches run; it is
set to 4 here so that it decides at all. Writes terminator_compare.json and .md to --out.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report


def distributions(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Optuna distributions from a search record's `space` (pipeline.sweep.records.space_record)."""
    import optuna.distributions as d

    out = {}
    for name, r in space.items():
        if r["type"] == "categorical":
            out[name] = d.CategoricalDistribution(r["choices"])
        elif r["type"] == "int":
            out[name] = d.IntDistribution(r["low"], r["high"], log=r["log"], step=1 if r["log"] else r.get("step", 1))
        else:
            out[name] = d.FloatDistribution(r["low"], r["high"], log=r["log"])
    return out


def replay(record: dict[str, Any], error: float, rise: float, min_trials: int = 4) -> list[dict[str, Any]]:
    """Per round end n = min_trials, min_trials + 2, ...: both rules' decisions on the first n trials."""
    import optuna
    from optuna.terminator import RegretBoundEvaluator, StaticErrorEvaluator, Terminator

    from pipeline.sweep.saturation import rising

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = distributions(record.get("space") or {})
    trials = [t for t in sorted(record["trials"], key=lambda t: t.get("number", 0))
              if t.get("status") == "ok" and t.get("best_val") is not None]
    rows = []
    for n in range(min_trials, len(trials) + 1, 2):
        study = optuna.create_study(direction="maximize" if record["mode"] == "max" else "minimize")
        for t in trials[:n]:
            params = {k: v for k, v in t["config"].items() if k in dists}
            study.add_trial(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params},
                                                      value=float(t["best_val"])))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning / deprecation: the point is to read it
            terminator = Terminator(RegretBoundEvaluator(min_n_trials=min_trials, seed=0), StaticErrorEvaluator(error),
                                    min_n_trials=min_trials)
            bound = RegretBoundEvaluator(min_n_trials=min_trials, seed=0).evaluate(study.trials, study.direction)
            stop = terminator.should_terminate(study)
        scores = [float(t["best_val"]) for t in trials[:n]]
        rows.append({"family": record["family"], "n": n, "best": max(scores) if record["mode"] == "max" else min(scores),
                     "expected_best_stops": not rising(scores, record["mode"], rise), "terminator_stops": bool(stop),
                     "regret_bound": float(bound)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--error", type=float, default=1 / 54, help="the objective's error (StaticErrorEvaluator)")
    parser.add_argument("--rise", type=float, default=0.01)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for path in sorted((args.root / "results" / args.dataset / "search").glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("status") == "ok":
            rows += replay(record, args.error, args.rise)
    lines = [f"Stopping rules replayed on the recorded searches of {args.dataset} ({args.root}): after each round, "
             f"does the expected-best rule (rise {args.rise:g}) or Optuna's terminator (regret bound against an error "
             f"of {args.error:.4f}) say stop?", "",
             "| family | trials | best so far | expected best: stop | terminator: stop | regret bound |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['family']} | {r['n']} | {r['best']:.4f} | {'yes' if r['expected_best_stops'] else 'no'} | "
              f"{'yes' if r['terminator_stops'] else 'no'} | {r['regret_bound']:.4f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    save_report(args.out, "terminator_compare", {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, text)
    print(text)


if __name__ == "__main__":
    main()
