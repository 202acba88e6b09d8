"""Show your work: the expected best validation score of a search as a function of its number of
trials, and the mark of a search that was still gaining when it stopped.

Dodge et al. 2019 ("Show Your Work: Improved Reporting of Experimental Results", EMNLP), Sec. 3:
with the N trial scores v_(1) <= ... <= v_(N) taken as an empirical distribution, the best of n
draws with replacement is v_(i) with probability (i/N)^n - ((i-1)/N)^n, so

    E[max of n] = sum_i v_(i) * ((i/N)^n - ((i-1)/N)^n),    n = 1 .. N            (Dodge Eq. 1)

(for a metric where lower is better, the minimum: the same on the negated scores). The band is
the 5th to 95th percentile of that curve over BOOTSTRAP resamples of the N scores, from a fixed
seed, so that the same records give the same numbers. The trials are every completed trial of the
search, all repeats pooled; a trial ASHA stopped early counts with the score it reached, as it is
what the search spent a trial on.

TPE proposes each trial from the ones before it, so the trials are not independent draws of one
distribution as the formula assumes: the curve estimates what a search of n trials would find;
it is not an exact expectation.

A search is marked `search_not_saturated` (marks.RULES) when E[max of N] improves on E[max of
ceil(N/2)] by more than SATURATION_SHARE of |E[max of N]|: the second half of its budget still
bought a clear gain, so more trials would likely have helped. Fewer than MIN_TRIALS completed
trials give no curve and no mark.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipeline.comparison.expected_best import _expected_max_rows, expected_max

from pipeline.reporting.marks import NOT_SATURATED, SATURATION_SHARE, Mark
from pipeline.reporting.numbers import fmt

BOOTSTRAP = 500  # resamples behind the band
BAND = (5.0, 95.0)  # percentiles of the band
SEED = 0  # of the bootstrap: the same records give the same band
MIN_TRIALS = 2  # fewer completed trials compare nothing


def trial_scores(search: dict[str, Any]) -> list[float]:
    """The kept validation scores of a search record's completed trials, every repeat pooled."""
    return [float(t["best_val"]) for t in search.get("trials", [])
            if t.get("status") == "ok" and t.get("best_val") is not None and math.isfinite(t["best_val"])]


def curve(values: list[float], mode: str) -> list[dict[str, float]]:
    """Per n = 1 .. N: {n, expected (E[best of n]), low, high (the bootstrap band)}; [] for fewer
    than MIN_TRIALS values."""
    if len(values) < MIN_TRIALS:
        return []
    rng = np.random.default_rng(SEED)
    v = np.asarray(values, dtype=np.float64)
    resampled = v[rng.integers(0, len(v), size=(BOOTSTRAP, len(v)))]  # (BOOTSTRAP, N)
    rows = []
    for n in range(1, len(v) + 1):
        low, high = np.percentile(_expected_max_rows(resampled, n, mode), BAND)
        rows.append({"n": n, "expected": expected_max(v, n, mode), "low": float(low), "high": float(high)})
    return rows


def not_saturated(rows: list[dict[str, float]], mode: str, metric: str) -> Mark | None:
    """The search_not_saturated mark of a curve (rows of `curve`), or None."""
    if not rows:
        return None
    full, half = rows[-1]["expected"], rows[math.ceil(len(rows) / 2) - 1]["expected"]
    gain = full - half if mode == "max" else half - full
    if gain <= SATURATION_SHARE * abs(full):
        return None
    return Mark(NOT_SATURATED, f"expected best {fmt(half, None, metric)} at {math.ceil(len(rows) / 2)} trials, "
                               f"{fmt(full, None, metric)} at {len(rows)}")


def saturation_detail(mark: Mark, search: dict[str, Any]) -> Mark:
    """The ↑ mark of a search run with `search.saturation`: how many trials it had and what stopped
    it still rising (the cap, or the dataset's budget spent on the other families)."""
    settings = search.get("saturation")
    if not settings:
        return mark
    n, repeats = search.get("n_trials", 0), max(1, len(search.get("repeats", [])))
    cap = settings["max_trials"] * repeats
    why = f"at the cap of {cap}" if n >= cap else "when the dataset's budget ran out"
    return Mark(mark.mark, f"{mark.detail} ({n} trials: still rising {why})")
