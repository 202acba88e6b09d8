"""The "paper (test)" column: the source papers' figures beside ours, and how ours compare.

A figure is shown beside a family's result only when it is a figure of the run we made
(issue 30, review findings N10 and N5): a paper that reports several variants of one family
(CDR-NDE-heat solved with Euler and with dopri5; an NRDE at log-signature depth 1 and 2) lists
the model arguments of each row under `config` in references.yaml, and a row whose arguments our
best configuration does not have is listed under the table as "no run of ours", never in the
cell; so is a row of another model filed under the family (`other_model` says which).

Each figure in the cell says how ours compares (review finding N3 for best runs):
  - a mean over seeds: the difference (ours - paper) and whether the paper's mean lies inside our
    95 % confidence interval of the mean, Student's t with n - 1 degrees of freedom over our
    per-seed test scores (`mean_interval`);
  - a best run (a source whose figures are each the best of several runs, `best_run: true`): it
    is labelled so, with our best seed beside it (the best seed is a biased estimate, as theirs).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from scipy import stats as sps

from pipeline.reporting.numbers import fmt, signed
from pipeline.reporting.references import Figure, References

LEVEL = 0.95  # of the confidence interval the paper's mean is checked against


def mean_interval(scores: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """The two-sided `level` confidence interval of the mean of `scores` (Student's t, n - 1
    degrees of freedom); None for fewer than two scores. No spread gives the mean itself."""
    if len(scores) < 2:
        return None
    mean = statistics.fmean(scores)
    half = float(sps.t.ppf(0.5 + level / 2, len(scores) - 1)) * statistics.stdev(scores) / math.sqrt(len(scores))
    return mean - half, mean + half


def matches(figure: Figure, config: dict[str, Any]) -> bool:
    """Whether our configuration has every model argument the paper's row names (`config`)."""
    return all(key in config and _same(config[key], value) for key, value in figure.config.items())


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def comparison(figure: Figure, refs: References, record: dict[str, Any] | None, mode: str) -> str:
    """What follows a figure in its cell: "(best run; our best seed X)", or "(Δ +d; inside|outside
    our 95 % CI)"; "" when we have no scores to compare (a failed family, a single seed)."""
    scores = [s["test"] for s in (record or {}).get("seeds", []) if s.get("test") is not None]
    metric, (paper, _) = figure.metric, figure.as_fraction()
    if refs.sources[figure.source].best_run:
        if not scores:
            return "(best run)"
        best = max(scores) if mode == "max" else min(scores)
        return f"(best run; our best seed {fmt(best, None, metric)})"
    interval = mean_interval(scores)
    if interval is None:
        return ""
    inside = interval[0] <= paper <= interval[1]
    return (f"(Δ {signed(statistics.fmean(scores) - paper, metric)}; "
            f"{'inside' if inside else 'outside'} our 95 % CI)")


def split_figures(figures: list[Figure], record: dict[str, Any] | None) -> tuple[list[Figure], list[Figure]]:
    """(figures of the run we made, figures no run of ours stands behind): a figure of another
    model under the family's name (`other_model`), or of a variant we did not run (`config`).
    Without a record (the family failed) the variants stay in the cell: there is no
    configuration to tell them apart."""
    config = (record or {}).get("model_config", (record or {}).get("config"))
    shown = [f for f in figures if not f.other_model and (config is None or matches(f, config))]
    return shown, [f for f in figures if f not in shown]


def paper_cell(figures: list[Figure], refs: References, record: dict[str, Any] | None, cited: dict[str, int],
               mark: str = "") -> str:
    """The paper (test) cell: each figure with its citation number (`cited`, source key -> footnote
    number, grows), `mark` (a symbol each figure carries too: the family's published form reads
    later steps, so the paper's number has the same confound) and how ours compare; "—" for none."""
    cells = []
    for f in figures:
        mean, std = f.as_fraction()
        number = cited.setdefault(f.source, len(cited) + 1)
        versus = comparison(f, refs, record, (record or {}).get("mode", "max"))
        cells.append(" ".join(x for x in (f"{fmt(mean, std, f.metric)} [{number}]", mark, versus) if x))
    return "; ".join(cells) or "—"


def unrun_lines(unrun: dict[str, list[Figure]], cited: dict[str, int],
                record_configs: dict[str, dict[str, Any]]) -> list[str]:
    """Under a table: the paper rows no run of ours stands behind, and why."""
    lines = []
    for family, figures in unrun.items():
        ours = record_configs.get(family, {})
        for f in figures:
            mean, std = f.as_fraction()
            number = cited.setdefault(f.source, len(cited) + 1)
            if f.other_model:
                why = f"is another model: {f.other_model}"
            else:
                wanted = ", ".join(f"{k} {v}" for k, v in f.config.items())
                have = ", ".join(f"{k} {ours.get(k, 'unset')}" for k in f.config)
                why = f"is the paper's run with {wanted}; ours ran with {have}"
            lines.append(f"- {family}: {fmt(mean, std, f.metric)} [{number}] ({f.where}) {why}, so it is not compared.")
    return ["No run of ours behind these paper rows:", "", *lines, ""] if lines else []
