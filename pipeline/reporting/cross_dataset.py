"""Families compared across datasets: mean ranks, pairwise Wilcoxon-Holm tests, and whether the
number of datasets can separate any two families at all.

One dataset's table says which family won there; across datasets the question is whether a
family wins consistently. Following Demšar (2006, JMLR 7, "Statistical comparisons of classifiers
over multiple data sets") and Benavoli et al. (2016, JMLR 17, "Should we really use post-hoc tests
based on mean-ranks?"), each family is ranked on each dataset by its test mean (1 = best, ties
share their mean rank), the ranks are averaged, and every pair of families is compared with
Wilcoxon's signed-rank test on the per-dataset test means, Holm-corrected over the pairs.

A dataset is one observation of that test, so few datasets have little power: with N datasets the
smallest two-sided p-value Wilcoxon can give is 2 / 2**N (every dataset won by the same family),
and Holm's first threshold is alpha / (K(K-1)/2) for K families. When the first cannot pass the
second no pair can ever be separated, and "no significant difference" would only restate that:
`Power` says so, and the diagram draws no clique bars then.

Only library statistics: scipy (ranks), scikit-posthocs (Wilcoxon + Holm through statsmodels) and
the report's Welch test (pipeline.reporting.tables.welch_vs_best) for win / tie / loss.
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats as sps

from pipeline.reporting.marks import is_failed
from pipeline.runtime.collector import young_objects_only
from pipeline.reporting.status import ACROSS_DATASETS
from pipeline.reporting.tables import ALPHA, welch_vs_best
from pipeline.stores.paths import processed_dir
from pipeline.stores.schema import read_record

METRICS_KEY = ACROSS_DATASETS  # the top-level key of reports/metrics.json that holds the comparison
DIGITS = 9  # test means equal to 9 decimals are equal: seed means of equal scores differ in the last bits


@dataclass(frozen=True)
class Power:
    """Whether N datasets can separate any two of K families with Wilcoxon-Holm at `alpha`."""

    n_datasets: int
    n_families: int
    alpha: float = ALPHA

    @property
    def n_pairs(self) -> int:
        return self.n_families * (self.n_families - 1) // 2

    @property
    def smallest_p(self) -> float:
        """Wilcoxon's smallest two-sided p over N datasets: one family wins all of them. scipy's
        exact null distribution (up to 50 datasets; with tied or zero differences, its permutation
        test up to 13) puts 2 of the 2**N sign patterns at that extreme; zero differences are
        dropped, which only raises it."""
        return 2.0 / 2 ** self.n_datasets

    @property
    def first_threshold(self) -> float:
        """Holm's threshold for the smallest of the pairs' p-values."""
        return self.alpha / max(self.n_pairs, 1)

    @property
    def enough(self) -> bool:
        return self.smallest_p < self.first_threshold

    @property
    def needed(self) -> int:
        """The fewest datasets whose smallest p passes Holm's first threshold (K families)."""
        n = 1
        while not Power(n, self.n_families, self.alpha).enough:
            n += 1
        return n


@dataclass(frozen=True)
class Comparison:
    """The families across the datasets that have every family's result.

    ranks: family -> dataset -> rank (1 = best); mean_ranks: family -> mean rank, families in
    their params.yaml order; p_holm: family -> family -> Holm-adjusted Wilcoxon p-value (1 on the
    diagonal); best: the lowest mean rank (ties: the family listed first); wtl: family -> (wins,
    ties, losses) against the best family, None for the best; left_out: dataset -> its failed
    families."""

    metric: str
    mode: str
    datasets: tuple[str, ...]
    ranks: dict[str, dict[str, float]]
    mean_ranks: dict[str, float]
    p_holm: dict[str, dict[str, float]]
    best: str
    wtl: dict[str, tuple[int, int, int] | None]
    left_out: dict[str, tuple[str, ...]]
    power: Power

    def significant(self, a: str, b: str) -> bool:
        return self.p_holm[a][b] < self.power.alpha


