"""The Markdown of reports/results.md: result tables, robustness, sensitivity and provenance.

Every function takes plain records (the final and search JSON files) and returns lines; the
`report` stage joins them. Accuracy prints in %, as the papers do; other metrics as they are.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from pipeline.reporting.numbers import fmt, signed
from pipeline.reporting.paper_column import paper_cell, split_figures, unrun_lines
from pipeline.reporting.marks import FAILED, NOT_CAUSAL, RULES, SYMBOLS, Mark, is_failed
from pipeline.reporting.references import Figure, References
from pipeline.reporting.search_gain import Gain
from pipeline.comparison.ties import tied_at_top, uncounted_note
from pipeline.reporting.stats import Welch, kendall_tau, ranking, welch
from pipeline.sweep.sensitivity import MIN_TRIALS

ALPHA = 0.05  # "significantly different" in the table's wording


def repeated(results: dict[str, dict[str, Any]]) -> bool:
    """Whether any family's final stage trained the bests of several search repeats."""
    return any(r.get("n_repeats", 1) > 1 for r in results.values() if not is_failed(r))


def test_units(record: dict[str, Any], by_repeat: bool) -> list[float]:
    """The test scores a significance test compares: per seed, or with `by_repeat` one per search
    repeat (its mean over seeds). Seeds of one repeat share its configuration, so with repeats the
    repeat is the independent unit (Bouthillier et al. 2021, MLSys, "Accounting for variance in
    machine learning benchmarks")."""
    if by_repeat and record.get("repeats"):
        return [r["test_mean"] for r in record["repeats"]]
    return [s["test"] for s in record["seeds"]]


def welch_vs_best(results: dict[str, dict[str, Any]], best: str) -> dict[str, Welch | None]:
    """Welch's t-test of each family's test scores against the best family's (None for it): per
    seed, or per search repeat when any family has several (test_units)."""
    by_repeat = repeated(results)
    ref = test_units(results[best], by_repeat)
    return {f: None if f == best else welch(test_units(r, by_repeat), ref) for f, r in results.items()}


def p_value(p: float) -> str:
    """A p-value as the table prints it: three decimals, "p < 0.001" below that (never
    "p = 0.000"), "p n/a" where the test cannot be computed, and " *" when below ALPHA."""
    if math.isnan(p):
        return "p n/a"
    text = "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
    return text + (" *" if p < ALPHA else "")


def versus_best(w: Welch | None, metric: str) -> str:
    """The table cell: test difference to the best family and the two-sided p-value."""
    if w is None:
        return "best"
    return f"{signed(w.diff, metric)} ({p_value(w.p)})"


def results_table(dataset: str, finals: dict[str, dict[str, Any]], best: str | None, refs: References,
                  cited: dict[str, int], marks: dict[str, list[Mark]] | None = None,
                  baseline_rows: Callable[[int], list[str]] | None = None,
                  gains: dict[str, Gain] | None = None) -> list[str]:
    """One dataset's table and its footnotes; `cited` (source key -> footnote number) grows with the
    papers cited. `best`: None when every family failed. `marks`: family -> its marks.
    `baseline_rows(columns)`: the rows under the families' (the trivial baselines: trivial.py).
    `gains`: family -> its search's gain over the reference configuration (search_gain.py)."""
    marks, gains = marks or {}, gains or {}
    metric = (finals[best] if best is not None else next(iter(finals.values())))["metric"]
    ok = {f: r for f, r in finals.items() if not is_failed(r)}
    tests = welch_vs_best(ok, best) if best is not None else {}
    by_repeat = repeated(ok)
    # With search repeats: "test" is mean ± std over every (repeat, seed) run, "between repeats"
    # the std of the repeats' means alone, and Welch's test runs on the repeat means.
    extra, extra_rule = (" between repeats (test) |", "---|") if by_repeat else ("", "")
    welch_label = "Welch over repeats" if by_repeat else "Welch"
    lines = [f"## {dataset} ({metric}{', %' if metric == 'accuracy' else ''})", "",
             f"| family | test | validation | paper (test) | Δ test vs best ({welch_label}) | seeds |{extra} parameters "
             "| s / epoch | trials (failed) | search gain (val) |",
             f"|---|---|---|---|---|---|{extra_rule}---|---|---|---|"]
    unrun: dict[str, list[Figure]] = {}  # paper rows of a variant we did not run: under the table
    for family, r in finals.items():
        symbols = "".join(SYMBOLS[m.mark] for m in marks.get(family, []) if m.mark in SYMBOLS)
        name = (f"**{family}** (best)" if family == best else family) + (f" {symbols}" if symbols else "")
        later = SYMBOLS[NOT_CAUSAL] if any(m.mark == NOT_CAUSAL for m in marks.get(family, [])) else ""
        ours = None if is_failed(r) else r
        shown, unrun[family] = split_figures([f for f in refs.for_pair(dataset, family) if f.metric == metric], ours)
        paper = paper_cell(shown, refs, ours, cited, later)
        if is_failed(r):
            trials = f"{r['n_trials']} ({r['n_failed']})"
            lines.append(f"| {name} | failed | failed | {paper} | — | 0 |{' — |' if by_repeat else ''} — | — "
                         f"| {trials} | — |")
            continue
        spread = f" ± {fmt(r.get('repeat_test_std', 0.0), None, metric)} ({r.get('n_repeats', 1)}) |" if by_repeat else ""
        lines.append(f"| {name} | {fmt(r['test_mean'], r['test_std'], metric)} | "
                     f"{fmt(r['val_mean'], r['val_std'], metric)} | {paper} | "
                     f"{versus_best(tests[family], metric)} | {r['n_seeds']} |{spread} {r['params']:,} | "
                     f"{r['seconds_per_epoch']:.2f} | {r['n_trials']} ({r['n_failed']}) | "
                     f"{gains[family].cell(metric) if family in gains else '—'} |")
    lines += baseline_rows(11 if by_repeat else 10) if baseline_rows else []
    configs = {f: r.get("model_config", r.get("config", {})) for f, r in finals.items() if not is_failed(r)}
    return lines + [""] + tie_lines(finals, best) + footnotes(marks) + unrun_lines(unrun, cited, configs)


