"""A paper's table beside ours, one verdict per row, from a project's final-stage records.

    .venv/bin/python -m benchmarks.papers.paper_table --root PROJECT --source cfc2021 --dataset walker2d \
        [--not-run "ltc=13.8 core-hours for 3 seeds on one core"] [--row-from lstm_dt=OTHER] [--out DIR]

For every figure `references.yaml` holds for the source and dataset: our seeds' test scores
(results/<dataset>/final/<family>.json), their mean ± sample standard deviation, the 95 %
t-interval of the mean (pipeline.reporting.paper_column.mean_interval, as the report's "paper"
column), the paper's mean ± std, the difference, and the verdict:

    reproduced   the paper's mean lies inside our interval
    better       our interval lies wholly on the better side of it (lower MSE, higher accuracy)
    worse        wholly on the worse side
    not run      no record of ours: the reason given with --not-run, else "not in the run"

A source whose figures are each the best of several runs (`best_run: true` in references.yaml, no
std) is compared with our best seed as well, by its own rule (best_run_verdict): worse when even our
best seed falls short of it, better when our whole interval of the mean lies beyond it, reproduced
otherwise (a best run should lie between a mean and a best seed).

A figure of another model filed under the family's name (`other_model`) or of a variant our
configuration does not have (`config`) is "not run", its reason saying which, followed by the
--not-run reason if one is given (a cost, say). A family whose output at a step reads later steps (the record's `reads_later_steps`, the report's not-causal mark) has that
said beside its verdict. `--row-from FAMILY=PROJECT` reads one family's record from another
project (a row run again on its own, at other epochs say); the row and the list under the table
name that project. Under the table: the data
provenance each record carries, and each row's seeds, epochs and wall time per seed. Writes
paper_table.md and paper_table.json to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report
from pipeline.data.provenance import DATA_PROVENANCE
from pipeline.reporting.marks import not_causal
from pipeline.reporting.numbers import fmt, signed
from pipeline.reporting.paper_column import mean_interval, split_figures
from pipeline.reporting.references import Figure, load_references

REPRODUCED, BETTER, WORSE, NOT_RUN = "reproduced", "better", "worse", "not run"


def verdict(scores: list[float], paper: float, mode: str) -> tuple[str, tuple[float, float] | None]:
    """(verdict, our 95 % interval) for our per-seed `scores` against the paper's mean; with fewer
    than two scores there is no interval, and the verdict is "not run" (one seed says nothing)."""
    interval = mean_interval(scores)
    if interval is None:
        return NOT_RUN, None
    low, high = interval
    if low <= paper <= high:
        return REPRODUCED, interval
    ours_lower = high < paper
    better = ours_lower if mode == "min" else not ours_lower
    return (BETTER if better else WORSE), interval


def best_run_verdict(scores: list[float], paper: float, mode: str) -> tuple[str, tuple[float, float] | None]:
    """(verdict, our 95 % interval) for our per-seed `scores` against a paper's best run (module
    docstring); "not run" with fewer than two scores."""
    interval = mean_interval(scores)
    if interval is None:
        return NOT_RUN, None
    best = max(scores) if mode == "max" else min(scores)
    short = best < paper if mode == "max" else best > paper
    beyond = interval[0] > paper if mode == "max" else interval[1] < paper
    return (WORSE if short else BETTER if beyond else REPRODUCED), interval


def _record(root: Path, dataset: str, family: str) -> dict[str, Any] | None:
    path = root / "results" / dataset / "final" / f"{family}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _not_this_row(figure: Figure, record: dict[str, Any] | None) -> str | None:
    """Why a figure is no row of ours whatever was run: another model filed under the family's name,
    or a configuration (`config`) the record's does not have; None when it could be."""
    if figure.other_model:
        return f"another model under the name: {figure.other_model}"
    if record is not None and not split_figures([figure], record)[0]:
        wanted = ", ".join(f"{key} {value}" for key, value in (figure.config or {}).items())
        return f"the paper's row has {wanted}, which this run did not train"
    return None


def row(figure: Figure, record: dict[str, Any] | None, reason: str | None, best_run: bool = False) -> dict[str, Any]:
    """One table row: ours (if any), the paper's, the difference and the verdict; `best_run`: the
    paper's figure is a best run, judged against our best seed too (best_run_verdict)."""
    paper, paper_std = figure.as_fraction()
    out: dict[str, Any] = {"family": figure.family, "where": figure.where, "note": figure.note,
                           "paper_mean": paper, "paper_std": paper_std, "metric": figure.metric}
    if (other := _not_this_row(figure, record)) is not None:
        return {**out, "verdict": NOT_RUN, "reason": "; ".join(filter(None, [other, reason]))}
    scores = [s["test"] for s in (record or {}).get("seeds", []) if s.get("test") is not None]
    if record is None or len(scores) < 2:
        return {**out, "verdict": NOT_RUN, "reason": reason or ("not in the run" if record is None
                                                                   else f"{len(scores)} seed(s) scored")}
    mode = record.get("mode", "max")
    found, interval = (best_run_verdict if best_run else verdict)(scores, paper, mode)
    if (mark := not_causal(record)) is not None:  # a score that reads later steps: its verdict says so
        found = f"{found}; {mark.detail}"
    seeds = record.get("seeds", [])
    walls = [s["seconds_per_epoch"] * s.get("epochs_trained", record.get("epochs", 0)) for s in seeds
             if s.get("seconds_per_epoch")]
    return {**out, "verdict": found, "n": len(scores), "scores": scores, "mean": statistics.fmean(scores),
            "std": statistics.stdev(scores), "interval": interval, "diff": statistics.fmean(scores) - paper,
            "epochs": record.get("epochs"), "train_s_per_seed": [round(w) for w in walls],
            "provenance": record.get(DATA_PROVENANCE, ""),
            **({"best": max(scores) if mode == "max" else min(scores)} if best_run else {})}


