"""How close the progress display's estimate of the time left comes, replayed on a finished run.

    .venv/bin/python -m benchmarks.commands.progress_replay --root PROJECT [--stage search|final] [--out DIR]

Reads the newest search or final stage of every dataset in the project's MLflow store, then
rebuilds the Snapshot the display would have read at 40 moments of the stage (each trial's or
seed's epochs, epoch times and best score logged by then, from the metrics' timestamps) and puts
the estimate (pipeline.progress.estimate.time_left) and its range (time_range: the low and high
ends, and what the display shows) beside the time that was really left; the table's checkpoints
are 10, 25, 50 and 75 % of the stage's wall time. A stage run before the display existed replays
as well: it needs only the runs' `epoch`, `epoch_seconds` and `val_metric` histories (a final
stage's search measure and race cap then come from the project's results/ records).
`--out`: progress_replay.json and .md there.

What the display read then but the store no longer holds is rebuilt: a final unit's seeds are
its configured ones plus the race's seeds started by then (the race tags its new total as it
adds them, just before they start); a search unit's trials are those it ran in the end (a
saturating search's tag moved to that count as its grants and stops came).

The stage's start is its parents' earliest start, its end the last epoch logged by any of its
trials or seeds (their records are written after it, in seconds); a trial ended when it logged
its last epoch (ASHA's or patience's stop, or its budget) or when its run ended, whichever came first.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.config import SearchParams
from pipeline.final.plans import patience_epochs
from pipeline.progress.estimate import Range, time_left, time_range
from pipeline.progress.model import DONE, FAILED, FINAL, RUNNING, SEARCH, STOPPED, Rungs, Snapshot, Unit, Work
from pipeline.progress.read import MOST, PATIENCE, PRIOR, PRIOR_EPOCHS, STALE, rungs_of
from pipeline.sweep.tuner import asha_rules
from pipeline.training.selection import is_better, lowers_loss, progressed
from pipeline.stores import tracking
from pipeline.stores.files import read_json
from pipeline.stores.paths import final_result_path, search_result_path

POINTS = 40
LAST_S = 60.0  # the worst ratio after half leaves out the last minute, where a few seconds make a ratio
CHECKPOINTS = (0.10, 0.25, 0.50, 0.75)  # the shares of the stage's wall time the docs' table shows
WIDTH = 3.0  # the target: the range no wider than high / low = 3 from 10 % of the stage on


@dataclass
class Trace:
    """One trial's or seed's run as it unfolded: (timestamp, value) histories in seconds."""

    label: int
    start: float
    end: float
    state: str
    epochs: list[tuple[float, float]]
    seconds: list[tuple[float, float]]
    scores: list[tuple[float, float]]
    stale: list[tuple[float, float]] = field(default_factory=list)

    def at(self, t: float, mode: str) -> Work | None:
        if t < self.start:
            return None
        done = [v for ts, v in self.epochs if ts <= t]
        secs = [v for ts, v in self.seconds if ts <= t]
        scores = [v for ts, v in self.scores if ts <= t]
        stale = [v for ts, v in self.stale if ts <= t]
        best = (max(scores) if mode == "max" else min(scores)) if scores else None
        return Work(self.label, self.state if t >= self.end else RUNNING, int(max(done, default=0)),
                    secs[-1] if secs else None, best, self.start, int(stale[-1]) if stale else None)


def _history(client: tracking.MlflowClient, run_id: str, key: str) -> list[tuple[float, float]]:
    return sorted((m.timestamp / 1000, m.value) for m in client.get_metric_history(run_id, key))


def _trace(client: tracking.MlflowClient, run: Any, stage: str, mode: str) -> Trace:
    rid, tags = run.info.run_id, run.data.tags
    epochs = _history(client, rid, "epoch")
    ended_at = run.info.end_time / 1000 if run.info.end_time else float("inf")
    end = min(ended_at, epochs[-1][0]) if epochs else ended_at
    if run.info.status in ("FAILED", "KILLED"):
        state = FAILED
    elif stage == SEARCH and tags.get(tracking.OUTCOME_TAG) == tracking.STOPPED_EARLY:
        state = STOPPED
    else:
        state = DONE
    label = tags.get("optuna_trial_number" if stage == SEARCH else "seed", "0")
    scores = _history(client, rid, "val_metric")
    stale = _history(client, rid, STALE) or _stale(scores, _history(client, rid, "val_loss"), mode)
    return Trace(int(label) if label.isdigit() else 0, run.info.start_time / 1000, end, state, epochs,
                 _history(client, rid, "epoch_seconds"), scores, stale)


def _stale(scores: list[tuple[float, float]], losses: list[tuple[float, float]],
           mode: str) -> list[tuple[float, float]]:
    """Early stopping's count after each epoch, from the validation histories (a run from before
    `stale_epochs` was logged), by the trainer's rule (selection.progressed)."""
    if len(scores) != len(losses):
        return []
    best, lowest, count, out = None, None, 0, []
    for (ts, metric), (_, loss) in zip(scores, losses):
        count = 0 if progressed(metric, loss, best, lowest, mode) else count + 1
        best = metric if is_better(metric, best, mode) else best
        lowest = loss if lowers_loss(loss, lowest) else lowest
        out.append((ts, float(count)))
    return out