def tie_lines(finals: dict[str, dict[str, Any]], best: str | None) -> list[str]:
    """Under a table whose best validation score is shared: which families tie, on what counts,
    and the mean validation losses that decided (pipeline.reporting.ties); nothing otherwise."""
    if best is None:
        return []
    tied = tied_at_top(finals)
    if len(tied) < 2:
        return []

    def loss(family: str) -> str:
        value = finals[family].get("val_loss_mean")
        return "not recorded" if value is None else f"{value:.4f}"

    record = finals[best]
    counts = record.get("val_counts")
    behind = (f" (each {counts[0]:,} correct of {counts[1]:,} validation predictions over its "
              f"{record['n_seeds']} seeds)") if counts and all(
        finals[f].get("val_counts") == counts for f in tied) else ""
    losses = ", ".join(f"{f} {loss(f)}" for f in tied)
    note = uncounted_note(finals)
    return [f"Best on validation: {len(tied)} families tie at {fmt(record['val_mean'], None, record['metric'])}{behind}; "
            f"the lowest mean validation loss at the kept epochs decides ({losses}).", "",
            *([note, ""] if note else [])]


def footnotes(marks: dict[str, list[Mark]]) -> list[str]:
    """Under a table: per mark that occurs, its symbol, its rule in one sentence and each marked
    family's detail; failed families last, with their reasons."""
    lines = []
    for kind in (*SYMBOLS, FAILED):
        hits = [(f, m.detail) for f, ms in marks.items() for m in ms if m.mark == kind]
        if hits:
            symbol = SYMBOLS.get(kind, "")
            details = "; ".join(f"{f}: {detail}" for f, detail in hits)
            lines.append(f"{symbol + ' ' if symbol else ''}{RULES[kind][0].upper()}{RULES[kind][1:]}. {details}.  ")
    if lines:
        lines[-1] = lines[-1].rstrip()
        lines.append("")
    return lines


def robustness_lines(finals: dict[str, dict[str, Any]], mode: str, metric: str) -> list[str]:
    """Validation mean ± std at each learning-rate factor and whether the ranking survives."""
    factors = sorted({x["lr_factor"] for r in finals.values() for x in r.get("robustness", [])})
    if not factors:
        return []
    columns = sorted([*factors, 1.0])
    lines = ["**Learning-rate robustness** (validation, the best configuration rerun on every seed with "
             "its learning rate times each factor):", "",
             "| family | " + " | ".join(f"lr × {f:g}" for f in columns) + " |",
             "|---|" + "---|" * len(columns)]
    at: dict[float, dict[str, float]] = {f: {} for f in columns}
    for family, r in finals.items():
        cells = {1.0: (r["val_mean"], r["val_std"])}
        cells.update({x["lr_factor"]: (x["val_mean"], x["val_std"]) for x in r.get("robustness", [])})
        for f, (m, _) in cells.items():
            at[f][family] = m
        lines.append(f"| {family} | " + " | ".join(fmt(*cells[f], metric) if f in cells else "—" for f in columns) + " |")
    lines.append("")
    nominal = ranking(at[1.0], mode)
    for f in factors:
        shared = [x for x in nominal if x in at[f]]
        moved = ranking(at[f], mode)
        tau = kendall_tau(shared, [x for x in moved if x in shared])
        verdict = "the best family stays best" if moved[0] == nominal[0] else f"the best family becomes {moved[0]}"
        lines.append(f"- lr × {f:g}: ranking {' > '.join(moved)}; Kendall τ = {tau:.2f} against the searched "
                     f"learning rate; {verdict}.")
    return lines + [""]


