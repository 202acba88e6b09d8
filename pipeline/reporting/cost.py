"""Cost beside score: what each family's final seeds cost to train, and which families no other
beats on both test score and cost (the Pareto front).

    training cost   sum over the family's final seeds of seconds per epoch x epochs trained (the
                    length of the seed's validation curve); a seed without its own seconds per
                    epoch (older records) counts the record's median.

A family is on the front when no other family is at most as costly with a test mean at least as
good, one of the two strictly. Costs are wall-clock seconds on the machine and load of the run,
so they compare families within one report, not across machines. They are written to
reports/cost/<dataset>.csv and the plot only: reports/metrics.json, which two runs of the same
pipeline must reproduce byte for byte, holds the epochs trained instead.
"""

from __future__ import annotations

from typing import Any


def epochs_trained(final: dict[str, Any]) -> int:
    """Epochs trained, summed over the seeds of an ok final record: the part of the cost that
    does not depend on the machine (reports/metrics.json holds no timing)."""
    return sum(len(s.get("curve", [])) for s in final["seeds"])


def training_seconds(final: dict[str, Any]) -> float:
    """Seconds per epoch x epochs, summed over the seeds of an ok final record."""
    default = final.get("seconds_per_epoch", 0.0)
    return float(sum(s.get("seconds_per_epoch", default) * len(s.get("curve", [])) for s in final["seeds"]))


def pareto_front(points: dict[str, tuple[float, float]], mode: str) -> set[str]:
    """The families no other dominates. points: family -> (cost, test mean); lower cost is
    better, and the higher test mean where `mode` is "max"."""
    sign = 1.0 if mode == "max" else -1.0

    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        no_worse = a[0] <= b[0] and sign * a[1] >= sign * b[1]
        return no_worse and (a[0] < b[0] or sign * a[1] > sign * b[1])

    return {f for f, p in points.items() if not any(dominates(q, p) for g, q in points.items() if g != f)}


def cost_rows(ok: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per ok family: {family, training_seconds, test_mean, test_std, pareto (1 or 0)}."""
    if not ok:
        return []
    costs = {f: training_seconds(r) for f, r in ok.items()}
    front = pareto_front({f: (costs[f], r["test_mean"]) for f, r in ok.items()}, next(iter(ok.values()))["mode"])
    return [{"family": f, "training_seconds": round(costs[f], 3), "test_mean": r["test_mean"],
             "test_std": r["test_std"], "pareto": int(f in front)} for f, r in ok.items()]
