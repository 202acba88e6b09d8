"""One verdict line per dataset: which family is best, or which are tied at the top and whether
they are shown equivalent, and where the classical reference stands.

The comparison is on the per-seed test scores (per search repeat with repeats: tables.test_units),
as the table's Welch column is; the best family is the one chosen on validation
(pipeline.reporting.ties). Against the best, each other family gets

- Welch's t-test (scipy): separated where its Holm-adjusted p-value is below alpha;
- for the families not separated, two one-sided Welch tests (TOST, statsmodels' `ttost_ind`)
  with the margin ±m: shown equivalent where every Holm-adjusted TOST p-value is below alpha.

Holm runs across the pairs against the best, so the chance of calling any equal pair separated
stays at alpha. Where the final stage raced (pipeline.final.race), every look at the data spent a
share of alpha: the verdict then uses the race's alpha per look (`race.alpha_per_look` in the
records), which is what the race decided with.

Seeds needed (normal approximation, power 1 - BETA, per family): for a pair whose observed
difference d lies inside the margin, n = 2 s^2 (z_{1-a} + z_{1-BETA})^2 / (m - |d|)^2 to show it
equivalent; for one outside, n = 2 s^2 (z_{1-a/2} + z_{1-BETA})^2 / d^2 to separate it; s^2 the
mean of the two per-seed variances. The largest over the tied pairs is quoted, a rough guide.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.reporting.numbers import fmt
from pipeline.reporting.paper_column import mean_interval
from pipeline.comparison.pairs import decide
from pipeline.config.race import RaceParams

# Without a race in the records: the defaults of final.race (its margin is the verdict's too)
ALPHA, DEFAULT_MARGIN = RaceParams().alpha, RaceParams().margin
BETA = 0.2  # power 80 % for the seeds-needed estimate
MANY_SEEDS = 100  # above this, the line says "more than 100": a normal approximation that far out is no count


@dataclass(frozen=True)
class Verdict:
    """A dataset's verdict. `top`: the best family first, then those not separated from it.
    `p_separation`: family -> Holm-adjusted Welch p against the best; `p_equivalence`: family in
    `top` -> Holm-adjusted TOST p. `equivalent`: None with a single family at the top.
    `classical`: "above", "inside" or "below" the best family's 95 % interval of its test mean
    (numerically; None without a usable reference or interval)."""

    best: str
    top: list[str]
    p_separation: dict[str, float]
    p_equivalence: dict[str, float]
    equivalent: bool | None
    margin: float
    alpha: float
    seeds_needed: int | None
    classical: str | None
    line: str
    interval: tuple[float, float] | None = field(default=None)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["p_separation"] = {k: _rounded(v) for k, v in self.p_separation.items()}
        out["p_equivalence"] = {k: _rounded(v) for k, v in self.p_equivalence.items()}
        out["interval"] = None if self.interval is None else [round(x, 6) for x in self.interval]
        return out


def _rounded(p: float) -> float | None:
    return None if math.isnan(p) else round(p, 6)


def seeds_needed(a: list[float], b: list[float], margin: float, alpha: float) -> int | None:
    """Seeds per family to decide the pair (module docstring); None where no spread is known."""
    from scipy.stats import norm

    if len(a) < 2 or len(b) < 2:
        return None
    var = (statistics.variance(a) + statistics.variance(b)) / 2
    d = abs(statistics.fmean(a) - statistics.fmean(b))
    if var == 0:
        return None
    if d < margin:
        n = 2 * var * (norm.ppf(1 - alpha) + norm.ppf(1 - BETA)) ** 2 / (margin - d) ** 2
    else:
        n = 2 * var * (norm.ppf(1 - alpha / 2) + norm.ppf(1 - BETA)) ** 2 / d ** 2
    return max(2, math.ceil(n))


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _p(p: float) -> str:
    return "p n/a" if math.isnan(p) else ("p < 0.001" if p < 0.001 else f"p = {p:.3f}")


def _margin(margin: float, metric: str) -> str:
    return f"±{100 * margin:.2f} points" if metric == "accuracy" else f"±{margin:g}"


def verdict(scores: dict[str, list[float]], best: str, metric: str, margin: float, alpha: float = ALPHA,
            classical: float | None = None, classical_name: str = "the classical reference") -> Verdict:
    """The verdict from per-seed test scores ({family: scores}, the non-failed families), the
    best family on validation, the equivalence margin (metric units: 0.01 is one point of
    accuracy), alpha per look, and the classical reference's test score (None: not stated)."""
    separation, equivalence = decide(scores, best, margin, alpha)
    tied = [f for f in scores if f != best and not separation[f] < alpha]
    top = [best, *tied]
    if not tied:
        largest = max((p for p in separation.values() if not math.isnan(p)), default=math.nan)
        line = (f"{best} is best, separated from every other family (largest Holm-adjusted Welch {_p(largest)})"
                if separation else f"{best} is the only family compared")
        equivalent, needed = None, None
    else:
        smallest = min((separation[f] for f in tied if not math.isnan(separation[f])), default=math.nan)
        equivalent = all(equivalence[f] < alpha for f in tied)
        line = (f"{_names(top)} are tied at the top: none separated from {best} (smallest Holm-adjusted Welch "
                f"{_p(smallest)})")
        if equivalent:
            needed = None
            line += f", and equivalent within {_margin(margin, metric)} (TOST)"
        else:
            counts = [seeds_needed(scores[f], scores[best], margin, alpha) for f in tied if equivalence[f] >= alpha
                      or math.isnan(equivalence[f])]
            needed = max((n for n in counts if n is not None), default=None)
            # beyond MANY_SEEDS the estimate says only that seeds will not settle it (metrics.json keeps it)
            more = ("" if not needed else f" (about {needed} seeds per family by the observed spread)"
                    if needed <= MANY_SEEDS else f" (more than {MANY_SEEDS} seeds per family by the observed spread)")
            line += f"; not shown equivalent within {_margin(margin, metric)}: more seeds would be needed{more}"
    interval = mean_interval(scores[best])
    where = None
    if classical is not None and interval is not None:
        where = "above" if classical > interval[1] else "below" if classical < interval[0] else "inside"
        line += (f". {classical_name[0].upper()}{classical_name[1:]} ({fmt(classical, None, metric)}) lies {where} "
                 f"{best}'s 95 % interval ({fmt(interval[0], None, metric)}-{fmt(interval[1], None, metric)})")
    return Verdict(best, top, separation, equivalence, equivalent if tied else None, margin, alpha, needed, where,
                   line + ".", interval)