@dataclass(frozen=True)
class Refusal:
    """Why the datasets are not compared, as the one line the report prints; `warn`: whether it
    is a problem of the inputs (different metrics or tasks), worth a warning on stderr."""

    line: str
    warn: bool = False


def dataset_tasks(root: Path, datasets: list[str]) -> dict[str, str | None]:
    """Each dataset's task from its processed meta.json (None where it is not on disk). The report
    stage does not depend on data/processed: a changed task changes the final records it does read."""
    tasks: dict[str, str | None] = {}
    for d in datasets:
        path = processed_dir(root, d) / "meta.json"
        tasks[d] = read_record(path, f"ctsweep prepare {d}", {"task": str})["task"] if path.is_file() else None
    return tasks


def incomparable(finals: dict[str, dict[str, dict[str, Any]]], tasks: dict[str, str | None]) -> Refusal | None:
    """A refusal naming every dataset's metric (and task) when they do not all share one, else None.
    Ranks would survive a change of scale, but "better on accuracy" and "better on AUROC" (or on
    another task) are not one question."""
    metrics = {d: next(iter(res.values()))["metric"] for d, res in finals.items()}
    known = {t for t in tasks.values() if t is not None}
    if len(set(metrics.values())) == 1 and len(known) <= 1:
        return None
    shown = ", ".join(f"{d} ({metrics[d]}{', ' + tasks[d] if tasks.get(d) else ''})" for d in finals)
    return Refusal(f"Not compared across datasets: they differ in metric or task: {shown}.", warn=True)


def compare(finals: dict[str, dict[str, dict[str, Any]]], tasks: dict[str, str | None],
            alpha: float = ALPHA) -> Comparison | Refusal | None:
    """The comparison across `finals` (dataset -> family -> final record, failed ones included);
    None for fewer than two datasets; a Refusal where the datasets cannot be compared."""
    if len(finals) < 2:
        return None
    refusal = incomparable(finals, tasks)
    if refusal is not None:
        return refusal
    families = list(next(iter(finals.values())))
    complete, left_out = _complete(finals)
    if len(families) < 2 or len(complete) < 2:
        n = len(complete)
        why = ("one family" if len(families) < 2 else
               f"{n} dataset{'' if n == 1 else 's'} with every family's result, two needed")
        return Refusal(f"Not compared across datasets: {why}{_left_out_text(left_out)}.")
    mode = next(iter(complete.values()))[families[0]]["mode"]
    per_dataset = dataset_ranks(complete, mode)
    ranks = {f: {d: per_dataset[d][f] for d in complete} for f in families}
    mean_ranks = {f: statistics.fmean(ranks[f].values()) for f in families}
    best = min(families, key=lambda f: mean_ranks[f])  # min keeps the first of equal mean ranks
    return Comparison(metric=next(iter(complete.values()))[best]["metric"], mode=mode, datasets=tuple(complete),
                      ranks=ranks, mean_ranks=mean_ranks, p_holm=pairwise(complete, families), best=best,
                      wtl=win_tie_loss(complete, best, mode, alpha), left_out=left_out,
                      power=Power(len(complete), len(families), alpha))


