"""Racing the final seeds (`final.race`): more seeds where the comparison is still open.

After the configured seeds, each look at a dataset's results takes the best family on validation
(pipeline.comparison.ties) and tests every other family against it on the per-seed test scores,
as the verdict does (pipeline.comparison.pairs.decide): separated (Welch), shown equivalent within
the margin (TOST), or open. While a family is open and below `max_seeds`, it and the best gain
`seeds_per_round` seeds and the dataset is looked at again; the race of a dataset ends when no
family is open, or every open one (or the best) is at the cap.

Error rate: every look is a test of the same pairs again, and each look tests several pairs. The
race spends alpha / L at each of its at most L looks (RaceParams.looks; Bonferroni over looks,
valid whatever their dependence) and Holm's step-down across the pairs within a look; so the
chance that it ever calls an equal pair separated, or a pair at the margin equivalent, stays at
or under alpha. It is conservative: a race that stops early has spent less. The racing literature
(irace's F-race, Birattari et al. 2002; Hoeffding races, Maron & Moore 1994) races configurations
the same way; this one races families on seeds, and tests as the report does.

The race reads only scores and positions, never the time: a resumed or reloaded stage that holds
the same seed results takes the same decisions and asks for the same seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.config.race import RaceParams

SEPARATED, EQUIVALENT, OPEN, AT_CAP = "separated", "equivalent", "open", "open at the cap"


@dataclass(frozen=True)
class Look:
    """One look at a dataset: the best family, each other family's decision, and the families
    that gain a round of seeds (empty: the race of this dataset is over)."""

    best: str | None
    decisions: dict[str, str]
    extend: list[str]


def look(records: dict[str, dict[str, Any]], p: RaceParams, base: int) -> Look:
    """Decide one look from provisional records ({family: record with `metric`, `mode`,
    `val_mean`, `val_loss_mean`, optional `val_counts`, and `seeds`: [{"test": score}, ...]}, the
    non-failed families only); `base`: the configured seeds (alpha per look depends on it)."""
    from pipeline.comparison.pairs import decide
    from pipeline.comparison.ties import best_family

    best = best_family(records)
    if best is None or len(records) < 2:
        return Look(best, {}, [])
    alpha = p.alpha_per_look(base)
    scores = {f: [s["test"] for s in r["seeds"]] for f, r in records.items()}
    separation, equivalence = decide(scores, best, p.margin, alpha)
    decisions = {}
    for family in scores:
        if family == best:
            continue
        if separation[family] < alpha:
            decisions[family] = SEPARATED
        elif equivalence.get(family, 1.0) < alpha:
            decisions[family] = EQUIVALENT
        else:
            decisions[family] = OPEN
    open_ = [f for f, d in decisions.items() if d == OPEN]
    room = {f: len(scores[f]) < p.max_seeds for f in [best, *open_]}
    if not p.enabled or not open_ or not room[best] or not any(room[f] for f in open_):
        decisions = {f: AT_CAP if d == OPEN and p.enabled else d for f, d in decisions.items()}
        return Look(best, decisions, [])
    return Look(best, decisions, [f for f in [best, *open_] if room[f]])


def more_seeds(taken: Sequence[int], n: int, avoid: Sequence[int] = ()) -> list[int]:
    """The next `n` seeds after the highest of `taken` (the configured and earlier race seeds),
    skipping `avoid` (the search's trial seeds: final seeds must be fresh)."""
    out: list[int] = []
    seed = max(taken) + 1
    while len(out) < n:
        if seed not in avoid:
            out.append(seed)
        seed += 1
    return out


def race_summary(p: RaceParams, base: int, looks: int, final: Look | None) -> dict[str, Any]:
    """What a final record keeps of the race (`race`): its settings, alpha per look (the verdict
    tests with it), the looks taken and the last look's decisions."""
    return {"enabled": p.enabled, "margin": p.margin, "alpha": p.alpha, "alpha_per_look": p.alpha_per_look(base),
            "max_seeds": p.max_seeds, "seeds_per_round": p.seeds_per_round, "looks": looks,
            "max_looks": p.looks(base), **({"best": final.best, "decisions": final.decisions} if final else {})}
