"""The best family on validation, and which families tie with it.

The rule (README, docs/explanation/promotion.md): the better mean validation metric over the
final seeds; among families whose means are equal, the lower mean validation loss at the kept
epochs; a family without a recorded loss loses the tie. Selection never reads test.

"Equal" means equal counts. An accuracy record keeps each seed's (correct, scored) counts and its
means are exact fractions of them (pipeline.final.counts), so families that classify the same
number of validation series over their seeds have the same mean to the last bit and tie. A
record from before the counts were kept carries float means that can differ in the last bits
for the same counts; its ties are decided as before, by the means rounded to ROUND_DIGITS, and
the report says so in one line (uncounted_note). Metrics that are no ratio of counts (AUROC,
MSE) are compared as rounded floats too.
"""

from __future__ import annotations

import math
from typing import Any


ROUND_DIGITS = 9  # the comparison of float means where no counts were recorded (as before counts)
UNCOUNTED_NOTE = ("Ties on validation are decided from the float means rounded to 9 digits: these records "
                  "predate the per-seed counts (equal counts may then differ in the last bits).")


def _ok(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The records of families that did not fail (a failed record: every search trial failed)."""
    return {f: r for f, r in results.items() if r.get("status") != "failed"}


def counted(results: dict[str, dict[str, Any]]) -> bool:
    """Whether every non-failed record's validation mean comes from counts (`val_counts`)."""
    ok = _ok(results)
    return bool(ok) and all(r.get("val_counts") for r in ok.values())


def _levels(ok: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each non-failed family's validation mean as ties compare it (larger is better): exact where
    every record is counted, else rounded to ROUND_DIGITS."""
    exact = counted(ok)
    levels = {}
    for family, record in ok.items():
        value = (1.0 if record["mode"] == "max" else -1.0) * record["val_mean"]
        levels[family] = value if exact else round(value, ROUND_DIGITS)
    return levels


def best_family(results: dict[str, dict[str, Any]]) -> str | None:
    """The family chosen by the rule (module docstring) among those that did not fail; the first
    in the given order among complete equals. None when every family failed."""
    ok = _ok(results)
    if not ok:
        return None
    levels = _levels(ok)

    def merit(family: str) -> tuple[float, float]:
        loss = ok[family].get("val_loss_mean")
        return levels[family], -(math.inf if loss is None else loss)

    return max(ok, key=merit)


def tied_at_top(results: dict[str, dict[str, Any]]) -> list[str]:
    """The non-failed families whose validation mean equals the best's (the best among them), in
    the given order; one name when nothing ties, none when every family failed."""
    best = best_family(results)
    if best is None:
        return []
    levels = _levels(_ok(results))
    return [f for f, level in levels.items() if level == levels[best]]


def uncounted_note(results: dict[str, dict[str, Any]]) -> str | None:
    """The footnote for accuracy records without counts, where it decides a tie; None otherwise."""
    ok = _ok(results)
    if not ok or counted(ok) or next(iter(ok.values()))["metric"] != "accuracy" or len(tied_at_top(ok)) < 2:
        return None
    return UNCOUNTED_NOTE