def _complete(finals: dict[str, dict[str, dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """(the datasets every family has a result on, dataset -> its failed families for the rest):
    a rank among fewer families, or a Wilcoxon pair with a hole, would not be the same comparison."""
    failed = {d: tuple(f for f, r in res.items() if is_failed(r)) for d, res in finals.items()}
    return {d: res for d, res in finals.items() if not failed[d]}, {d: fs for d, fs in failed.items() if fs}


def _left_out_text(left_out: dict[str, tuple[str, ...]]) -> str:
    return f" (left out: {left_out_line(left_out)})" if left_out else ""


def left_out_line(left_out: dict[str, tuple[str, ...]]) -> str:
    """"d3 (failed: cfc, ncde); d5 (failed: ode_rnn)"."""
    return "; ".join(f"{d} (failed: {', '.join(fs)})" for d, fs in left_out.items())


def _test_means(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {f: round(r["test_mean"], DIGITS) for f, r in results.items()}


def dataset_ranks(finals: dict[str, dict[str, dict[str, Any]]], mode: str) -> dict[str, dict[str, float]]:
    """dataset -> family -> rank of its test mean on that dataset: 1 = best (the largest for
    mode "max"), tied means share the mean of their ranks (scipy.stats.rankdata, "average")."""
    out = {}
    for d, results in finals.items():
        means = _test_means(results)
        sign = -1.0 if mode == "max" else 1.0
        ranked = sps.rankdata([sign * m for m in means.values()], method="average")
        out[d] = {f: float(r) for f, r in zip(means, ranked)}
    return out


def pairwise(finals: dict[str, dict[str, dict[str, Any]]], families: list[str]) -> dict[str, dict[str, float]]:
    """family -> family -> Wilcoxon signed-rank p-value on the per-dataset test means of the two,
    Holm-adjusted over every pair (scikit-posthocs), 1 on the diagonal. Two families with equal
    means on every dataset get p = 1."""
    import pandas as pd  # late: scikit-posthocs and pandas load in seconds, and promote imports the report
    import scikit_posthocs as sp

    means = [_test_means(res) for res in finals.values()]
    # long format, each family's rows in the same dataset order: Wilcoxon pairs them by position
    rows = [(f, m[f]) for f in families for m in means]
    frame = pd.DataFrame(rows, columns=["family", "test_mean"])
    # young_objects_only: its Holm adjustment is statsmodels', which collects the whole heap
    with warnings.catch_warnings(), young_objects_only():  # all-zero differences: scipy warns on the way to its p = 1
        warnings.simplefilter("ignore", RuntimeWarning)
        table = sp.posthoc_wilcoxon(frame, val_col="test_mean", group_col="family", p_adjust="holm")
    return {a: {b: float(table.loc[a, b]) for b in families} for a in families}


def win_tie_loss(finals: dict[str, dict[str, dict[str, Any]]], best: str, mode: str,
                 alpha: float = ALPHA) -> dict[str, tuple[int, int, int] | None]:
    """Per family, on how many datasets its test scores beat the best family's (win), lose to them
    (loss) or neither (tie) by Welch's t-test at `alpha` (per seed, or per search repeat where
    the dataset's table tests repeats); None for the best family itself."""
    families = list(next(iter(finals.values())))
    counts = {f: [0, 0, 0] for f in families if f != best}
    sign = 1.0 if mode == "max" else -1.0
    for results in finals.values():
        for f, w in welch_vs_best(results, best).items():
            if w is None:
                continue
            decided = not math.isnan(w.p) and w.p < alpha and w.diff != 0  # NaN: no spread to test, a tie
            counts[f][1 if not decided else 0 if sign * w.diff > 0 else 2] += 1
    return {f: (counts[f][0], counts[f][1], counts[f][2]) if f in counts else None for f in families}


def as_json(found: Comparison | Refusal) -> dict[str, Any]:
    """metrics.json's METRICS_KEY entry: numbers rounded so that two runs write the same bytes."""
    if isinstance(found, Refusal):
        return {"compared": False, "reason": found.line}
    families = list(found.mean_ranks)
    return {
        "compared": True, "metric": found.metric, "mode": found.mode, "datasets": list(found.datasets),
        "left_out": {d: list(fs) for d, fs in found.left_out.items()}, "alpha": found.power.alpha,
        "best": found.best,
        "families": {f: {"mean_rank": round(found.mean_ranks[f], 6), "ranks": found.ranks[f],
                         **_wtl_json(found.wtl[f])} for f in families},
        "pairwise": [{"a": a, "b": b, "p_holm": round(found.p_holm[a][b], 6), "significant": found.significant(a, b)}
                     for i, a in enumerate(families) for b in families[i + 1:]],
        "power": {"n_datasets": found.power.n_datasets, "n_families": found.power.n_families,
                  "smallest_p": found.power.smallest_p, "holm_first_threshold": round(found.power.first_threshold, 9),
                  "enough": found.power.enough, "datasets_needed": found.power.needed},
    }


def _wtl_json(wtl: tuple[int, int, int] | None) -> dict[str, int | None]:
    return dict(zip(("wins", "ties", "losses"), wtl or (None, None, None)))
