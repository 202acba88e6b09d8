"""The `search` stage: one Ray Tune run per (dataset, family), locally or on a Ray cluster.

Optuna's seeded TPE sampler proposes configurations (the paper's reference first), ASHA stops
weak trials early (told to Optuna as pruned, pipeline.sweep.scheduling), every trial reports the
validation metric and a checkpoint per epoch and logs to an MLflow child run of the search's
parent run (pipeline.sweep.trial).

Faults: a trial whose process or node dies is retried from its last checkpoint
(`search.max_failures`); a driver killed mid-search leaves its parent run unfinished, and
running the stage again finds it by the fingerprint of what was searched and resumes the same
Ray experiment with `Tuner.restore` (finished trials are kept, not rerun).

A family whose every trial fails (no epoch within its time limit, a NaN loss, a solver failure)
does not stop the sweep: its record says "status": "failed" with the reasons, its parent run
ends FAILED tagged `all_trials_failed`, one warning goes to stderr, and the stage succeeds, so
`dvc repro` goes on with the other families (final and the report skip this one). That outcome
is final like a result: rerunning the search starts a new one.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.search import ConcurrencyLimiter

from pipeline import tracking
from pipeline.config import Resources, SearchParams
from pipeline.data.contract import load_dataset, load_meta
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
from pipeline.sweep import run_lookup, sensitivity
from pipeline.sweep.cluster import check_fits, check_shared_storage, is_uri, ray_session
from pipeline.sweep.context import TrialContext
from pipeline.sweep.scheduling import HistorySource, ResumableASHA, make_searcher
from pipeline.sweep.trial import run_trial
from pipeline.train import is_better

__all__ = ["METRIC", "TrialContext", "run_trial", "search", "optuna_states", "time_limit_key"]

METRIC = "val_metric"
COMPLETE_TAG = "search_complete"  # set once the search's outcome is final: never resumed after
ALL_FAILED_TAG = "all_trials_failed"  # on the parent run of a search whose every trial failed
MAX_REASONS = 10  # distinct failure reasons kept in a failed record


def storage_location(root: Path, storage_path: str) -> str:
    """Ray Tune's storage: a URI as given, else an absolute path (relative ones from the root)."""
    return storage_path if is_uri(storage_path) else str((root / storage_path).resolve())


def time_limit_key(p: SearchParams, family: str) -> str:
    """The params.yaml key that sets the family's trial time limit: what a user raises when
    every first epoch outruns it."""
    return f"search.family_time_limit_s.{family}" if family in p.family_time_limit_s else "search.trial_time_limit_s"


