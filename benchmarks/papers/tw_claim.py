"""Does a paper's efficiency claim hold on our records? Temporal Weights, Table 1(a): the latent ODE
with temporal weights reaches the plain latent ODE's AUC in fewer epochs (31 against 80) with fewer
parameters (Kohan, Rietman & Siegelmann 2022, Sec. 3.1 and Table 1(a): L-ODE 0.857 AUC at 80 epochs,
0.836 at 31, 163,972 parameters; with TW 0.861 at 31 epochs, 76,427 parameters; "about 1.5x slower
per epoch").

    .venv/bin/python -m benchmarks.papers.tw_claim --root PROJECT [--dataset physionet2012] \
        [--baseline latent_ode] [--candidate latent_ode_tw] [--out DIR]

From the two families' final records (results/<dataset>/final/<family>.json): parameters, epochs,
seconds per epoch and training wall per seed, the test scores of each (the epoch of best
validation, as every table of ours), the difference of the means with Welch's 95 % interval
(scipy.stats.ttest_ind, unequal variances), and the mean validation curve of each: the baseline's at
the candidate's last epoch, and the first epoch at which the baseline's mean curve reaches the
candidate's best. The claim's verdict:

    holds            fewer parameters, fewer epochs, and the candidate's mean test score at least the baseline's
    not separated    fewer parameters and epochs, the candidate's mean below, but Welch's interval of the
                     difference includes zero: these seeds cannot tell the two apart
    does not hold    the candidate has no fewer parameters or epochs, or the interval lies wholly below zero

"Fewer epochs" means trained for fewer, and the baseline's mean validation curve not reaching the
candidate's best by the candidate's last epoch (else the baseline needed no more epochs).

Writes tw_claim.md and tw_claim.json to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report

HOLDS, NOT_SEPARATED, FAILS = "holds", "not separated", "does not hold"
SENTENCE = {HOLDS: "The claim holds.", FAILS: "The claim does not hold.",
            NOT_SEPARATED: "The claim is neither confirmed nor refuted: these seeds do not separate the two means."}


def _record(root: Path, dataset: str, family: str) -> dict[str, Any]:
    path = root / "results" / dataset / "final" / f"{family}.json"
    if not path.is_file():
        raise SystemExit(f"{path}: no final record of {family} on {dataset}; run `ctsweep final {dataset}` first")
    record = json.loads(path.read_text())
    scored = [s for s in record.get("seeds", []) if s.get("test") is not None and s.get("curve")]
    if len(scored) < 2:
        raise SystemExit(f"{path}: {len(scored)} seed(s) with a test score and a curve; the comparison needs 2 or more")
    return {**record, "seeds": scored}


def mean_curve(curves: list[list[float]]) -> list[float]:
    """Epoch by epoch mean of the seeds' validation curves, up to the shortest (a seed stopped early
    has no later epochs to average)."""
    n = min(len(c) for c in curves)
    return [statistics.fmean(c[i] for c in curves) for i in range(n)]


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """One family's figures from its final record (mode `max`: a higher validation score is better)."""
    seeds = record["seeds"]
    tests = [s["test"] for s in seeds]
    curve = mean_curve([s["curve"] for s in seeds])
    params = sorted({int(s["num_params"]) for s in seeds if s.get("num_params") is not None})
    per_epoch = [s["seconds_per_epoch"] for s in seeds if s.get("seconds_per_epoch")]
    epochs = max(len(s["curve"]) for s in seeds)
    return {"family": record["family"], "n": len(tests), "tests": tests, "test_mean": statistics.fmean(tests),
            "test_std": statistics.stdev(tests), "num_params": params[0] if len(params) == 1 else params,
            "epochs": epochs, "seconds_per_epoch": statistics.median(per_epoch) if per_epoch else None,
            "wall_s_per_seed": statistics.median(per_epoch) * epochs if per_epoch else None,
            "best_epochs": [s.get("best_epoch") for s in seeds], "val_curve": curve, "val_best": max(curve)}