def sensitivity_lines(searches: dict[str, dict[str, Any]]) -> list[str]:
    """Per family, fANOVA importances of the search's hyperparameters (largest first), shown only
    from MIN_TRIALS trials of their basis (pipeline.sweep.sensitivity: fewer rank noise); records
    computed with a lower floor get the same rule here."""
    lines = ["**Hyperparameter importance** (Optuna fANOVA on each search's persisted study; "
             "`complete`: final validation metric of the trials that ran every epoch, `epoch g`: "
             "the metric every trial reached at ASHA's first rung; shown from "
             f"{MIN_TRIALS} trials, below which fANOVA misranks a known important parameter in a synthetic check: "
             "benchmarks/rules/importance.py):", "",
             "| family | basis (trials) | importance | Optuna study |", "|---|---|---|---|"]
    for family, s in searches.items():
        imp = s.get("importance")
        if not imp:
            lines.append(f"| {family} | — | not computed (search predates importances) | — |")
            continue
        bases = [(k, v) for k, v in imp.items() if k != "evaluator"]
        usable = [(k, v) for k, v in bases if v["values"] and v["n_trials"] >= MIN_TRIALS]
        basis, chosen = (usable or bases)[0]
        if chosen["values"] and chosen["n_trials"] >= MIN_TRIALS:
            top = sorted(chosen["values"].items(), key=lambda kv: -kv[1])[:4]
            text = ", ".join(f"{k} {v:.2f}" for k, v in top)
        elif chosen["values"]:
            text = f"not shown: {chosen['n_trials']} trials, at least {MIN_TRIALS} needed"
        else:
            text = f"not enough data: {chosen['reason']}"
        lines.append(f"| {family} | {basis} ({chosen['n_trials']}) | {text} | `{s.get('optuna_study', '—')}` |")
    return lines + [""]


def references_lines(refs: References, cited: dict[str, int]) -> list[str]:
    if not cited:
        return []
    any_model = any(b.source in cited for b in refs.published_best.values())
    lines = ["## Paper figures", "",
             "Reported by the source papers for the same dataset and model, read from `references.yaml`; "
             "their training budgets differ from this profile's (notes below)."
             + (" A published best is any model's." if any_model else ""), ""]
    for key, number in sorted(cited.items(), key=lambda kv: kv[1]):
        src = refs.sources[key]
        lines.append(f"[{number}] {src.citation}" + (f" <{src.url}>" if src.url else ""))
        for f in refs.figures:
            if f.source == key:
                note = f"; {f.note}" if f.note else ""
                lines.append(f"  - {f.dataset} / {f.family}: {f.where}{note}")
        for name, best in refs.published_best.items():
            if best.source == key:
                lines.append(f"  - published best on {name} ({best.model}): {best.where}; selected: {best.selection}")
    return lines + [""]


def data_lines(note: str | None) -> list[str]:
    """The line under a dataset's table when its data is not the publisher's as published."""
    return [f"**Data:** {note} (data/raw.lock says why).", ""] if note else []


def _stages_of(used_by: list[str]) -> str:
    """["x/cfc final", "x/cfc search", "x/ncde search"] -> "x/cfc (search, final), x/ncde (search)"."""
    cells: dict[str, list[str]] = {}
    for entry in used_by:
        cell, kind = entry.rsplit(" ", 1)
        cells.setdefault(cell, []).append(kind)
    return ", ".join(f"{c} ({', '.join(sorted(k, reverse=True))})" for c, k in cells.items())


def machine_lines(machines: dict[str, dict[str, Any]]) -> list[str]:
    """The provenance's lines of the machines the trials and seeds ran on (provenance.machine_notes)."""
    if not machines:
        return ["- machine: not recorded (results from before runs recorded it)"]
    lines = []
    for name, m in machines.items():
        threads = ", ".join(map(str, m["threads"])) or "?"
        lines.append(f"- machine `{name}`: {m['cpu']} ({m['cores']} cores, {m['isa']}, CPU flags {m['cpu_flags']}), "
                     f"device {m['device']}; torch {m['torch']}, numpy {m['numpy']}, BLAS {m['blas']}, "
                     f"Python {m['python']}; threads per trial or seed: {threads}; ran {_stages_of(m['used_by'])}")
    return lines


def provenance_lines(stamp: dict[str, Any]) -> list[str]:
    lines = ["## Provenance", "", f"- git commit: `{stamp['commit']}`"]
    lines += [f"- data of `{dataset}`: {note}" for dataset, note in stamp.get("data", {}).items()]
    lines += machine_lines(stamp.get("machines", {}))
    if stamp["dvc_lock"]:
        lines.append("- data and results (md5 from `dvc.lock`):")
        for stage, outs in stamp["dvc_lock"].items():
            lines += [f"  - `{stage}`: `{path}` {md5}" for path, md5 in outs.items()]
    else:
        lines.append("- no `dvc.lock`: this report was not produced by `dvc repro`")
    lines += ["", "<details><summary>params.yaml sections used</summary>", "", "```json",
              json.dumps(stamp["params"], indent=1, sort_keys=True), "```", "", "</details>", ""]
    return lines
