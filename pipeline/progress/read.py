"""A running stage's progress read from MLflow, by its own driver (the live display) or by
`ctsweep status` from another terminal: the same two queries either way.

The driver of a stage tags each (dataset, family) parent run it opens (`mark_parent`) with what
the unit will run and when and where this attempt started; its trials and seeds log `epoch`,
`epoch_seconds` and `best_val_metric` every epoch (pipeline.training.loop). A search trial's run
stays RUNNING until its family's record closes it, so the search's driver tags each trial's run as
Tune ends it (`ENDED_TAG`, pipeline.sweep.progress_tags). One query finds the parents, one the
children started since the earliest of them (a final stage's seeds kept from an earlier attempt
are counted from the parent's `progress_kept`; a resumed search's trials, started before, are
read per parent).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import defaultdict
from dataclasses import asdict, replace
from typing import Any, Iterable

from pipeline.progress.model import DONE, FAILED, FINAL, RUNNING, SEARCH, STOPPED, Rungs, Snapshot, Unit, Work
from pipeline.stores import tracking

STARTED, HOST, PID = "progress_started", "progress_host", "progress_pid"
TOTAL, KEPT, MAX_EPOCHS, ROUND_SIZE, ROUNDS, MODE, PRIOR = (
    "progress_total", "progress_kept", "progress_max_epochs", "progress_round_size", "progress_rounds",
    "progress_mode", "progress_prior_epoch_s")
ASHA = "progress_asha"  # a search unit's ASHA rules (model.Rungs), as JSON
PATIENCE = "progress_patience"  # a final unit's early-stopping patience
PRIOR_EPOCHS = "progress_prior_epochs"  # a final seed's epochs by patience, as its search measured (Unit.prior_epochs)
MOST = "progress_most"  # the most seeds a final unit may come to, the race's included (Unit.most)
STALE = "stale_epochs"  # a trial's or seed's epochs since its last progress, logged each epoch
ENDED_TAG = "progress_ended"  # a search trial's end as Tune saw it: DONE, STOPPED or FAILED
BEST = "best_val_metric"
REPEAT = "search_repeat"  # a final seed's search repeat (pipeline.final.resume.REPEAT_TAG)
STAGES = (SEARCH, FINAL)  # the stages that show progress


def mark_parent(client: tracking.MlflowClient, run_id: str, started: float, total: int, max_epochs: int, mode: str,
                round_size: int | None = None, rounds: int | None = None, kept: int = 0,
                prior_epoch_s: float | None = None, asha: Rungs | None = None, patience: int | None = None,
                prior_epochs: float | None = None, most: int | None = None) -> None:
    """Tag a unit's parent run with what its stage will run and this attempt's start and driver
    (the optional ones: model.Unit's fields of the same names)."""
    tags: dict[str, Any] = {STARTED: f"{started:.3f}", HOST: socket.gethostname(), PID: os.getpid(), TOTAL: total,
                            KEPT: kept, MAX_EPOCHS: max_epochs, MODE: mode}
    if round_size:
        tags.update({ROUND_SIZE: round_size, ROUNDS: rounds or 1})
    if prior_epoch_s:
        tags[PRIOR] = f"{prior_epoch_s:.4g}"
    if asha is not None:
        tags[ASHA] = json.dumps(asdict(asha), separators=(",", ":"))
    if patience:
        tags[PATIENCE] = patience
    if prior_epochs:
        tags[PRIOR_EPOCHS] = f"{prior_epochs:.4g}"
    if most:
        tags[MOST] = most
    tracking.set_tags(client, run_id, tags)


def live_parents(client: tracking.MlflowClient, exp_ids: list[str], stage: str, since: float | None = None,
                 closed: bool = False) -> list[Any]:
    """The RUNNING parent runs of `stage` a driver tagged (`mark_parent`), in `exp_ids`; `since`:
    only those of an attempt started then or later (a driver's own); `closed`: those already
    closed too (the driver's last reading, once its records are written)."""
    if not exp_ids:
        return []
    running = "" if closed else "attributes.status = 'RUNNING' and "
    runs = client.search_runs(exp_ids, filter_string=(
        f"{running}tags.stage = '{stage}' and tags.`{tracking.RUN_LEVEL_TAG}` = "
        f"'{tracking.PARENT_LEVEL}' and tags.`{STARTED}` IS NOT NULL"), max_results=50000)
    return [r for r in runs if since is None or float(r.data.tags[STARTED]) >= since - 1.0]


def _children(client: tracking.MlflowClient, exp_ids: list[str], parents: list[Any]) -> dict[str, list[Any]]:
    """{parent run id: its child runs}: those started since the earliest parent's attempt in one
    query; a resumed search's (attempts > 1) per parent, since its reopened trials started before."""
    start_ms = int(min(float(p.data.tags[STARTED]) for p in parents) * 1000) - 1000
    found: dict[str, list[Any]] = defaultdict(list)
    for run in client.search_runs(exp_ids, filter_string=f"attributes.start_time >= {start_ms}", max_results=50000):
        parent = run.data.tags.get(tracking.PARENT_TAG)
        if parent:
            found[parent].append(run)
    for p in parents:
        if p.data.tags.get("stage") == SEARCH and int(p.data.tags.get("attempts", "1")) > 1:
            found[p.info.run_id] = list(client.search_runs(
                [p.info.experiment_id], filter_string=f"tags.`{tracking.PARENT_TAG}` = '{p.info.run_id}'",
                max_results=50000))
    return found


def _state(run: Any, stage: str, started: float) -> str | None:
    """A child run's Work state; None for a run of an earlier attempt that does not count."""
    tags, status = run.data.tags, run.info.status
    if status == "RUNNING":
        return tags.get(ENDED_TAG) or RUNNING
    if status == "FINISHED":
        return STOPPED if stage == SEARCH and tags.get(tracking.OUTCOME_TAG) == tracking.STOPPED_EARLY else DONE
    if run.info.start_time / 1000 < started - 1.0:  # an earlier attempt's: its interrupted work runs again
        return None
    # Stopped by a signal (the user's Ctrl-C, a SIGTERM): closed KILLED and tagged by the stage,
    # not an error of the trial or seed: it trains again when the command runs again
    if status == "KILLED" or "interrupted" in tags:
        return STOPPED
    return FAILED


def work_of(run: Any, stage: str, started: float) -> Work | None:
    """A trial's or seed's Work from its run (its latest `epoch`, `epoch_seconds`, best score and
    `stale_epochs`)."""
    state = _state(run, stage, started)
    if state is None:
        return None
    m, tags = run.data.metrics, run.data.tags
    label = tags.get("optuna_trial_number" if stage == SEARCH else "seed", "0")
    best = m.get(BEST, m.get("val_metric"))
    stale = int(m[STALE]) if STALE in m else None
    return Work(int(label) if str(label).lstrip("-").isdigit() else 0, state, int(m.get("epoch", 0)),
                m.get("epoch_seconds"), best, run.info.start_time / 1000, stale)


def seed_key(run: Any) -> tuple[str, ...]:
    """What names a final seed whatever its attempt: its `seed`, `search_repeat` and `lr_factor` tags."""
    return tuple(run.data.tags.get(t, "") for t in ("seed", REPEAT, "lr_factor"))


def superseded(children: Iterable[Any]) -> set[str]:
    """Run ids of a final stage's seeds that Ray started again: when a seed's worker or node dies,
    its MLflow run stays RUNNING for good while Ray retries the task under a new run of the same
    seed (`seed`, `search_repeat` and `lr_factor` tags), so every run of a seed but its latest
    start is an abandoned attempt, not work in progress."""
    latest: dict[tuple[str, ...], Any] = {}
    runs = list(children)
    for run in runs:
        key = seed_key(run)
        if key not in latest or run.info.start_time > latest[key].info.start_time:
            latest[key] = run
    kept = {run.info.run_id for run in latest.values()}
    return {run.info.run_id for run in runs if run.info.run_id not in kept and run.info.status == "RUNNING"}


def unit_of(parent: Any, children: Iterable[Any], stage: str) -> Unit:
    tags = parent.data.tags
    started = float(tags[STARTED])
    children = list(children)
    again: set[tuple[str, ...]] = set()
    if stage == FINAL:
        gone = superseded(children)
        again = {seed_key(r) for r in children if r.info.run_id in gone}  # shown once, as retried
        children = [r for r in children if r.info.run_id not in gone]
    work = [replace(w, retried=stage == FINAL and seed_key(r) in again)
            for r in children if (w := work_of(r, stage, started)) is not None]
    work += [Work(-1, DONE)] * int(tags.get(KEPT, "0"))  # seeds an earlier attempt finished (kept, not run again)
    work.sort(key=lambda w: w.label)
    prior = tags.get(PRIOR)
    return Unit(tags.get("dataset", "?"), tags.get("family", "?"), int(tags.get(TOTAL, "0")),
                int(tags.get(MAX_EPOCHS, "0")), tags.get(MODE, "max"),
                int(tags[ROUND_SIZE]) if ROUND_SIZE in tags else None,
                int(tags[ROUNDS]) if ROUNDS in tags else None, tuple(work), float(prior) if prior else None,
                rungs_of(tags), int(tags[PATIENCE]) if tags.get(PATIENCE, "").isdigit() else None,
                _number(tags.get(PRIOR_EPOCHS)), int(tags[MOST]) if tags.get(MOST, "").isdigit() else None)


def _number(text: str | None) -> float | None:
    """A tag's positive number; None when absent or unreadable (a tag this version cannot read)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


def rungs_of(tags: dict[str, str]) -> Rungs | None:
    """A parent's ASHA rules from its tag (None without one, or with one this version cannot read)."""
    try:
        found = json.loads(tags[ASHA])
        return Rungs(tuple(int(r) for r in found["epochs"]), float(found["keep"]), int(found["free"]),
                     int(found["repeats"]))
    except (KeyError, TypeError, ValueError):
        return None


def snapshot(client: tracking.MlflowClient, exp_ids: list[str], stage: str, since: float | None = None,
             now: float | None = None, closed: bool = False) -> Snapshot | None:
    """The stage's progress now, over its live parents in `exp_ids` (`closed`: and those of the
    attempt that have ended, see live_parents); None when there is none."""
    parents = live_parents(client, exp_ids, stage, since, closed)
    if not parents:
        return None
    found = _children(client, exp_ids, parents)
    units = sorted((unit_of(p, found.get(p.info.run_id, []), stage) for p in parents), key=lambda u: u.name)
    started = since if since is not None else min(float(p.data.tags[STARTED]) for p in parents)
    return Snapshot(stage, started, time.time() if now is None else now, tuple(units))


def driver_of(parent: Any) -> tuple[str, int]:
    """(host, pid) of the driver that tagged a parent run."""
    return parent.data.tags.get(HOST, ""), int(parent.data.tags.get(PID, "0") or 0)