def table(root: Path, source: str, dataset: str, reasons: dict[str, str],
          elsewhere: dict[str, Path] | None = None) -> dict[str, Any]:
    """Every figure of `source` on `dataset` as a row; a family in `elsewhere` read from that project."""
    elsewhere = elsewhere or {}
    refs = load_references(root)
    if source not in refs.sources:
        raise SystemExit(f"references.yaml: no source {source!r} (sources: {', '.join(sorted(refs.sources))})")
    figures = [f for f in refs.figures if f.source == source and f.dataset == dataset]
    if not figures:
        raise SystemExit(f"references.yaml: source {source!r} has no figure on dataset {dataset!r}")
    unknown = sorted(set(elsewhere) - {f.family for f in figures})
    if unknown:
        raise SystemExit(f"--row-from: {unknown} have no figure of {source!r} on {dataset!r}")
    rows = []
    for f in figures:
        project = elsewhere.get(f.family, root)
        found = row(f, _record(project, dataset, f.family), reasons.get(f.family), refs.sources[source].best_run)
        rows.append({**found, "root": str(project)} if f.family in elsewhere else found)
    return {"root": str(root), "source": source, "citation": refs.sources[source].citation, "dataset": dataset,
            "best_run": refs.sources[source].best_run, "rows": rows}


def render(report: dict[str, Any]) -> str:
    lines = [f"# {report['citation']}: {report['dataset']}, ours beside the paper's", "",
             "| row | ours: test (n) | our 95 % interval | paper | ours - paper | verdict |",
             "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        metric, paper = r["metric"], fmt(r["paper_mean"], r["paper_std"], r["metric"])
        label = r["family"] + (f" ({r['note'].split(';')[0]})" if r["note"] else "")
        if "mean" not in r:
            why = f" ({r['reason']})" if r.get("reason") else ""
            lines.append(f"| {label} | — | — | {paper} | — | {r['verdict']}{why} |")
            continue
        low, high = r["interval"]
        best = f"; best seed {fmt(r['best'], None, metric)}" if "best" in r else ""
        lines.append(f"| {label} | {fmt(r['mean'], r['std'], metric)} (n = {r['n']}{best}) | "
                     f"{fmt(low, None, metric)} to {fmt(high, None, metric)} | {paper} | "
                     f"{signed(r['diff'], metric)} | {r['verdict']} |")
    if report.get("best_run"):
        lines += ["", "The paper's figures are each its best run: a row is *worse* when even our best seed falls "
                      "short of it, *better* when our whole 95 % interval of the mean lies beyond it, *reproduced* "
                      "otherwise."]
    ran = [r for r in report["rows"] if "mean" in r]
    for prov in sorted({r["provenance"] for r in ran if r["provenance"]}):
        lines += ["", f"Data: {prov}"]
    if ran:
        lines += [""] + [f"- {r['family']}: seeds {', '.join(f'{s:.4g}' for s in r['scores'])}; {r['epochs']} "
                         f"epochs; training {', '.join(str(w) for w in r['train_s_per_seed'])} s per seed"
                         + (f"; run in {r['root']}" if "root" in r else "") for r in ran]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the project whose results/ holds the final records")
    ap.add_argument("--source", required=True, help="a source key of references.yaml (cfc2021, anumasa_cdrnde, ...)")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--not-run", action="append", default=[], metavar="FAMILY=REASON",
                    help="why a row has no run of ours")
    ap.add_argument("--row-from", action="append", default=[], metavar="FAMILY=PROJECT",
                    help="read this family's record from another project's results/")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    reasons = _pairs(ap, "--not-run", args.not_run, "REASON")
    elsewhere = {family: Path(path).resolve() for family, path in _pairs(ap, "--row-from", args.row_from, "PROJECT").items()}
    report = table(args.root.resolve(), args.source, args.dataset, reasons, elsewhere)
    text = render(report)
    save_report(args.out, "paper_table", report, text)
    print(text)
    return report


def _pairs(ap: argparse.ArgumentParser, option: str, items: list[str], what: str) -> dict[str, str]:
    """["FAMILY=VALUE", ...] -> {FAMILY: VALUE}; a malformed item stops the command, naming it."""
    pairs = {}
    for item in items:
        family, sep, value = item.partition("=")
        if not sep or not family or not value:
            ap.error(f"{option} {item!r}: expected FAMILY={what}")
        pairs[family] = value
    return pairs


if __name__ == "__main__":
    main()
