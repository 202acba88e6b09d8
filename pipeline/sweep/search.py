"""The `search` stage: the searches of a dataset's families, all at once in one Ray Tune run,
locally or on a Ray cluster.

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
is final like a result: rerunning the search starts a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ray import tune
from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

from pipeline import staleness, tracking
from pipeline.families import user as user_families
from pipeline.config import Resources, SearchParams
from pipeline.data.contract import Dataset, load_dataset, load_meta
from pipeline.data.inputs import fingerprint as data_fingerprint
from pipeline.errors import TrialFailedError
from pipeline.interrupts import Interrupted, deferred, graceful_tune
from pipeline.io import check_writable, write_json
from pipeline.locks import stage_lock
from pipeline.models import get_model_class
from pipeline.models.embedding import check_token_family
from pipeline.names import check_name
from pipeline.paths import processed_dir, require, search_result_path
from pipeline.spaces import SearchSpace, check_for_dataset, load_space, space_path
from pipeline.storage import check_storage_path
from pipeline.sweep import records as trial_outcome
from pipeline.sweep import run_lookup, sensitivity
from pipeline.sweep.cluster import check_fits, check_shared_storage, is_uri, pending_trials, ray_session, trial_slots
from pipeline.sweep.context import TrialContext
from pipeline.sweep.families import FamilyScheduler, FamilySearcher, family_of
from pipeline.sweep.records import METRIC, failure_reasons, space_record
from pipeline.sweep.scheduling import HistorySource, ResumableASHA, make_searcher
from pipeline.sweep.trial import run_family_trial, run_trial

__all__ = ["METRIC", "TrialContext", "run_trial", "search", "search_many", "optuna_states", "time_limit_key",
           "failure_reasons", "space_record"]

COMPLETE_TAG = "search_complete"  # set once the search's outcome is final: never resumed after
ALL_FAILED_TAG = "all_trials_failed"  # on the parent run of a search whose every trial failed
TrialFn = Callable[[dict[str, Any], TrialContext, Dataset], None]  # what a trial process runs


def storage_location(root: Path, storage_path: str) -> str:
    """Ray Tune's storage: a URI as given, else an absolute path (relative ones from the root)."""
    return storage_path if is_uri(storage_path) else str((root / storage_path).resolve())


def time_limit_key(p: SearchParams, family: str) -> str:
    """The params.yaml key that sets the family's trial time limit: what a user raises when
    every first epoch outruns it."""
    return f"search.family_time_limit_s.{family}" if family in p.family_time_limit_s else "search.trial_time_limit_s"