def compare(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any]:
    """The claim's figures and verdict for summaries `base` (the baseline) and `cand` (the candidate)."""
    from scipy import stats

    welch = stats.ttest_ind(cand["tests"], base["tests"], equal_var=False)
    low, high = (float(v) for v in welch.confidence_interval(0.95))
    diff = cand["test_mean"] - base["test_mean"]
    at = min(cand["epochs"], len(base["val_curve"]))
    reached = next((i + 1 for i, v in enumerate(base["val_curve"]) if v >= cand["val_best"]), None)
    # a list of counts: the seeds' models differ in size, which no claim of fewer parameters can read
    counted = isinstance(cand["num_params"], int) and isinstance(base["num_params"], int)
    leaner = counted and cand["num_params"] < base["num_params"]
    # fewer epochs as trained, and the baseline no faster to the candidate's best on validation
    shorter = cand["epochs"] < base["epochs"] and (reached is None or reached > cand["epochs"])
    if leaner and shorter and diff >= 0:
        claim = HOLDS
    elif leaner and shorter and high >= 0:  # diff < 0 here: does the interval reach zero?
        claim = NOT_SEPARATED
    else:
        claim = FAILS
    wall = (cand["wall_s_per_seed"] / base["wall_s_per_seed"]
            if cand["wall_s_per_seed"] and base["wall_s_per_seed"] else None)
    return {"diff": diff, "interval": [low, high], "p_value": float(welch.pvalue), "df": float(welch.df),
            "params_ratio": cand["num_params"] / base["num_params"] if counted else None,
            "base_val_at_cand_epochs": base["val_curve"][at - 1], "at_epoch": at,
            "base_reaches_cand_best_at": reached, "wall_ratio": wall, "claim": claim}


def render(report: dict[str, Any]) -> str:
    b, c, k = report["baseline"], report["candidate"], report["comparison"]
    lines = [f"# {c['family']} against {b['family']} on {report['dataset']}: fewer epochs, fewer parameters?", "",
             "| | parameters | epochs | s/epoch | training wall per seed | test (n) | best of the mean validation curve |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for s in (b, c):
        per_epoch = f"{s['seconds_per_epoch']:.1f}" if s["seconds_per_epoch"] else "—"
        wall = f"{s['wall_s_per_seed'] / 60:.0f} min" if s["wall_s_per_seed"] else "—"
        lines.append(f"| {s['family']} | {s['num_params']:,} | {s['epochs']} | {per_epoch} | {wall} | "
                     f"{s['test_mean']:.4f} ± {s['test_std']:.4f} ({s['n']}) | {s['val_best']:.4f} |")
    low, high = k["interval"]
    lines += ["", f"- Test, {c['family']} minus {b['family']}: {k['diff']:+.4f}, Welch's 95 % interval "
                  f"{low:+.4f} to {high:+.4f} (p = {k['p_value']:.2f}).",
              f"- {b['family']}'s mean validation curve at epoch {k['at_epoch']}: {k['base_val_at_cand_epochs']:.4f}; "
              + (f"it first reaches {c['family']}'s best ({c['val_best']:.4f}) at epoch {k['base_reaches_cand_best_at']}."
                 if k["base_reaches_cand_best_at"] else f"it never reaches {c['family']}'s best ({c['val_best']:.4f})."),
              (f"- Parameters: {k['params_ratio']:.2f} of the baseline's; " if k["params_ratio"] else "- ")
              + (f"training wall per seed: {k['wall_ratio']:.2f} of the baseline's." if k["wall_ratio"] else ""),
              "", f"**{SENTENCE[k['claim']]}**"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the project whose results/ holds the final records")
    ap.add_argument("--dataset", default="physionet2012")
    ap.add_argument("--baseline", default="latent_ode")
    ap.add_argument("--candidate", default="latent_ode_tw")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    root = args.root.resolve()
    base, cand = (summary(_record(root, args.dataset, f)) for f in (args.baseline, args.candidate))
    report = {"root": str(root), "dataset": args.dataset, "baseline": base, "candidate": cand,
              "comparison": compare(base, cand)}
    text = render(report)
    save_report(args.out, "tw_claim", report, text)
    print(text)
    return report


if __name__ == "__main__":
    main()
