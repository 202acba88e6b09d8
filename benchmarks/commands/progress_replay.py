"""How close the progress display's estimate of the time left comes, replayed on a finished run.

    .venv/bin/python -m benchmarks.commands.progress_replay --root PROJECT [--stage search|final] [--out DIR]

Reads the newest search or final stage of every dataset in the project's MLflow store, then
rebuilds the Snapshot the display would have read at 40 moments of the stage (each trial's or
seed's epochs, epoch times and best score logged by then, from the metrics' timestamps) and puts
the estimate (pipeline.progress.estimate.time_left) beside the time that was really left. A stage
run before the display existed replays as well: it needs only the runs' `epoch`, `epoch_seconds`
and `val_metric` histories. `--out`: progress_replay.json and .md there.

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
from pipeline.progress.estimate import time_left
from pipeline.progress.model import DONE, FAILED, FINAL, RUNNING, SEARCH, STOPPED, Rungs, Snapshot, Unit, Work
from pipeline.progress.read import PATIENCE, PRIOR, STALE, rungs_of
from pipeline.sweep.tuner import asha_rules
from pipeline.training.selection import is_better, lowers_loss, progressed
from pipeline.stores import tracking

POINTS = 40
LAST_S = 60.0  # the worst ratio after half leaves out the last minute, where a few seconds make a ratio


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


def _unit(client: tracking.MlflowClient, parent: Any, stage: str) -> tuple[Unit, list[Trace]]:
    params, tags = parent.data.params, parent.data.tags
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.`{tracking.PARENT_TAG}` = '{parent.info.run_id}'",
                                  max_results=50000)
    mode = tags.get("progress_mode", "max")  # a run from before the tag: "max" (the estimate does not read scores)
    traces = [_trace(client, r, stage, mode) for r in children]
    if stage == SEARCH:
        total = int(params.get("search.num_samples", len(traces))) * int(params.get("search.repeats", 1))
        epochs, round_size = int(params.get("search.epochs", 1)), int(params.get("search.round_size", 0)) or None
    else:
        total, epochs, round_size = len(traces), int(float(params.get("epochs", 1))), None
    rounds = -(-int(params.get("search.num_samples", 1)) // round_size) if round_size else None
    asha = (rungs_of(tags) or _rules_from_params(params)) if stage == SEARCH else None
    prior = tags.get(PRIOR)  # a final parent's search-time epoch (a run from before the tag: none)
    patience = tags.get(PATIENCE, params.get("final_patience", "")) if stage == FINAL else ""  # the param: before the tag
    unit = Unit(tags.get("dataset", "?"), tags.get("family", "?"), total, epochs, mode, round_size, rounds,
                prior_epoch_s=float(prior) if prior else None, asha=asha,
                patience=int(patience) if patience.isdigit() else None)
    return unit, traces


def _rules_from_params(params: dict[str, str]) -> Rungs | None:
    """A search parent's ASHA rules from the search parameters it logged (a run from before the tag)."""
    keys = ("epochs", "round_size", "rounds_in_flight", "repeats", "asha")
    try:
        given = {k: ast.literal_eval(params[f"search.{k}"]) for k in keys if f"search.{k}" in params}
        return asha_rules(SearchParams.model_validate(given))
    except (ValueError, SyntaxError):
        return None


def replay(root: Path, stage: str, points: int = POINTS) -> dict[str, Any]:
    """The estimate against the time really left at `points` moments of the stage."""
    client = tracking.MlflowClient(tracking.tracking_uri(root))
    exp_ids = [e.experiment_id for e in client.search_experiments(filter_string="name LIKE 'ctsweep/%'")]
    parents = _parents(client, exp_ids, stage)
    if not parents:
        raise SystemExit(f"no finished {stage} stage in {tracking.tracking_uri(root)}")
    units = [_unit(client, p, stage) for p in parents]
    start = min(p.info.start_time / 1000 for p in parents)
    end = max(t.end for _, traces in units for t in traces if t.end != float("inf"))
    rows = []
    for i in range(1, points):
        t = start + (end - start) * i / points
        snap = Snapshot(stage, start, t, tuple(
            replace(u, work=tuple(w for w in (tr.at(t, u.mode) for tr in traces) if w is not None))
            for u, traces in units))
        left = time_left(snap)
        rows.append({"elapsed_s": round(t - start, 1), "share": round(i / points, 3), "ended": snap.ended,
                     "total": snap.total, "estimate_s": None if left is None else round(left, 1),
                     "actual_s": round(end - t, 1),
                     "ratio": None if left is None or end - t <= 0 else round(left / (end - t), 3)})
    return {"root": str(root), "stage": stage, "wall_s": round(end - start, 1), "units": len(units), "rows": rows,
            "at_half": next(r for r in rows if r["share"] >= 0.5),
            "at_half_ended": next((r for r in rows if 2 * r["ended"] >= r["total"]), None),
            "worst_after_half": _worst(_after_half(rows)), "within_25_after_half": _within(_after_half(rows))}


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


def render(report: dict[str, Any]) -> str:
    lines = [f"# Time left, estimated and actual: the {report['stage']} stage of {report['root']}", "",
             f"{report['units']} (dataset, family) units, {report['wall_s']:.0f} s from the first parent's start "
             f"to the last epoch. Ratio: estimate / actual.", "", _summary(report), "",
             "| elapsed | share of the wall | ended | estimate | actual | ratio |", "|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        est = "—" if r["estimate_s"] is None else f"{r['estimate_s']:.0f} s"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['elapsed_s']:.0f} s | {r['share']:.0%} | {r['ended']}/{r['total']} | {est} | "
                     f"{r['actual_s']:.0f} s | {ratio} |")
    return "\n".join(lines) + "\n"


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