def search_fingerprint(dataset: str, family: str, p: SearchParams, space_file: Path, data_dir: Path) -> str:
    """What a search's results depend on: a rerun with the same fingerprint may resume it."""
    code = user_families.code_digest(family)  # a family of the user's: its code too (built-in: the stage's digest)
    blob = json.dumps({"dataset": dataset, "family": family, "params": p.model_dump(),
                       "space": space_file.read_text(), "data": data_fingerprint(data_dir),
                       **({"code": code} if code else {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class FamilyPlan:
    """One family's part of a search: checked before Ray starts, filled in as it runs."""

    family: str
    space: SearchSpace
    res: Resources
    fingerprint: str
    out: Path
    digest: str  # the fingerprint with the stage's code: a result stamped with it is current
    parent: str = ""
    resumed: bool = False


def _resources(res: Resources) -> dict[str, float]:
    if res.workers > 1:  # the trial only drives its Ray Train workers, which ask for their own resources
        from pipeline.sweep.distributed import DRIVER_RESOURCES
        return dict(DRIVER_RESOURCES)
    return {"cpu": res.cpu, "gpu": res.gpu}


def _trainable(contexts: dict[str, TrialContext], data: Any, plans: list[FamilyPlan], trial_fn: TrialFn) -> Any:
    """One trainable for every family: the trial's family picks its context and its resources."""
    own = {plan.family: resource_dict_to_pg_factory(_resources(plan.res)) for plan in plans}
    return tune.with_resources(tune.with_parameters(run_family_trial, contexts=contexts, data=data, trial_fn=trial_fn),
                               lambda config: own[family_of(config)])


def _new_tuner(plans: list[FamilyPlan], contexts: dict[str, TrialContext], data: Any, p: SearchParams, mode: str,
               storage: str, name: str, trial_fn: TrialFn) -> tune.Tuner:
    searchers, schedulers = {}, {}
    for plan in plans:
        ctx = contexts[plan.family]
        searchers[plan.family] = make_searcher(plan.space.define_by_run(), plan.space.reference_for(ctx.dataset),
                                               METRIC, mode, p.sampler_seed, p.n_startup_trials, p.epochs)
        schedulers[plan.family] = ResumableASHA(
            HistorySource(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id, METRIC),  # metric, mode: from Tune
            max_t=p.epochs, grace_period=min(p.asha.grace_period, p.epochs), reduction_factor=p.asha.reduction_factor)
    searcher = FamilySearcher(searchers, {plan.family: p.num_samples for plan in plans}, p.max_concurrent, METRIC,
                              mode)
    return tune.Tuner(
        _trainable(contexts, data, plans, trial_fn),
        # reuse_actors: a trial process (torch, the models and the dataset already loaded) runs the
        # next trial, of any family asking for the same resources, instead of a fresh process
        # importing it all again, seconds per trial here. Not for data-parallel trials: their Ray
        # Train run outlives Tune's 2 s reset window, and the next trial would fail to start in the
        # old process.
        tune_config=tune.TuneConfig(metric=METRIC, mode=mode, num_samples=searcher.total_samples,
                                    scheduler=FamilyScheduler(schedulers), search_alg=searcher,
                                    reuse_actors=all(plan.res.workers == 1 for plan in plans)),
        run_config=tune.RunConfig(
            name=name, storage_path=storage, verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            failure_config=tune.FailureConfig(max_failures=p.max_failures)),
    )


def _experiment_path(storage: str, dataset: str, families: list[str]) -> str:
    """A new Ray experiment's path: named for its family when it has one, else for the set."""
    label = families[0] if len(families) == 1 else "families-" + hashlib.sha256(
        ",".join(families).encode()).hexdigest()[:8]
    return f"{storage.rstrip('/')}/{dataset}__{label}__{time.strftime('%Y%m%d-%H%M%S')}"


def _open_parents(client: tracking.MlflowClient, exp_id: str, dataset: str, plans: list[FamilyPlan], storage: str,
                  fresh: bool) -> tuple[str, bool]:
    """(Ray experiment path, resumed); sets each plan's parent run.

    Resumed when every family's unfinished search with its fingerprint names the same Ray
    experiment and that experiment can be restored; otherwise a new experiment with a new parent
    run per family (an unfinished parent it replaces ends KILLED, tagged `superseded`).
    """
    tags = {plan.family: {"dataset": dataset, "family": plan.family, "stage": "search",
                          "search_fingerprint": plan.fingerprint} for plan in plans}
    previous = {plan.family: None if fresh else run_lookup.find_unfinished_parent(client, exp_id, tags[plan.family],
                                                                                  COMPLETE_TAG)
                for plan in plans}
    paths = {run.data.tags.get("ray_experiment_path", "") for run in previous.values() if run is not None}
    if None not in previous.values() and len(paths) == 1:
        path = paths.pop()
        if path and tune.Tuner.can_restore(path):
            for plan in plans:
                run = previous[plan.family]
                plan.parent, plan.resumed = run.info.run_id, True
                client.update_run(run.info.run_id, status="RUNNING")
                tracking.set_tags(client, run.info.run_id, {"attempts": int(run.data.tags.get("attempts", "1")) + 1,
                                                            tracking.RUN_LEVEL_TAG: tracking.PARENT_LEVEL})
                if "interrupted" in run.data.tags:  # it is running again; the interrupt stays in `attempts`
                    client.delete_tag(run.info.run_id, "interrupted")
            return path, True
    path = _experiment_path(storage, dataset, [plan.family for plan in plans])
    for plan in plans:
        old = previous[plan.family]
        if old is not None and old.info.status == "RUNNING":
            tracking.set_tags(client, old.info.run_id, {"superseded": "true"})
            tracking.terminate(client, old.info.run_id, "KILLED")
        plan.parent = tracking.start_run(client, exp_id, f"search/{plan.family}",
                                         {**tags[plan.family], "ray_experiment_path": path})
    return path, False


def optuna_states(searcher: Any) -> dict[str, int]:
    """How Optuna saw the trials: failed trials must be FAIL, never left RUNNING."""
    states: dict[str, int] = {}
    for trial in searcher._ot_study.get_trials(deepcopy=False):  # the study OptunaSearch told
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    return states


def _searcher_of(tuner: tune.Tuner) -> FamilySearcher:
    """The FamilySearcher that ran: after Tuner.restore, the one unpickled inside the Tuner, into
    which Ray restored the studies (Ray keeps no public handle on it)."""
    return tuner._local_tuner._tune_config.search_alg


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
    check_name(dataset, "dataset name")
    for family in families:
        check_name(family, "family name")  # before it names a space file, a result file or a Ray experiment
    if len(set(families)) != len(families):
        raise ValueError(f"families listed twice: {families}")
    with contextlib.ExitStack() as locks:  # one driver per search: a second is refused
        for family in sorted(families):
            locks.enter_context(stage_lock(root, "search", dataset, family))
        return _search(root, dataset, families, p, fresh, only_stale, trial_fn)


def _plan(root: Path, dataset: str, family: str, p: SearchParams, meta: Any, data_dir: Path) -> FamilyPlan:
    """Check one family against the dataset before Ray starts (space, tokens, protocol, outputs)."""
    if meta.vocab_size:  # a token dataset: refuse families that cannot read an embedding, before Ray
        check_token_family(family, get_model_class(family), dataset)
    space = load_space(space_path(root, family), family).for_dataset(dataset)  # its fixed values and reference
    check_for_dataset(space, dataset, meta.task, bool(meta.vocab_size), p.epochs)
    fp = search_fingerprint(dataset, family, p, space_path(root, family), data_dir)
    out = search_result_path(root, dataset, family)
    check_writable(out.parent)
    return FamilyPlan(family, space, p.resources_for(family), fp, out,
                      staleness.inputs_digest(fp, staleness.code_digest(staleness.SEARCH_CODE)))


def _search(root: Path, dataset: str, families: list[str], p: SearchParams, fresh: bool, only_stale: bool,
            trial_fn: TrialFn) -> dict[str, dict[str, Any]]:
    data_dir = require(processed_dir(root, dataset), f"ctsweep prepare {dataset}")
    meta = load_meta(data_dir)
    data = load_dataset(data_dir)  # a corrupt split fails now, before Ray and MLflow; shipped to every trial
    plans = [_plan(root, dataset, family, p, meta, data_dir) for family in families]
    storage = check_storage_path(root, p.storage_path)  # the same location storage_location gives, checked
    sensitivity.check_optuna_storage(root, p.optuna_storage)  # opened now: not after the whole search
    if not is_uri(storage):
        check_writable(Path(storage))
    done = {plan.family: {**record, "up_to_date": True}  # the flag is for the caller; the file is untouched
            for plan in plans if only_stale and (record := staleness.current_record(plan.out, plan.digest)) is not None}
    todo = [plan for plan in plans if plan.family not in done]
    if not todo:
        return done
    uri = tracking.tracking_uri(root)
    tracking.ensure_store(uri)
    with ray_session(dashboard=any(plan.res.workers > 1 for plan in todo)):
        check_shared_storage(uri, p.storage_path, "search.storage_path")
        for plan in todo:
            check_fits(plan.res, f"search.family_resources.{plan.family}" if plan.family in p.family_resources
                       else "search.resources", p.autoscaling)
        client, exp_id = tracking.experiment_id(root, dataset)
        path, resumed = _open_parents(client, exp_id, dataset, todo, storage, fresh)
        try:
            with pending_trials(_start_limit(p, todo)):
                records = _run(root, dataset, p, meta, data_dir, data, client, exp_id, todo, path, resumed, trial_fn)
            for plan in todo:
                write_json(plan.out, records[plan.family])
                _log_outcome(client, plan.parent, records[plan.family])
        except Interrupted as exc:  # SIGINT / SIGTERM: the result files are untouched; resumable
            with deferred():  # a second Ctrl-C must not leave runs RUNNING half-way through this
                for plan in todo:
                    run_lookup.close_interrupted(client, exp_id, plan.parent, str(exc))
            raise
        except BaseException as exc:  # a record could not be written, or a crash: resumable
            for plan in todo:
                tracking.finish(client, plan.parent, exc)
            raise
    for plan in todo:
        _close_parent(client, plan.parent, records[plan.family])
        if records[plan.family]["status"] == "failed":
            _warn_failed(root, plan.out, records[plan.family])
    return {plan.family: done.get(plan.family) or records[plan.family] for plan in plans}


def _start_limit(p: SearchParams, plans: list[FamilyPlan]) -> int:
    """How many trials Tune may start at once: every family's live-trial cap together, but no
    more than the cluster runs at once (the rest would only wait as placement groups); an
    autoscaling cluster grows, so there only the caps count."""
    caps = sum(min(p.max_concurrent, p.num_samples) for _ in plans)
    return caps if p.autoscaling else min(caps, trial_slots([plan.res for plan in plans]))


def _close_parent(client: tracking.MlflowClient, parent: str, record: dict[str, Any]) -> None:
    """End the parent run once its record is written: FINISHED, or FAILED with the reasons when
    every trial failed. Either way the outcome is final (COMPLETE_TAG): never resumed."""
    if record["status"] == "ok":
        tracking.set_tags(client, parent, {COMPLETE_TAG: "true"})
        tracking.finish(client, parent)
        return
    tracking.set_tags(client, parent, {COMPLETE_TAG: "true", ALL_FAILED_TAG: "true"})
    tracking.finish(client, parent, TrialFailedError(f"every trial failed: {'; '.join(record['errors'])}"))


def _warn_failed(root: Path, out: Path, record: dict[str, Any]) -> None:
    """One line on stderr: the stage succeeds, so this is where a user learns the family failed."""
    reasons = "; ".join(record["errors"][:3]) + (" ..." if len(record["errors"]) > 3 else "")
    where = out.relative_to(root) if out.is_relative_to(root) else out
    print(f"ctsweep: warning: {record['dataset']}/{record['family']}: all {record['n_trials']} search trials "
          f"failed: {reasons}; recorded as failed in {where}; final and report will skip this family",
          file=sys.stderr)


def _contexts(root: Path, dataset: str, p: SearchParams, data_dir: Path, exp_id: str,
              plans: list[FamilyPlan]) -> dict[str, TrialContext]:
    return {plan.family: TrialContext(dataset, plan.family, str(data_dir), p.epochs, p.trial_seed, plan.res.cpu,
                                      tracking.tracking_uri(root), exp_id, plan.parent, p.time_limit_for(plan.family),
                                      plan.res.gpu, plan.res.workers, time_limit_key(p, plan.family))
            for plan in plans}


def _run(root: Path, dataset: str, p: SearchParams, meta: Any, data_dir: Path, data: Any,
         client: tracking.MlflowClient, exp_id: str, plans: list[FamilyPlan], path: str, resumed: bool,
         trial_fn: TrialFn) -> dict[str, dict[str, Any]]:
    for plan in plans:
        if not plan.resumed:
            tracking.log_params(client, plan.parent, {"search." + k: v for k, v in p.model_dump().items()})
    contexts = _contexts(root, dataset, p, data_dir, exp_id, plans)
    with graceful_tune() as interrupt:  # from here a signal stops Tune gracefully; checked below
        if resumed:
            tuner = tune.Tuner.restore(path, trainable=_trainable(contexts, data, plans, trial_fn),
                                       resume_unfinished=True, resume_errored=False, restart_errored=False)
        else:
            storage, name = path.rsplit("/", 1)
            tuner = _new_tuner(plans, contexts, data, p, meta.mode, storage, name, trial_fn)
        grid = tuner.fit()
    if interrupt.signum is not None:  # Tune stopped early and saved its state: a partial search, not a result
        raise Interrupted(interrupt.signum)
    searcher, scheduler = _searcher_of(tuner), tuner._local_tuner._tune_config.scheduler  # the ones that ran
    results = list(grid)
    return {plan.family: _family_record(root, dataset, p, meta, plan, client, exp_id, path, searcher, scheduler,
                                        [r for r in results if r.config and family_of(r.config) == plan.family])
            for plan in plans}


def _family_record(root: Path, dataset: str, p: SearchParams, meta: Any, plan: FamilyPlan,
                   client: tracking.MlflowClient, exp_id: str, path: str, searcher: FamilySearcher,
                   scheduler: FamilyScheduler, results: list[Any]) -> dict[str, Any]:
    """One family's record from its trials' results; closes their runs, persists its study."""
    family, parent = plan.family, plan.parent
    records = trial_outcome.trial_records(results, meta.mode, p.trial_seed, client, exp_id, parent)
    trial_outcome.close_runs(client, records, p.epochs)
    trial_outcome.close_orphans(client, exp_id, parent, records)
    study_searcher = searcher.study_searcher(family)
    states = optuna_states(study_searcher)
    study = _persist(root, dataset, family, p, meta.metric, parent, study_searcher, records)  # failed searches too
    tracking.set_tags(client, parent, {"optuna_states": json.dumps(states, sort_keys=True), **study})
    record = trial_outcome.summarise(dataset, family, meta.metric, meta.mode, plan.space, p, records, parent)
    record.update(optuna_states=states, ray_experiment_path=path, resumed=plan.resumed,
                  asha_rungs={f"{m:g}": n for m, n in sorted(scheduler.of(family).rung_sizes().items())}, **study,
                  importance=sensitivity.importances(study["optuna_storage"], study["optuna_study"],
                                                     min(p.asha.grace_period, p.epochs), p.sampler_seed),
                  searched_with=sorted(searcher.families), **{staleness.DIGEST_KEY: plan.digest})
    return record


def _log_outcome(client: tracking.MlflowClient, parent: str, record: dict[str, Any]) -> None:
    """The outcome on the parent run, once the result file holds it: MLflow params cannot change,
    and an attempt whose result could not be written is resumed and summarised again."""
    counts = {"n_trials": record["n_trials"], "n_failed": record["n_failed"]}
    if record["status"] == "failed":  # no best value or configuration to log
        tracking.log_metrics(client, parent, counts)
        return
    tracking.log_metrics(client, parent, {"best_val": record["best_val"], **counts})
    tracking.log_params(client, parent, {"best." + k: v for k, v in record["best_config"].items()})


def _persist(root: Path, dataset: str, family: str, p: SearchParams, metric: str, parent: str,
             searcher: Any, records: list[dict[str, Any]]) -> dict[str, str]:
    """Copy the family's study to the project's Optuna storage; returns where it went. Each
    trial carries its MLflow run id and Ray trial id, a failed one its failure reason too."""
    url = sensitivity.storage_url(root, p.optuna_storage)
    name = sensitivity.persist_study(searcher._ot_study, url, sensitivity.study_name(dataset, family, parent),
                                     {"dataset": dataset, "family": family, "metric": metric,
                                      "mlflow_parent_run_id": parent, "epochs": p.epochs},
                                     _trial_attrs(searcher, records))
    return {"optuna_storage": url, "optuna_study": name}


def _trial_attrs(searcher: Any, records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """{Optuna trial number: user attributes} from the trials' records (by their Ray trial id)."""
    attrs: dict[int, dict[str, Any]] = {}
    for r in records:
        number = searcher.trial_number(r["trial_id"]) if r["trial_id"] else None
        if number is None:
            continue
        attrs[number] = {"ray_trial_id": r["trial_id"],
                         **({"mlflow_run_id": r["mlflow_run_id"]} if r["mlflow_run_id"] else {}),
                         **({"fail_reason": r["error"]} if r["status"] == "error" and r["error"] else {})}
    return attrs
