"""The search's own variance in the final stage (issue 28, `search.repeats`): which configuration
each repeat of a family's search found, and how far the repeats' means lie apart.

With R repeats the final stage trains each repeat's best on every seed; the record's scores are
then over all R x seeds runs, and `repeats` / `repeat_*_std` say what the search alone adds
(Bouthillier et al. 2021, "Accounting for variance in machine learning benchmarks", MLSys).
"""

from __future__ import annotations

from typing import Any

from pipeline.final.counts import split_summary, summary


def searched_repeats(searched: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """[(repeat, best configuration)] of every repeat of the search that found one (`search.repeats`;
    a record without `repeats` is one search, repeat 0)."""
    if "repeats" not in searched:
        return [(int(searched.get("repeat", 0)), searched["best_config"])]
    return [(int(r["repeat"]), r["best_config"]) for r in searched["repeats"] if r["status"] == "ok"]


def between_repeats(searched: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The spread the search itself adds (Bouthillier et al. 2021): per repeat of the search, the
    mean over its seeds, and the standard deviation of those means (ddof 1; 0 for one repeat)."""
    configs = dict(searched_repeats(searched))
    per = []
    for repeat in sorted({r.get("repeat", 0) for r in runs}):
        mine = [r for r in runs if r.get("repeat", 0) == repeat]
        val_mean, val_std = split_summary(mine, "val")
        test_mean, test_std = split_summary(mine, "test")
        per.append({"repeat": repeat, "config": configs.get(repeat), "n_seeds": len(mine), "val_mean": val_mean,
                    "val_std": val_std, "test_mean": test_mean, "test_std": test_std})
    return {"n_repeats": len(per), "repeats": per,
            "repeat_val_std": summary([r["val_mean"] for r in per])[1],
            "repeat_test_std": summary([r["test_mean"] for r in per])[1]}