def _parents(client: tracking.MlflowClient, exp_ids: list[str], stage: str) -> list[Any]:
    """The newest finished parent of `stage` per (dataset, family)."""
    runs = client.search_runs(exp_ids, filter_string=f"tags.stage = '{stage}' and attributes.status = 'FINISHED' "
                                                     f"and tags.`{tracking.RUN_LEVEL_TAG}` = '{tracking.PARENT_LEVEL}'",
                              order_by=["attributes.start_time DESC"], max_results=50000)
    newest: dict[tuple[str, str], Any] = {}
    for r in runs:
        newest.setdefault((r.data.tags.get("dataset", ""), r.data.tags.get("family", "")), r)
    return list(newest.values())


def _unit(client: tracking.MlflowClient, parent: Any, stage: str,
          root: Path | None = None) -> tuple[Unit, list[Trace], int]:
    """The unit, its traces and, for a final unit, its seeds before the race added any (its total
    until then; else the unit's total)."""
    params, tags = parent.data.params, parent.data.tags
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.`{tracking.PARENT_TAG}` = '{parent.info.run_id}'",
                                  max_results=50000)
    mode = tags.get("progress_mode", "max")  # a run from before the tag: "max" (the estimate does not read scores)
    traces = [_trace(client, r, stage, mode) for r in children]
    configured = _literal(params.get("seeds", "[]"))
    if stage == SEARCH:
        total = len(traces)  # saturation: what its tag said once its grants and stops came (the module)
        epochs, round_size = int(params.get("search.epochs", 1)), int(params.get("search.round_size", 0)) or None
    else:
        total, epochs, round_size = len(traces), int(float(params.get("epochs", 1))), None
    base = sum(t.label in configured for t in traces) if stage == FINAL and configured else total
    rounds = -(-int(params.get("search.num_samples", 1)) // round_size) if round_size else None
    asha = (rungs_of(tags) or _rules_from_params(params)) if stage == SEARCH else None
    prior = tags.get(PRIOR)  # a final parent's search-time epoch (a run from before the tag: none)
    patience = tags.get(PATIENCE, params.get("final_patience", "")) if stage == FINAL else ""  # the param: before the tag
    unit = Unit(tags.get("dataset", "?"), tags.get("family", "?"), total, epochs, mode, round_size, rounds,
                prior_epoch_s=float(prior) if prior else None, asha=asha,
                patience=int(patience) if patience.isdigit() else None)
    if stage == FINAL:
        unit = replace(unit, **_final_measures(root, unit, tags, base, len(configured)))
    return unit, traces, base


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []


def _final_measures(root: Path | None, unit: Unit, tags: dict[str, str], base: int, configured: int) -> dict[str, Any]:
    """A final unit's prior_epochs and most, from its tags or (a run from before them) from the
    project's search and final records, as the stage computes them (pipeline.final.stage._mark)."""
    out: dict[str, Any] = {"prior_epochs": float(tags[PRIOR_EPOCHS]) if PRIOR_EPOCHS in tags else None,
                           "most": int(tags[MOST]) if tags.get(MOST, "").isdigit() else None}
    if root is None:
        return out
    if out["prior_epochs"] is None:
        try:
            searched = read_json(search_result_path(root, unit.dataset, unit.family), "ctsweep search")
            out["prior_epochs"] = patience_epochs(searched, unit.patience, unit.max_epochs)
        except Exception:  # no record (another project's store): no search measure
            pass
    if out["most"] is None:
        try:
            race = read_json(final_result_path(root, unit.dataset, unit.family), "ctsweep final").get("race", {})
            room = max(0, int(race["max_seeds"]) - configured) if race.get("enabled") and race.get("looks") else 0
            out["most"] = base + room
        except Exception:
            pass
    return out


def _rules_from_params(params: dict[str, str]) -> Rungs | None:
    """A search parent's ASHA rules from the search parameters it logged (a run from before the tag)."""
    keys = ("epochs", "round_size", "rounds_in_flight", "repeats", "asha")
    try:
        given = {k: ast.literal_eval(params[f"search.{k}"]) for k in keys if f"search.{k}" in params}
        return asha_rules(SearchParams.model_validate(given))
    except (ValueError, SyntaxError):
        return None


def replay(root: Path, stage: str, points: int = POINTS) -> dict[str, Any]:
    """The estimate and its range against the time really left at `points` moments of the stage."""
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    exp_ids = [e.experiment_id for e in client.search_experiments(filter_string="name LIKE 'ctsweep/%'")]
    parents = _parents(client, exp_ids, stage)
    if not parents:
        raise SystemExit(f"no finished {stage} stage in {tracking.tracking_uri(root)}")
    units = [_unit(client, p, stage, root) for p in parents]
    start = min(p.info.start_time / 1000 for p in parents)
    end = max(t.end for _, traces, _ in units for t in traces if t.end != float("inf"))
    rows = []
    for i in range(1, points):
        t = start + (end - start) * i / points
        snap = Snapshot(stage, start, t, tuple(_at(u, traces, base, t) for u, traces, base in units))
        left, span = time_left(snap), time_range(snap)
        rows.append({"elapsed_s": round(t - start, 1), "share": round(i / points, 3), "ended": snap.ended,
                     "total": snap.total, "estimate_s": None if left is None else round(left, 1),
                     "actual_s": round(end - t, 1),
                     "ratio": None if left is None or end - t <= 0 else round(left / (end - t), 3),
                     **_range_row(span, end - t)})
    return {"root": str(root), "stage": stage, "wall_s": round(end - start, 1), "units": len(units), "rows": rows,
            "at_half": next(r for r in rows if r["share"] >= 0.5),
            "at_half_ended": next((r for r in rows if 2 * r["ended"] >= r["total"]), None),
            "worst_after_half": _worst(_after_half(rows)), "within_25_after_half": _within(_after_half(rows)),
            "checkpoints": [next(r for r in rows if r["share"] >= c - 1e-9) for c in CHECKPOINTS],
            "targets": _targets(rows)}


def _at(unit: Unit, traces: list[Trace], base: int, t: float) -> Unit:
    """The unit as the display read it at `t`: its work then, and (a final unit) its configured
    seeds plus the race's started by then as its total."""
    work = tuple(w for w in (tr.at(t, unit.mode) for tr in traces) if w is not None)
    if unit.round_size or unit.asha is not None:
        return replace(unit, work=work)
    # the race's seeds start only once every configured seed has ended: the started beyond the
    # configured ones are its
    return replace(unit, work=work, total=max(base, len(work)))


def _range_row(span: Range | None, actual: float) -> dict[str, Any]:
    """A row's low and high ends, what the display shows (a range, or one figure) and whether the
    time really left lay inside the range."""
    if span is None:
        return {"low_s": None, "high_s": None, "single_s": None, "inside": None, "width": None}
    width = span.high / span.low if span.low > 0 else None
    return {"low_s": round(span.low, 1), "high_s": round(span.high, 1),
            "single_s": None if span.single is None else round(span.single, 1),
            "inside": span.low <= actual <= span.high, "width": None if width is None else round(width, 2)}


def _targets(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The issue's targets over the moments from 10 % of the stage on (the last LAST_S seconds
    left out): the time left inside the range, the range no wider than WIDTH, and a single figure
    shown from half the stage on within 25 %."""
    late = [r for r in rows if r["share"] >= 0.1 - 1e-9 and r["actual_s"] >= LAST_S and r["low_s"] is not None]
    singles = [r for r in late if r["share"] >= 0.5 - 1e-9 and r["single_s"] is not None]
    close = sum(abs(r["single_s"] / r["actual_s"] - 1) <= 0.25 for r in singles)
    return {"inside": f"{sum(r['inside'] for r in late)} of {len(late)}",
            "narrow": f"{sum(r['width'] is not None and r['width'] <= WIDTH for r in late)} of {len(late)}",
            "single_within_25": f"{close} of {len(singles)}"}


def _after_half(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The moments from half the wall time on, but for the last LAST_S seconds."""
    return [r for r in rows if r["share"] >= 0.5 and r["actual_s"] >= LAST_S]


def _within(rows: list[dict[str, Any]], margin: float = 0.25) -> str:
    """"n of m": the moments whose estimate lay within `margin` of the time really left."""
    return f"{sum(r['ratio'] is not None and abs(r['ratio'] - 1) <= margin for r in rows)} of {len(rows)}"


def _worst(rows: list[dict[str, Any]]) -> float | None:
    """The ratio farthest from 1 (in log terms: 0.5 and 2 are as far) among `rows`."""
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    return max(ratios, key=lambda x: abs(math.log(x))) if ratios else None


def _summary(report: dict[str, Any]) -> str:
    def ratio(row: dict[str, Any] | None) -> str:
        return "—" if row is None or row["ratio"] is None else f"{row['ratio']:.2f}"
    worst = report["worst_after_half"]
    return (f"At half the wall time: {ratio(report['at_half'])}; when half the {_noun(report['stage'])} had ended: "
            f"{ratio(report['at_half_ended'])}; after half the wall time (the last {LAST_S:.0f} s left out), "
            f"within 25 % at {report['within_25_after_half']} moments, farthest from 1: "
            f"{'—' if worst is None else f'{worst:.2f}'}.")


def _noun(stage: str) -> str:
    return "trials" if stage == SEARCH else "seeds"


def shown(row: dict[str, Any]) -> str:
    """What the display said at a row: "12-30 min" (the range) or one figure, in the display's words."""
    from pipeline.progress.render import span_text
    if row["low_s"] is None:
        return "—"
    return span_text(Range(row["low_s"], row["high_s"], row["single_s"]))


def render(report: dict[str, Any]) -> str:
    targets = report["targets"]
    lines = [f"# Time left, estimated and actual: the {report['stage']} stage of {report['root']}", "",
             f"{report['units']} (dataset, family) units, {report['wall_s']:.0f} s from the first parent's start "
             f"to the last epoch. Ratio: estimate / actual.", "", _summary(report), "",
             f"From 10 % of the stage on (the last {LAST_S:.0f} s left out): the time left inside the range at "
             f"{targets['inside']} moments, the range no wider than {WIDTH:g}x at {targets['narrow']}; from half on, "
             f"one figure shown within 25 % at {targets['single_within_25']}.", "",
             "| share of the wall | ended | shown | low | high | actual | inside |", "|---:|---:|---|---:|---:|---:|:-:|"]
    for r in report["checkpoints"]:
        lines.append(_row(r))
    lines += ["", "| elapsed | share of the wall | ended | estimate | shown | actual | ratio | inside |",
              "|---:|---:|---:|---:|---|---:|---:|:-:|"]
    for r in report["rows"]:
        est = "—" if r["estimate_s"] is None else f"{r['estimate_s']:.0f} s"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        inside = "—" if r["inside"] is None else "yes" if r["inside"] else "no"
        lines.append(f"| {r['elapsed_s']:.0f} s | {r['share']:.0%} | {r['ended']}/{r['total']} | {est} | {shown(r)} | "
                     f"{r['actual_s']:.0f} s | {ratio} | {inside} |")
    return "\n".join(lines) + "\n"


def _row(r: dict[str, Any]) -> str:
    def sec(v: float | None) -> str:
        return "—" if v is None else f"{v:.0f} s"
    inside = "—" if r["inside"] is None else "yes" if r["inside"] else "no"
    return (f"| {r['share']:.0%} | {r['ended']}/{r['total']} | {shown(r)} | {sec(r['low_s'])} | {sec(r['high_s'])} | "
            f"{sec(r['actual_s'])} | {inside} |")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the project whose MLflow store holds the run")
    ap.add_argument("--stage", choices=[SEARCH, FINAL], default=SEARCH)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report = replay(args.root.resolve(), args.stage)
    text = render(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"progress_replay_{args.stage}.json").write_text(json.dumps(report, indent=1))
        (args.out / f"progress_replay_{args.stage}.md").write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()