def dataset_verdict(ok: dict[str, dict[str, Any]], best: str | None, reference: Any = None) -> Verdict | None:
    """The verdict of one dataset's non-failed final records (None when every family failed):
    test scores per seed (per repeat with search repeats), the race's margin and alpha per look
    where the final stage raced (the records' `race`), else DEFAULT_MARGIN and ALPHA; `reference`:
    the classical reference record (pipeline.reporting.classical_reference)."""
    from pipeline.reporting import classical_reference as classical
    from pipeline.reporting.tables import repeated, test_units

    if best is None:
        return None
    by_repeat = repeated(ok)
    metric = ok[best]["metric"]
    race = ok[best].get("race") or {}
    shown = classical.usable(reference, metric)
    return verdict({f: test_units(r, by_repeat) for f, r in ok.items()}, best, metric,
                   float(race.get("margin", DEFAULT_MARGIN)), float(race.get("alpha_per_look", ALPHA)),
                   None if shown is None else float(shown["test"]),
                   f"the classical reference {shown['classifier']}" if shown else "the classical reference")


def race_line(ok: dict[str, dict[str, Any]], best: str | None) -> str | None:
    """Under the verdict, where the final stage raced: its looks, the seeds each family reached and
    how each pair ended (pipeline.final.race); None where it did not race."""
    if best is None:
        return None
    race = ok[best].get("race") or {}
    if not race.get("enabled") or not race.get("decisions"):
        return None
    decided = "; ".join(f"{f} {d} ({ok[f]['n_seeds']} seeds)" for f, d in race["decisions"].items() if f in ok)
    return (f"Seeds raced (`final.race`: ±{race['margin']:g}, at most {race['max_seeds']} seeds, alpha "
            f"{race['alpha']:g} over {race['max_looks']} looks): {race['looks']} look(s); against {best} "
            f"({ok[best]['n_seeds']} seeds): {decided}.")
