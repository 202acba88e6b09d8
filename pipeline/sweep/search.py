"""The `search` stage: the searches of a dataset's families, all at once in one Ray Tune run,
locally or on a Ray cluster; with `search.share_datasets`, the out-of-date families of the
project's other prepared datasets join the same run (`search_datasets`; a family is then named
"<dataset>/<family>" inside the run, and is otherwise searched exactly as alone).

Every family keeps its own search (pipeline.sweep.families): its own seeded Optuna study (TPE,
the paper's reference first), its own ASHA rungs (weak trials stopped early, told to Optuna as
pruned: pipeline.sweep.scheduling), its own budget, concurrency cap and MLflow parent run with a
child run per trial (pipeline.sweep.trial), its own result file. What the families share is the
cluster: a free trial slot goes to whichever family has a trial to run, instead of the slots
draining at the end of every search. `ctsweep search D F` searches one family the same way.

Faults: a trial whose process or node dies is retried from its last checkpoint
(`search.max_failures`); a driver killed mid-search leaves its parent runs unfinished, and
running the stage again finds them by the fingerprint of what was searched and resumes the same
Ray experiment with `Tuner.restore` (finished trials are kept, not rerun).

A family whose every trial fails (no epoch within its time limit, a NaN loss, a solver failure)
does not stop the sweep: its record says "status": "failed" with the reasons, its parent run
ends FAILED tagged `all_trials_failed`, one warning goes to stderr, and the stage succeeds, so
`dvc repro` goes on with the other families (final and the report skip this one). That outcome
is final like a result: rerunning the search starts a new one. Where the family's result file
already holds a good result (an earlier search's), the failed search never replaces it (issue
31): it is written beside it as `<family>.failed.json`, and the stage ends with one line saying
both and exit status 2, since going on would carry the earlier result into the final stage as if
this search had found it.

Results are written and their parent runs closed together, under `deferred()`: a signal landing
then waits until every result is whole and its run closed (FINISHED, or FAILED for an all-failed
search), and the message on the way out names what was written (pipeline/runtime/interrupts.py).
When both stores are database servers, the part of a family's record that takes time (closing its
trials' runs, copying its studies, fANOVA) is built as soon as its last trial has ended, while
the other families' trials still run (pipeline.sweep.early_records); the same record as at the end.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pipeline.config import SearchParams
from pipeline.config.limits import MIN_SERIES
from pipeline.data.contract import load_dataset, load_meta
from pipeline.data.provenance import provenance_fields
from pipeline.data.raw_lock import read_lock
from pipeline.errors import CtsweepError
from pipeline.names import check_name
from pipeline.progress.display import shown
from pipeline.progress.model import SEARCH
from pipeline.progress.read import mark_parent
from pipeline.runtime.interrupts import Interrupted, deferred, graceful_tune, wrote
from pipeline.stores import staleness, tracking
from pipeline.stores.database_url import masked
from pipeline.stores.files import check_writable, write_json
from pipeline.stores.locks import take_datasets
from pipeline.stores.paths import processed_dir, raw_lock_path, require
from pipeline.stores.ray_storage import check_storage_path
from pipeline.sweep import run_lookup, sensitivity
from pipeline.sweep.cluster import (check_fits, check_shared_storage, is_uri, local_node, pending_trials,
                                    ray_session)
from pipeline.sweep.early_records import EarlyRecords
from pipeline.sweep.epoch_time import check_time_limit
from pipeline.sweep.failure_lines import FailureLines, quiet_tracebacks
from pipeline.sweep.families import family_of
from pipeline.sweep.parents import close_parent, log_outcome, open_parents
from pipeline.sweep.progress_tags import ProgressTags
from pipeline.sweep.plans import FamilyPlan, plan_family, start_limit, trial_contexts
from pipeline.sweep.records import each_in_threads, family_record, failed_path, kept_result, record_workers
from pipeline.sweep.trial import run_trial
from pipeline.sweep.tuner import TrialFn, asha_rules, new_tuner, restored_tuner, scheduler_of, searcher_of

log = logging.getLogger(__name__)


def search(root: Path, dataset: str, family: str, p: SearchParams, fresh: bool = False,
           trial_fn: TrialFn = run_trial) -> dict[str, Any]:
    """Run (or resume) the search for one (dataset, family); write results/<dataset>/search/<family>.json.

    Bad input, unwritable outputs, a request no node can meet and local stores on a multi-node
    cluster are refused before any trial starts. `fresh`: never resume an earlier attempt.
    """
    return search_many(root, dataset, [family], p, fresh=fresh, trial_fn=trial_fn)[family]


def search_many(root: Path, dataset: str, families: list[str], p: SearchParams, fresh: bool = False,
                only_stale: bool = False, trial_fn: TrialFn = run_trial) -> dict[str, dict[str, Any]]:
    """Search every family of `families` on `dataset` at once; returns {family: record}.

    `only_stale`: skip a family whose result file was written from the same params, space,
    data and code (what `dvc repro` wants when one space file changed). `trial_fn`: what a trial
    process runs (pipeline.sweep.trial.run_trial; benchmarks substitute a timed stand-in).
    """
    return search_datasets(root, [dataset], families, p, fresh, only_stale, trial_fn)[dataset]


def search_datasets(root: Path, datasets: list[str], families: list[str], p: SearchParams, fresh: bool = False,
                    only_stale: bool = False, trial_fn: TrialFn = run_trial,
                    optional: Sequence[str] = ()) -> dict[str, dict[str, dict[str, Any]]]:
    """Search every family on every dataset at once, in one Ray Tune run per metric direction
    (Tune's `mode` is the run's); returns {dataset: {family: record}}. Each (dataset, family)
    keeps its own study, rungs, MLflow parent run (in its dataset's experiment) and result file,
    exactly as when its dataset is searched alone: only the cluster's slots are shared.

    `optional`: more datasets to take on when they can be (`search.share_datasets`): one that is
    busy or fails a check before Ray is left, with one line, to its own `ctsweep search`.
    """
    for name in [*datasets, *optional]:
        check_name(name, "dataset name")
    for family in families:
        check_name(family, "family name")  # before it names a space file, a result file or a Ray experiment
    for kind, names in (("datasets", [*datasets, *optional]), ("families", families)):
        if len(set(names)) != len(names):
            raise ValueError(f"{kind} listed twice: {names}")
    with contextlib.ExitStack() as locks:  # one driver per search: a second is refused
        left: list[str] = []  # optional datasets left to their own search: said once every check has passed
        parts = take_datasets(locks, root, "search", families, datasets, optional,
                              lambda name, extra: _part(root, name, families, p, extra or only_stale, trial_fn), left)
        return _search(root, parts, p, fresh, trial_fn, left)


class SearchFailedError(CtsweepError):
    """Every trial of a search failed where an earlier good result is kept: the stage cannot go on."""


@dataclass
class _Part:
    """One dataset's share of a search: its data, its families' plans, the ones already current."""

    dataset: str
    data_dir: Path
    meta: Any
    data: Any
    plans: list[FamilyPlan]
    done: dict[str, dict[str, Any]]
    client: Any = None
    exp_id: str = ""
    notes: list[str] = field(default_factory=list)  # the dataset's own (a small split); its plans' in FamilyPlan.notes

    @property
    def todo(self) -> list[FamilyPlan]:
        return [plan for plan in self.plans if plan.family not in self.done]


def _part(root: Path, dataset: str, families: list[str], p: SearchParams, only_stale: bool,
          trial_fn: TrialFn) -> _Part:
    """Everything checked about one dataset's searches before Ray starts."""
    data_dir = require(processed_dir(root, dataset), f"ctsweep prepare {dataset}")
    read_lock(raw_lock_path(root), dataset)  # the data's provenance is recorded there: a damaged file is refused
    meta = load_meta(data_dir)
    data = load_dataset(data_dir)  # a corrupt split fails now, before Ray and MLflow; shipped to every trial
    plans = [plan_family(root, dataset, family, p, meta, data_dir) for family in families]
    done = {plan.family: {**record, "up_to_date": True}  # the flag is for the caller; the file is untouched
            for plan in plans if only_stale and (record := staleness.current_record(plan.out, plan.digest)) is not None}
    part = _Part(dataset, data_dir, meta, data, plans, done, notes=_small_splits(dataset, meta))
    for plan in part.todo if trial_fn is run_trial else ():  # a limit below one epoch of the reference fails every
        check_time_limit(plan, p, data, dataset)  # trial (epoch_time.py; a stand-in trial trains nothing to measure)
    return part


def _search(root: Path, parts: list[_Part], p: SearchParams, fresh: bool,
            trial_fn: TrialFn = run_trial, left: Sequence[str] = ()) -> dict[str, dict[str, dict[str, Any]]]:
    storage = check_storage_path(root, p.storage_path)  # the same location storage_location gives, checked
    sensitivity.check_optuna_storage(root, p.optuna_storage)  # opened now: not after the whole search
    if not is_uri(storage):
        check_writable(Path(storage))
    active = [part for part in parts if part.todo]
    here = local_node()  # a local instance: a request this machine cannot meet is refused before it starts
    for plan in {plan.family: plan for part in active for plan in part.todo}.values() if here else ():
        check_fits(plan.res, _resources_key(p, plan.family), p.autoscaling, nodes=here)
    if not active:
        _print_lines(left)
    records: dict[tuple[str, str], dict[str, Any]] = {}
    written: dict[tuple[str, str], Path] = {}  # (dataset, family) -> where its record went, once written and closed
    if active:
        uri = tracking.tracking_uri(root)
        tracking.ensure_store(uri)
        with ray_session(dashboard=any(plan.res.workers > 1 for part in active for plan in part.todo)):
            check_shared_storage(uri, p.storage_path, "search.storage_path")
            for plan in {plan.family: plan for part in active for plan in part.todo}.values():
                check_fits(plan.res, _resources_key(p, plan.family), p.autoscaling)
            _print_lines(left)  # every check passed: a refusal above was its own line alone
            _print_notes(active)
            for part in active:
                part.client, part.exp_id = tracking.experiment_id(root, part.dataset)
            with shown(uri, [part.exp_id for part in active], SEARCH) as started:
                for mode in sorted({part.meta.mode for part in active}):  # one Tune run per metric direction
                    group = [part for part in active if part.meta.mode == mode]
                    records.update(_search_group(root, group, p, fresh, storage, mode, trial_fn, written, started))
    failures = []
    for part in active:
        for plan in part.todo:
            record, out = records[(part.dataset, plan.family)], written[(part.dataset, plan.family)]
            if out != plan.out:
                failures.append(_kept_line(root, plan, record))
            elif record["status"] == "failed":
                _warn_failed(root, plan.out, record)
    if failures:
        raise SearchFailedError(" ".join(failures))
    return {part.dataset: {plan.family: part.done.get(plan.family) or records[(part.dataset, plan.family)]
                           for plan in part.plans} for part in parts}


def _search_group(root: Path, group: list[_Part], p: SearchParams, fresh: bool, storage: str, mode: str,
                  trial_fn: TrialFn, written: dict[tuple[str, str], Path],
                  started: float) -> dict[tuple[str, str], dict[str, Any]]:
    """One Ray Tune run over the stale families of `group`'s datasets (all with this `mode`);
    writes each record and closes its parent run; returns {(dataset, family): record}.
    `started`: when the progress display began (pipeline.progress.read.mark_parent)."""
    if len(group) > 1:  # the datasets share the run: a family's units are named for its dataset too
        for part in group:
            for plan in part.todo:
                plan.key = f"{part.dataset}/{plan.family}"
    client = group[0].client
    path, resumed = open_parents(client, [(part.exp_id, part.dataset, part.todo) for part in group], storage, fresh)
    log.info("Ray Tune experiment %s: %s", "resumed" if resumed else "started", path)  # the log, not the terminal
    for part in group:
        for plan in part.todo if part.meta.provenance else ():  # not a tag a resumed search is found by: its
            tracking.set_tags(client, plan.parent, provenance_fields(part.meta))  # fingerprint covers meta.json
    cells = [(part, plan) for part in group for plan in part.todo]
    for part, plan in cells:
        mark_parent(part.client, plan.parent, started, p.num_samples * p.repeats, p.epochs, mode, p.round_size,
                    math.ceil(p.num_samples / p.round_size), asha=asha_rules(p))
    try:
        with pending_trials(start_limit(p, [plan for _, plan in cells])):
            records = _run(root, group, p, mode, path, resumed, trial_fn)
        with deferred():  # a signal now waits until every result is written whole and its run closed
            for part, plan in cells:
                written[(part.dataset, plan.family)] = _publish(root, part.client, plan, records[(part.dataset, plan.family)])
    except Interrupted as exc:  # SIGINT / SIGTERM: the unwritten results are untouched; resumable
        with deferred():  # a second Ctrl-C must not leave runs RUNNING half-way through this
            for part, plan in cells:
                if (part.dataset, plan.family) not in written:
                    run_lookup.close_interrupted(part.client, part.exp_id, plan.parent, str(exc))
        raise
    except BaseException as exc:  # a record could not be written, or a crash: resumable
        for part, plan in cells:
            if (part.dataset, plan.family) not in written:
                tracking.finish(part.client, plan.parent, exc)
        raise
    return records


def _publish(root: Path, client: tracking.MlflowClient, plan: FamilyPlan, record: dict[str, Any]) -> Path:
    """Write the family's record and close its parent run; returns where the record went: its
    result file, or beside it when every trial failed and the file holds an earlier good result."""
    out = failed_path(plan.out) if record["status"] == "failed" and kept_result(plan.out) else plan.out
    write_json(out, record)
    log_outcome(client, plan.parent, record)
    close_parent(client, plan.parent, record)
    if out == plan.out and record["status"] == "ok":
        failed_path(plan.out).unlink(missing_ok=True)  # an earlier failed search's, superseded by this result
    wrote(_shown(root, out), f"{plan.family}: {'search complete' if record['status'] == 'ok' else 'every trial failed'}"
                            f", MLflow parent run {'FINISHED' if record['status'] == 'ok' else 'FAILED'}")
    return out


def _shown(root: Path, path: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


def _kept_line(root: Path, plan: FamilyPlan, record: dict[str, Any]) -> str:
    reasons = "; ".join(record["errors"][:3]) + (" ..." if len(record["errors"]) > 3 else "")
    return (f"{record['dataset']}/{plan.family}: all {record['n_trials']} trials of this search failed ({reasons}); "
            f"the earlier result {_shown(root, plan.out)} is kept and this search was written beside it to "
            f"{_shown(root, failed_path(plan.out))}: fix the cause and search again, or move the failed search over "
            f"the earlier result to record {plan.family} as failed.")


def _resources_key(p: SearchParams, family: str) -> str:
    """The params.yaml key that set the family's resources."""
    return f"search.family_resources.{family}" if family in p.family_resources else "search.resources"


def _small_splits(dataset: str, meta: Any) -> list[str]:
    """One line when a split holds fewer than MIN_SERIES series (pipeline/config/limits.py): the
    search chooses by a score over it, which one series moves by more than 10 points."""
    small = [f"{n} {name}" for name, n in (meta.sizes or {}).items()
             if name in ("train", "val", "test") and n < MIN_SERIES]
    if not small:
        return []
    return [f"ctsweep: search: warning: {dataset} has only {', '.join(small)} series: a score over fewer than "
            f"{MIN_SERIES} moves by more than {100 // MIN_SERIES} points with one series (prepare more, or "
            f"final.validation: per_seed)"]


def _print_lines(lines: Sequence[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def _print_notes(active: list[_Part]) -> None:
    """The notes of the datasets and families about to be searched, once each, on stderr."""
    for part in active:
        for line in [*part.notes, *(note for plan in part.todo for note in plan.notes)]:
            print(line, file=sys.stderr)


def _warn_failed(root: Path, out: Path, record: dict[str, Any]) -> None:
    """One line on stderr: the stage succeeds, so this is where a user learns the family failed."""
    reasons = "; ".join(record["errors"][:3]) + (" ..." if len(record["errors"]) > 3 else "")
    where = out.relative_to(root) if out.is_relative_to(root) else out
    print(f"ctsweep: warning: {record['dataset']}/{record['family']}: all {record['n_trials']} search trials "
          f"failed: {reasons}; recorded as failed in {where}; final and report will skip this family",
          file=sys.stderr)


def _run(root: Path, group: list[_Part], p: SearchParams, mode: str, path: str, resumed: bool,
         trial_fn: TrialFn) -> dict[tuple[str, str], dict[str, Any]]:
    contexts, plans = {}, []
    for part in group:
        for plan in part.todo:
            if not plan.resumed:
                shown = {**p.model_dump(), "optuna_storage": masked(p.optuna_storage)}  # a typed password: ***
                tracking.log_params(part.client, plan.parent, {"search." + k: v for k, v in shown.items()})
        contexts.update(trial_contexts(root, part.dataset, p, part.data_dir, part.exp_id, part.todo,
                                       part.meta.provenance))
        plans += part.todo
    # Shipped once through Ray's object store: one dataset as it always was, or {dataset: Dataset}.
    data = group[0].data if len(group) == 1 else {part.dataset: part.data for part in group}
    jobs = {plan.key: (part, plan) for part in group for plan in part.todo}
    url = sensitivity.storage_url(root, p.optuna_storage)
    workers = record_workers(url, group[0].client.tracking_uri, len(jobs))
    if workers > 1:
        sensitivity.create_schema(url)  # once, before the threads open the database
    ran: list[Any] = []  # the searcher and scheduler that run (after Tuner.restore, the unpickled ones)

    def record(key: str, results: Sequence[Any]) -> dict[str, Any]:
        part, plan = jobs[key]  # a client of its own: the families' records may be built in threads
        return family_record(root, part.dataset, p, part.meta, plan, tracking.MlflowClient(part.client.tracking_uri),
                             part.exp_id, path, *ran, list(results))
    # A family's record while the others still run: database servers only, and not a resumed run
    least = p.saturation.min_trials if p.saturation.enabled else p.num_samples  # a saturating search may stop there
    early = EarlyRecords(record, {key: least * p.repeats for key in jobs}, workers) \
        if workers > 1 and not resumed else None
    with graceful_tune() as interrupt:  # from here a signal stops Tune gracefully; checked below
        if resumed:
            tuner = restored_tuner(path, contexts, data, plans, trial_fn)
        else:
            storage, name = path.rsplit("/", 1)
            ended = ProgressTags(group[0].client.tracking_uri, p.epochs)  # progress read from MLflow
            tuner = new_tuner(plans, contexts, data, p, mode, storage, name, trial_fn,
                              [ended, FailureLines(root), *([early] if early else [])])
            if p.saturation.enabled:  # the live totals follow each family's grants and stop
                _follow_planned(searcher_of(tuner), ended, {key: plan.parent for key, (_, plan) in jobs.items()},
                                p.round_size)
        ran += [searcher_of(tuner), scheduler_of(tuner)]
        if early:
            early.bind(ran[0])
        quiet_tracebacks()  # a failed trial: one line (FailureLines), its traceback in its error.txt
        try:
            grid = tuner.fit()
        finally:
            if early:
                early.close()  # the records being built end whole, whatever ended the run
    if interrupt.signum is not None:  # Tune stopped early and saved its state: a partial search, not a result
        raise Interrupted(interrupt.signum)
    ran[:] = [searcher_of(tuner), scheduler_of(tuner)]  # the same ones, unless Tune replaced them in fit
    results = list(grid)
    built = early.futures if early else {}
    late = [key for key in jobs if key not in built]

    records = _in_threads(lambda key: record(key, [r for r in results if r.config and family_of(r.config) == key]),
                          late, workers)
    # in job order, so that of several failed records the first family's error is the one raised
    records = {key: built[key].result() if key in built else records[key] for key in jobs}
    return {(part.dataset, plan.family): records[key] for key, (part, plan) in jobs.items()}


def _follow_planned(searcher: Any, tags: ProgressTags, parents: dict[str, str], round_size: int) -> None:
    """Keep each family's parent-run progress total (mark_parent's num_samples x repeats) equal to
    the trials its saturating search is expected to run, summed over its repeats, and its rounds
    those of its longest repeat."""
    planned: dict[str, dict[int, int]] = {key: {} for key in parents}

    def hook(unit: tuple[str, int], n: int) -> None:
        key, repeat = unit
        planned[key][repeat] = n
        tags.planned(parents[key], sum(planned[key].values()), math.ceil(max(planned[key].values()) / round_size))

    searcher.watch_planned(hook)


def _in_threads(build: Callable[[str], dict[str, Any]], keys: list[str], workers: int) -> dict[str, dict[str, Any]]:
    """{key: build(key)}, in up to `workers` threads (one: in this one)."""
    return dict(zip(keys, each_in_threads(build, keys, workers)))
