"""The `search` stage: one Ray Tune run per (dataset, family), locally or on a Ray cluster.

Optuna's seeded TPE sampler proposes configurations (the paper's reference first), ASHA stops
weak trials early (told to Optuna as pruned, pipeline.scheduling), every trial reports the
validation metric and a checkpoint per epoch and logs to an MLflow child run of the search's
parent run (pipeline.trial).

Faults: a trial whose process or node dies is retried from its last checkpoint
(`search.max_failures`); a driver killed mid-search leaves its parent run unfinished, and
running the stage again finds it by the fingerprint of what was searched and resumes the same
Ray experiment with `Tuner.restore` (finished trials are kept, not rerun).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.search import ConcurrencyLimiter

from pipeline import run_lookup, sensitivity, tracking
from pipeline.cluster import check_fits, check_shared_storage, is_uri, ray_session
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
from pipeline.scheduling import HistorySource, ResumableASHA, make_searcher
from pipeline.spaces import SearchSpace, check_for_dataset, load_space, space_path
from pipeline.storage import check_storage_path
from pipeline.train import is_better
from pipeline.trial import TrialContext, run_trial

__all__ = ["METRIC", "TrialContext", "run_trial", "search", "optuna_states"]

METRIC = "val_metric"
COMPLETE_TAG = "search_complete"  # set once the search's outcome is final: never resumed after


def storage_location(root: Path, storage_path: str) -> str:
    """Ray Tune's storage: a URI as given, else an absolute path (relative ones from the root)."""
    return storage_path if is_uri(storage_path) else str((root / storage_path).resolve())


def search_fingerprint(dataset: str, family: str, p: SearchParams, space_file: Path, data_dir: Path) -> str:
    """What a search's results depend on: a rerun with the same fingerprint may resume it."""
    blob = json.dumps({"dataset": dataset, "family": family, "params": p.model_dump(),
                       "space": space_file.read_text(), "data": data_fingerprint(data_dir)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _trainable(ctx: TrialContext, data: Any, res: Resources) -> Any:
    if res.workers > 1:  # the trial only drives its Ray Train workers, which ask for their own resources
        from pipeline.distributed import DRIVER_RESOURCES as own
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
            _log_best(client, parent, record)
        except TrialFailedError as exc:  # every trial failed: final, not resumable
            tracking.set_tags(client, parent, {COMPLETE_TAG: "true"})
            tracking.finish(client, parent, exc)
            raise
        except Interrupted as exc:  # SIGINT / SIGTERM: the result file is untouched; resumable
            with deferred():  # a second Ctrl-C must not leave runs RUNNING half-way through this
                run_lookup.close_interrupted(client, exp_id, parent, str(exc))
            raise
        except BaseException as exc:  # the record could not be written, or a crash: resumable
            tracking.finish(client, parent, exc)
            raise
    tracking.set_tags(client, parent, {COMPLETE_TAG: "true"})
    tracking.finish(client, parent)
    return record


def _run(root: Path, dataset: str, family: str, p: SearchParams, res: Resources, meta: Any, space: SearchSpace,
         data_dir: Path, data: Any, client: tracking.MlflowClient, exp_id: str, parent: str, path: str,
         resumed: bool) -> dict[str, Any]:
    if not resumed:
        tracking.log_params(client, parent, {"search." + k: v for k, v in p.model_dump().items()})
    ctx = TrialContext(dataset, family, str(data_dir), p.epochs, p.trial_seed, res.cpu, tracking.tracking_uri(root),
                       exp_id, parent, p.time_limit_for(family), res.gpu, res.workers)
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
    records = _trial_records(grid, meta.mode, p.trial_seed, client)
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


def _log_best(client: tracking.MlflowClient, parent: str, record: dict[str, Any]) -> None:
    """The outcome on the parent run, once the result file holds it: MLflow params cannot change,
    and an attempt whose result could not be written is resumed and summarised again."""
    tracking.log_metrics(client, parent, {"best_val": record["best_val"], "n_trials": record["n_trials"],
                                          "n_failed": record["n_failed"]})
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
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:300]


def _trial_records(grid: tune.ResultGrid, mode: str, seed: int,
                   client: tracking.MlflowClient) -> list[dict[str, Any]]:
    records = []
    for result in grid:
        history = result.metrics_dataframe
        values = ({} if history is None or METRIC not in history
                  else dict(zip(history["epoch"], history[METRIC])))  # by epoch: a retry may report one twice
        run_id = result.metrics.get("mlflow_run_id") if result.metrics else None
        if run_id:  # Tune's table of a trial retried from a checkpoint can lack the epochs before it;
            values.update(run_lookup.metric_steps(client, run_id, METRIC))  # its MLflow run has them all
        scores = [v for v in values.values() if v == v]
        best = (max if mode == "max" else min)(scores) if scores else None
        records.append({
            "trial_id": result.metrics.get("trial_id") if result.metrics else None,
            "config": result.config, "seed": seed, "best_val": best, "epochs": len(scores),
            "status": "error" if result.error else "ok",
            "error": _error_message(result.error) if result.error else None,
            "mlflow_run_id": run_id,
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
    best = None
    # By trial id, so a tie is decided the same way however Tune (or the grid of a resumed search)
    # lists the trials; a trial that failed later does not win on its earlier epochs.
    for r in sorted(records, key=lambda r: str(r["trial_id"])):
        if r["status"] == "ok" and r["best_val"] is not None and is_better(r["best_val"], best and best["best_val"], mode):
            best = r
    if best is None:
        errors = sorted({r["error"] for r in records if r["error"]})
        raise TrialFailedError(f"every trial of {dataset}/{family} failed; errors: {errors}")
    return {
        "dataset": dataset, "family": family, "metric": metric, "mode": mode,
        "best_config": dict(best["config"]),  # sampled values plus the fixed ones
        "best_val": best["best_val"], "trial_seed": p.trial_seed, "sampler_seed": p.sampler_seed,
        "n_trials": len(records), "n_failed": sum(r["status"] == "error" for r in records),
        "reference": space.reference_for(dataset), "mlflow_parent_run_id": parent, "trials": records,
    }