def search_fingerprint(dataset: str, family: str, p: SearchParams, space_file: Path, data_dir: Path) -> str:
    """What a search's results depend on: a rerun with the same fingerprint may resume it."""
    blob = json.dumps({"dataset": dataset, "family": family, "params": p.model_dump(),
                       "space": space_file.read_text(), "data": data_fingerprint(data_dir)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _trainable(ctx: TrialContext, data: Any, res: Resources) -> Any:
    if res.workers > 1:  # the trial only drives its Ray Train workers, which ask for their own resources
        from pipeline.sweep.distributed import DRIVER_RESOURCES as own
    else:
        own = {"cpu": res.cpu, "gpu": res.gpu}
    return tune.with_resources(tune.with_parameters(run_trial, ctx=ctx, data=data), own)


def _new_tuner(space: SearchSpace, ctx: TrialContext, data: Any, p: SearchParams, res: Resources, mode: str,
               storage: str, name: str) -> tune.Tuner:
    searcher = make_searcher(space.define_by_run(), space.reference_for(ctx.dataset), METRIC, mode, p.sampler_seed,
                             p.n_startup_trials, p.epochs)
    scheduler = ResumableASHA(HistorySource(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id, METRIC),
                              max_t=p.epochs, grace_period=min(p.asha.grace_period, p.epochs),
                              reduction_factor=p.asha.reduction_factor)
    return tune.Tuner(
        _trainable(ctx, data, res),
        # reuse_actors: a trial process (torch, the models and the dataset already loaded) runs the
        # next trial instead of a fresh process importing it all again, seconds per trial here. Not
        # for data-parallel trials: their Ray Train run outlives Tune's 2 s reset window, and the
        # next trial would fail to start in the old process.
        tune_config=tune.TuneConfig(metric=METRIC, mode=mode, num_samples=p.num_samples, scheduler=scheduler,
                                    search_alg=ConcurrencyLimiter(searcher, max_concurrent=p.max_concurrent),
                                    reuse_actors=res.workers == 1),
        run_config=tune.RunConfig(
            name=name, storage_path=storage, verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            failure_config=tune.FailureConfig(max_failures=p.max_failures)),
    )


def _open_parent(client: tracking.MlflowClient, exp_id: str, dataset: str, family: str, fp: str, storage: str,
                 fresh: bool) -> tuple[str, str, bool]:
    """(parent run id, Ray experiment path, resumed): the unfinished search with this
    fingerprint when its Ray experiment can be restored, else a new parent run."""
    tags = {"dataset": dataset, "family": family, "stage": "search", "search_fingerprint": fp}
    previous = None if fresh else run_lookup.find_unfinished_parent(client, exp_id, tags, COMPLETE_TAG)
    if previous is not None:
        path = previous.data.tags.get("ray_experiment_path", "")
        if path and tune.Tuner.can_restore(path):
            attempts = int(previous.data.tags.get("attempts", "1")) + 1
            client.update_run(previous.info.run_id, status="RUNNING")
            tracking.set_tags(client, previous.info.run_id, {"attempts": attempts})
            if "interrupted" in previous.data.tags:  # it is running again; the interrupt stays in `attempts`
                client.delete_tag(previous.info.run_id, "interrupted")
            return previous.info.run_id, path, True
    path = f"{storage.rstrip('/')}/{dataset}__{family}__{time.strftime('%Y%m%d-%H%M%S')}"
    parent = tracking.start_run(client, exp_id, f"search/{family}", {**tags, "ray_experiment_path": path})
    return parent, path, False


def optuna_states(searcher: Any) -> dict[str, int]:
    """How Optuna saw the trials: failed trials must be FAIL, never left RUNNING."""
    states: dict[str, int] = {}
    for trial in searcher._ot_study.get_trials(deepcopy=False):  # the study OptunaSearch told
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    return states


def _searcher_of(tuner: tune.Tuner) -> Any:
    """The OptunaSearch that ran: after Tuner.restore, the one unpickled inside the Tuner, into
    which Ray restored the study (Ray keeps no public handle on it)."""
    return tuner._local_tuner._tune_config.search_alg.searcher


def search(root: Path, dataset: str, family: str, p: SearchParams, fresh: bool = False) -> dict[str, Any]:
    """Run (or resume) the search for one (dataset, family); write results/<dataset>/search/<family>.json.

    Bad input, unwritable outputs, a request no node can meet and local stores on a multi-node
    cluster are refused before any trial starts. `fresh`: never resume an earlier attempt.
    """
    check_name(dataset, "dataset name")
    check_name(family, "family name")  # before it names a space file, a result file or a Ray experiment
    with stage_lock(root, "search", dataset, family):  # one driver per search: a second is refused
        return _search(root, dataset, family, p, fresh)


def _search(root: Path, dataset: str, family: str, p: SearchParams, fresh: bool) -> dict[str, Any]:
    data_dir = require(processed_dir(root, dataset), f"ctsweep prepare {dataset}")
    meta = load_meta(data_dir)
    data = load_dataset(data_dir)  # a corrupt split fails now, before Ray and MLflow; shipped to every trial
    if meta.vocab_size:  # a token dataset: refuse families that cannot read an embedding, before Ray
        check_token_family(family, get_model_class(family), dataset)
    space = load_space(space_path(root, family), family).for_dataset(dataset)  # its fixed values and reference
    check_for_dataset(space, dataset, meta.task, bool(meta.vocab_size), p.epochs)
    res = p.resources_for(family)
    out = search_result_path(root, dataset, family)
    storage = check_storage_path(root, p.storage_path)  # the same location storage_location gives, checked
    sensitivity.check_optuna_storage(root, p.optuna_storage)  # opened now: not after the whole search
    check_writable(out.parent)
    if not is_uri(storage):
        check_writable(Path(storage))
    uri = tracking.tracking_uri(root)
    tracking.ensure_store(uri)
    fp = search_fingerprint(dataset, family, p, space_path(root, family), data_dir)
    with ray_session(dashboard=res.workers > 1):
        check_shared_storage(uri, p.storage_path, "search.storage_path")
        check_fits(res, f"search.family_resources.{family}" if family in p.family_resources else "search.resources",
                   p.autoscaling)
        client, exp_id = tracking.experiment_id(root, dataset)
        parent, path, resumed = _open_parent(client, exp_id, dataset, family, fp, storage, fresh)
        try:
            record = _run(root, dataset, family, p, res, meta, space, data_dir, data, client, exp_id, parent, path,
                          resumed)
            write_json(out, record)
            _log_outcome(client, parent, record)
        except Interrupted as exc:  # SIGINT / SIGTERM: the result file is untouched; resumable
            with deferred():  # a second Ctrl-C must not leave runs RUNNING half-way through this
                run_lookup.close_interrupted(client, exp_id, parent, str(exc))
            raise
        except BaseException as exc:  # the record could not be written, or a crash: resumable
            tracking.finish(client, parent, exc)
            raise
    _close_parent(client, parent, record)
    if record["status"] == "failed":
        _warn_failed(root, out, record)
    return record


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


def _run(root: Path, dataset: str, family: str, p: SearchParams, res: Resources, meta: Any, space: SearchSpace,
         data_dir: Path, data: Any, client: tracking.MlflowClient, exp_id: str, parent: str, path: str,
         resumed: bool) -> dict[str, Any]:
    if not resumed:
        tracking.log_params(client, parent, {"search." + k: v for k, v in p.model_dump().items()})
    ctx = TrialContext(dataset, family, str(data_dir), p.epochs, p.trial_seed, res.cpu, tracking.tracking_uri(root),
                       exp_id, parent, p.time_limit_for(family), res.gpu, res.workers, time_limit_key(p, family))
    with graceful_tune() as interrupt:  # from here a signal stops Tune gracefully; checked below
        if resumed:
            tuner = tune.Tuner.restore(path, trainable=_trainable(ctx, data, res), resume_unfinished=True,
                                       resume_errored=False, restart_errored=False)
        else:
            storage, name = path.rsplit("/", 1)
            tuner = _new_tuner(space, ctx, data, p, res, meta.mode, storage, name)
        grid = tuner.fit()
    if interrupt.signum is not None:  # Tune stopped early and saved its state: a partial search, not a result
        raise Interrupted(interrupt.signum)
    records = _trial_records(grid, meta.mode, p.trial_seed, client, exp_id, parent)
    _close_runs(client, records, p.epochs)
    _close_orphans(client, exp_id, parent, records)
    searcher = _searcher_of(tuner)
    states = optuna_states(searcher)
    study = _persist(root, dataset, family, p, meta.metric, parent, searcher)  # failed searches too
    tracking.set_tags(client, parent, {"optuna_states": json.dumps(states, sort_keys=True), **study})
    record = _summarise(dataset, family, meta.metric, meta.mode, space, p, records, parent)
    scheduler = tuner._local_tuner._tune_config.scheduler  # the one that ran, restored or not
    record.update(optuna_states=states, ray_experiment_path=path, resumed=resumed,
                  asha_rungs={f"{m:g}": n for m, n in sorted(scheduler.rung_sizes().items())}, **study,
                  importance=sensitivity.importances(study["optuna_storage"], study["optuna_study"],
                                                     min(p.asha.grace_period, p.epochs), p.sampler_seed))
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
             searcher: Any) -> dict[str, str]:
    """Copy the searcher's study to the project's Optuna storage; returns where it went."""
    url = sensitivity.storage_url(root, p.optuna_storage)
    name = sensitivity.persist_study(searcher._ot_study, url, sensitivity.study_name(dataset, family, parent),
                                     {"dataset": dataset, "family": family, "metric": metric,
                                      "mlflow_parent_run_id": parent, "epochs": p.epochs})
    return {"optuna_storage": url, "optuna_study": name}


def _error_message(error: BaseException) -> str:
    """The trial's own exception, not Ray's wrapper around it (RayTaskError keeps it as cause)."""
    cause = getattr(error, "cause", None) or error
    lines = [line for line in str(cause).splitlines() if line.strip()]
    name, last = type(cause).__name__, lines[-1] if lines else ""
    # A traceback's last line already names the type ("TrialFailedError: ..."): not twice.
    return (last if last.startswith(f"{name}: ") else f"{name}: {last}")[:300]


def _trial_error(result: Any, scores: list[float], run_id: str | None, client: tracking.MlflowClient) -> str | None:
    """Why a trial failed, or None when it did not.

    Ray's error first. A trial that reported no score failed too, even when Ray hands back no
    error: Ray reads a trial's error back from its error file in the Tune storage, a copy the
    driver syncs from its staging folder, and returns None where that copy is missing; the
    trial's MLflow run keeps the error it closed with.
    """
    if result.error:
        return _error_message(result.error)
    if scores:
        return None
    logged = client.get_run(run_id).data.tags.get("error") if run_id else None
    return (logged or "the trial ended without reporting an epoch (no error recorded)")[:300]


def _trial_records(grid: tune.ResultGrid, mode: str, seed: int, client: tracking.MlflowClient, exp_id: str,
                   parent: str) -> list[dict[str, Any]]:
    records = []
    for result in grid:
        history = result.metrics_dataframe
        values = ({} if history is None or METRIC not in history
                  else dict(zip(history["epoch"], history[METRIC])))  # by epoch: a retry may report one twice
        trial_id = result.metrics.get("trial_id") if result.metrics else None
        run_id = result.metrics.get("mlflow_run_id") if result.metrics else None
        if not run_id and trial_id:  # it never reported (failed in its first epoch): found by its trial id
            found = run_lookup.find_child_run(client, exp_id, parent, "ray_trial_id", trial_id)
            run_id = found.info.run_id if found else None
        if run_id:  # Tune's table of a trial retried from a checkpoint can lack the epochs before it;
            values.update(run_lookup.metric_steps(client, run_id, METRIC))  # its MLflow run has them all
        scores = [v for v in values.values() if v == v]
        best = (max if mode == "max" else min)(scores) if scores else None
        error = _trial_error(result, scores, run_id, client)
        records.append({
            "trial_id": trial_id, "config": result.config, "seed": seed, "best_val": best, "epochs": len(scores),
            "status": "error" if error else "ok", "error": error, "mlflow_run_id": run_id,
        })
    return records


def _close_runs(client: tracking.MlflowClient, records: list[dict[str, Any]], epochs: int) -> None:
    """Give every trial's MLflow run the status Tune's outcome says.

    Tune stops a trial's process as soon as it reports its last epoch (max_t) or ASHA stops it,
    so the trial cannot close its own run: a run that reached `epochs` is FINISHED, a shorter
    one was stopped early (KILLED, tagged early_stopped). Failed trials closed theirs as FAILED.
    Tune's view wins: a data-parallel trial interrupted by that stop may have marked its run
    FAILED on the way out although Tune counts it as a success.
    """
    for r in records:
        run_id = r["mlflow_run_id"]
        if not run_id:
            continue
        run = client.get_run(run_id)
        if r["status"] == "error":
            if run.info.status == "RUNNING":
                tracking.finish(client, run_id, RuntimeError(r["error"] or "trial process died"))
            continue
        status = "FINISHED" if r["epochs"] >= epochs else "KILLED"
        if run.info.status == status:
            continue
        if "error" in run.data.tags:
            client.delete_tag(run_id, "error")
        if status == "KILLED":
            tracking.set_tags(client, run_id, {"early_stopped": "true"})
        tracking.terminate(client, run_id, status)


def _close_orphans(client: tracking.MlflowClient, exp_id: str, parent: str, records: list[dict[str, Any]]) -> None:
    """Close the runs of trials the Ray experiment does not know.

    A driver killed between a trial's start and Tune's next snapshot of the experiment state
    leaves a run whose trial the restored experiment never had (its few seconds of work are
    lost; the restored search proposes another trial in its place). Such runs end KILLED,
    tagged `orphaned`, so no run stays RUNNING forever.
    """
    known = {r["trial_id"] for r in records}
    for run in run_lookup.children(client, exp_id, parent):
        if run.data.tags.get("ray_trial_id") not in known and run.info.status == "RUNNING":
            tracking.set_tags(client, run.info.run_id, {"orphaned": "true"})
            tracking.terminate(client, run.info.run_id, "KILLED")


def _summarise(dataset: str, family: str, metric: str, mode: str, space: SearchSpace, p: SearchParams,
               records: list[dict[str, Any]], parent: str) -> dict[str, Any]:
    """The search record: "ok" with the best trial and the space, or "failed" with the reasons."""
    # By trial id, so a tie is decided the same way however Tune (or the grid of a resumed search)
    # lists the trials; a trial that failed later does not win on its earlier epochs.
    ordered = sorted(records, key=lambda r: str(r["trial_id"]))
    best = None
    for r in ordered:
        if r["status"] == "ok" and r["best_val"] is not None and is_better(r["best_val"], best and best["best_val"], mode):
            best = r
    if best is None:
        outcome = {"status": "failed", "best_config": None, "best_val": None, "errors": failure_reasons(ordered)}
    else:  # sampled values plus the fixed ones
        outcome = {"status": "ok", "best_config": dict(best["config"]), "best_val": best["best_val"],
                   "space": space_record(space)}
    return {
        "dataset": dataset, "family": family, "metric": metric, "mode": mode, **outcome,
        "trial_seed": p.trial_seed, "sampler_seed": p.sampler_seed,
        "n_trials": len(records), "n_failed": sum(r["status"] == "error" for r in records),
        "reference": space.reference_for(dataset), "mlflow_parent_run_id": parent, "trials": records,
    }


def failure_reasons(records: list[dict[str, Any]]) -> list[str]:
    """The distinct errors of the failed trials, most frequent first, as "REASON (k trials)"
    (at most MAX_REASONS). Our own TrialFailedError's type name says nothing a user needs."""
    reasons = Counter(r["error"].removeprefix(f"{TrialFailedError.__name__}: ")
                      for r in records if r["status"] == "error" and r["error"])
    return [f"{reason} ({n} trial{'' if n == 1 else 's'})" for reason, n in reasons.most_common(MAX_REASONS)]


def space_record(space: SearchSpace) -> dict[str, dict[str, Any]]:
    """The searched keys' ranges (fixed keys are not searched): a reader can tell a best value
    that sits on a bound of its range without the space file as it was then."""
    ranges: dict[str, dict[str, Any]] = {}
    for name, spec in space.params.items():
        if spec.distribution == "categorical":
            ranges[name] = {"type": "categorical", "choices": list(spec.choices)}
        elif spec.distribution == "int":
            ranges[name] = {"type": "int", "low": int(spec.low), "high": int(spec.high), "log": spec.log,
                            "step": spec.step}
        else:
            ranges[name] = {"type": "float", "low": spec.low, "high": spec.high,
                            "log": spec.distribution == "loguniform"}
    return ranges
