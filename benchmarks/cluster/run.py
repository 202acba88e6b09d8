"""Cluster benchmark: the pipeline's overhead over a plain training loop, and trials per hour.

    .venv/bin/python -m benchmarks.cluster.run [--full] [--datasets a,b] [--families f,g] [--quick]
    .venv/bin/python -m benchmarks.cluster.run --device cuda --trials-per-gpu 1,2,4

1. ctsweep path: `pipeline.sweep.search.search_many(root, dataset, families, p)` once per dataset
   (every family of the workload in one Ray Tune run, as `dvc repro` runs it), or with
   --sequential `search(root, dataset, family, p)` per (dataset, family) one after another (the
   driver before concurrent searches); params.yaml's `search` section, in one Ray session per run
   (a local Ray of the run's own unless RAY_ADDRESS is set; its start-up is counted once per run
   and reported on its own), MLflow logging to a fresh SQLite store.
2. Plain path: the SAME trials, read back from the search records (config, epochs reported,
   status), trained by `pipeline.training.loop.Trainer` in a pool of worker processes (spawn, 1 torch
   thread each, as `resources: cpu: 1`), no Ray, Optuna or MLflow, grouped as the ctsweep path
   groups them (a dataset's trials at once, or one search after another). Ratio = ctsweep / plain.
3. Throughput: the ctsweep path with 1 and 2 trials at a time (CPU), or 1, 2 and 4 trials per
   GPU (--device cuda): trials and epochs per hour.
Writes cluster.md and cluster.json to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python benchmarks/cluster/run.py` as well as `-m benchmarks.cluster.run`
    sys.path.insert(0, str(ROOT))

# Only light imports at module level: the plain path's spawned workers import this module, and
# must not pay for Ray, Optuna or MLflow (pipeline.sweep.search imports all three; imported in use).
from benchmarks.cluster.cpu_account import CpuAccount  # noqa: E402
from benchmarks.cluster.report import write_outputs  # noqa: E402  (cluster.md, cluster.json)
from pipeline.config import Params, SearchParams, load_params  # noqa: E402
from pipeline.errors import ConfigError  # noqa: E402

# The default: sized to fit in about 15 minutes on the 2-core development machine (README).
# ode_rnn_tw is left out because most of its trials end at the 30 s time limit, which both paths
# wait out alike; japanese_vowels_drop30 trains like japanese_vowels. --full takes params.yaml's lists.
DEFAULT_DATASETS = ("xor_event", "japanese_vowels")
DEFAULT_FAMILIES = ("cfc", "cde_fwp_delta", "cdr_nde", "ncde", "ode_rnn")
QUICK_XOR = {"n_train": 200, "n_test": 100}  # --quick: a smaller xor_event


# ----------------------------------------------------------------------------------- options


def _names(value: str, valid: list[str], flag: str) -> list[str]:
    names = [n for n in value.replace(" ", "").split(",") if n]
    unknown = [n for n in names if n not in valid]
    if not names or unknown:
        raise ConfigError(f"{flag} {value!r}: unknown or empty {unknown or names}; valid: {sorted(valid)}")
    return names


def _counts(value: str, flag: str) -> list[int]:
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ConfigError(f"{flag} {value!r}: expected comma-separated integers >= 1, e.g. 1,2")
    return sorted(set(counts))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags -> settings; bad values raise ConfigError naming the flag and what is allowed."""
    ap = argparse.ArgumentParser(prog="benchmarks.cluster.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="search section and datasets")
    ap.add_argument("--datasets", default=",".join(DEFAULT_DATASETS), help="comma-separated prepare keys")
    ap.add_argument("--families", default=",".join(DEFAULT_FAMILIES), help="comma-separated registry names")
    ap.add_argument("--full", action="store_true", help="params.yaml's own datasets and families (about 35 min)")
    ap.add_argument("--workers", type=int, default=2, help="trials at a time in the overhead comparison")
    ap.add_argument("--throughput-workers", default="1,2", help="CPU: max_concurrent values for trials per hour")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--trials-per-gpu", default="1,2,4", help="cuda: trials sharing one GPU (gpu share 1/k)")
    ap.add_argument("--sequential", action="store_true",
                    help="one search per (dataset, family) after another, as before concurrent searches")
    ap.add_argument("--repeats", type=int, default=1, help="ctsweep + plain pairs; the median ratio is reported")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (run roots, records, MLflow)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run (about 50 s): xor_event with 200 sequences, cfc, 2 trials of 2 epochs")
    ap.add_argument("--min-steps", type=int, default=None,
                    help="search.min_steps for both paths: longer epochs (whole passes over the training split) "
                         "to measure the overhead at epochs of seconds, not a fraction of one")
    ap.add_argument("--num-samples", type=int, default=None,
                    help="search.num_samples (trials per family) for both paths: a longer sweep, whose one-off "
                         "start-ups weigh less")
    ap.add_argument("--rounds-in-flight", type=int, default=None,
                    help="search.rounds_in_flight for the ctsweep path: 2 lets a family's next round take the "
                         "slots its current round's fast trials free (the plain loop has no rounds)")
    ap.add_argument("--checkpoint-every-s", type=float, default=None,
                    help="search.checkpoint_every_s for the ctsweep path (0: a checkpoint every epoch)")
    args = ap.parse_args(argv)
    args.params = load_params(args.params)
    # A fixed workload: the plain loop replays the search's trials, so how many there are must not
    # depend on their scores (search.saturation's grants do); every family runs num_samples trials.
    args.search = args.params.search.model_copy(
        update={"saturation": args.params.search.saturation.model_copy(update={"enabled": False})})
    if args.min_steps is not None:
        if not 1 <= args.min_steps <= 10**6:
            raise ConfigError(f"--min-steps {args.min_steps}: allowed 1 to 1000000")
        args.search = args.search.model_copy(update={"min_steps": args.min_steps})
    if args.num_samples is not None:
        if not args.search.round_size <= args.num_samples <= 1000:  # a round never holds more than the search
            raise ConfigError(f"--num-samples {args.num_samples}: allowed {args.search.round_size} "
                              f"(search.round_size) to 1000")
        args.search = args.search.model_copy(update={"num_samples": args.num_samples})
    if args.rounds_in_flight is not None:
        if not 1 <= args.rounds_in_flight <= 8:
            raise ConfigError(f"--rounds-in-flight {args.rounds_in_flight}: allowed 1 to 8")
        args.search = args.search.model_copy(update={"rounds_in_flight": args.rounds_in_flight})
    if args.checkpoint_every_s is not None:
        if not 0 <= args.checkpoint_every_s <= 86400:
            raise ConfigError(f"--checkpoint-every-s {args.checkpoint_every_s:g}: allowed 0 to 86400")
        args.search = args.search.model_copy(update={"checkpoint_every_s": args.checkpoint_every_s})
    if args.quick:
        args.datasets, args.families = "xor_event", "cfc"
        args.search = args.search.model_copy(update={"num_samples": 2, "epochs": 2, "n_startup_trials": 1})
    if args.full:
        args.datasets, args.families = ",".join(args.params.datasets), ",".join(args.params.families)
    from pipeline.models import MODELS  # late: the model zoo is not needed to read the flags

    args.datasets = _names(args.datasets, sorted(args.params.prepare), "--datasets")
    args.families = _names(args.families, sorted(MODELS), "--families")
    args.throughput_workers = _counts(args.throughput_workers, "--throughput-workers")
    args.trials_per_gpu = _counts(args.trials_per_gpu, "--trials-per-gpu")
    if args.workers < 1 or args.repeats < 1:
        raise ConfigError(f"--workers ({args.workers}) and --repeats ({args.repeats}) must be >= 1")
    most = max([args.workers] + (args.trials_per_gpu if args.device == "cuda" else args.throughput_workers))
    cpus = os.cpu_count() or 1
    # A local Ray offers one slot per core: more trials than cores would queue, not run side by side.
    if args.device == "cpu" and not os.environ.get("RAY_ADDRESS") and most * args.search.resources.cpu > cpus:
        raise ConfigError(f"{most} concurrent trials of cpu {args.search.resources.cpu} need more than the "
                          f"{cpus} cores here; lower --workers / --throughput-workers")
    return args


# ---------------------------------------------------------------------------------- workload


def prepare_data(params: Params, datasets: list[str], data_root: Path, quick: bool) -> dict[str, Any]:
    """Prepare each dataset once under data_root/data/processed; {dataset: sizes}. Not timed."""
    from pipeline.data.prepare import prepare
    from pipeline.stores.paths import processed_dir, raw_dir, raw_lock_path

    sizes = {}
    for name in datasets:
        p = params.prepare[name]
        if quick and p.kind == "xor":
            p = p.model_copy(update=QUICK_XOR)
        meta = prepare(name, p, processed_dir(data_root, name), raw_dir(data_root, name), raw_lock_path(data_root))
        sizes[name] = meta.sizes
    return sizes


def new_root(work: Path, label: str, data_root: Path) -> Path:
    """A fresh project root: search spaces, params.yaml and a copy of the processed data.

    Every run gets its own copy, so no run finds model inputs another run cached
    (data/cache/) or an MLflow store another run created.
    """
    root = (work / label).resolve()
    shutil.rmtree(root, ignore_errors=True)  # a --work folder reused from an earlier run
    shutil.copytree(ROOT / "search_spaces", root / "search_spaces")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(data_root / "data" / "processed", root / "data" / "processed")
    return root


@contextlib.contextmanager
def local_tracking() -> Iterator[None]:
    """MLflow to each run root's SQLite file (the default), whatever MLFLOW_TRACKING_URI says."""
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


@contextlib.contextmanager
def ray_for_run(num_cpus: int | None = None) -> Iterator[None]:
    """RAY_ADDRESS set: `pipeline.sweep.cluster.ray_session` connects to that cluster. Unset: a local
    Ray of this run's own. ray.init()'s default (what ray_session calls) would join the latest
    cluster any process on this machine started (/tmp/ray/ray_current_cluster): another user's
    cluster, with its load, or a dead one that it waits on for minutes. `num_cpus`: the local Ray's
    CPUs, i.e. how many trials run at once however many families search at once (each family's
    `max_concurrent` alone would let families x max_concurrent run); None: one per core."""
    if os.environ.get("RAY_ADDRESS"):
        from pipeline.sweep.cluster import ray_session

        with ray_session():
            yield
        return
    import ray

    # The options ray_session uses for the instance it starts.
    from pipeline.sweep.cluster import local_options

    ray.init(address="local", num_cpus=num_cpus, log_to_driver=bool(os.environ.get("CTSWEEP_RAY_LOGS")),
             configure_logging=False, **local_options(dashboard=False))
    try:
        yield
    finally:
        ray.shutdown()


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


# ----------------------------------------------------------------------------- ctsweep path


def units_of(pairs: list[tuple[str, str]], sequential: bool) -> list[tuple[str, list[str]]]:
    """What one driver call searches: (dataset, [family]) per pair, or (dataset, families) per dataset."""
    if sequential:
        return [(d, [f]) for d, f in pairs]
    return [(d, [f for dd, f in pairs if dd == d]) for d in dict.fromkeys(d for d, _ in pairs)]


def run_ctsweep(root: Path, pairs: list[tuple[str, str]], p: SearchParams, sequential: bool = False) -> dict[str, Any]:
    """Every (dataset, family) search through the real driver, in one Ray session: one
    `search_many` per dataset, or (`sequential`) one `search` per pair.

    Timed apart: Ray start-up, MLflow store creation (one experiment per dataset, as the first
    search would create it), each driver call ("units"), Ray shutdown. `total_s` is their sum.
    `searches` holds one entry per (dataset, family), in `pairs` order, for the replay.
    """
    import ray

    from pipeline.stores import tracking

    out: dict[str, Any] = {"max_concurrent": p.max_concurrent, "resources": p.resources.model_dump(),
                           "sequential": sequential, "load_average_start": load_average(), "searches": [],
                           "units": []}
    start = time.perf_counter()
    # As many CPUs as trials at a time (--workers): the plain pool's size, whatever the number of families
    slots = math.ceil(p.max_concurrent * p.resources.cpu) if p.resources.gpu == 0 else None
    with CpuAccount() as cpu, ray_for_run(slots):  # the driver's own ray_session finds Ray initialised
        out["ray_startup_s"] = time.perf_counter() - start
        out["ray_resources"] = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
        start = time.perf_counter()
        for dataset in dict.fromkeys(d for d, _ in pairs):
            tracking.experiment_id(root, dataset)
        out["mlflow_store_s"] = time.perf_counter() - start
        for dataset, families in units_of(pairs, sequential):
            unit, searches = _one_unit(root, dataset, families, p)
            out["units"].append(unit)
            out["searches"] += searches
        start = time.perf_counter()
    out["ray_shutdown_s"] = time.perf_counter() - start
    out["cpu"] = cpu.summary()
    ok = [s for s in out["searches"] if s["status"] == "ok"]
    out["searches_s"] = sum(u["wall_s"] for u in out["units"] if u["status"] == "ok")
    out["total_s"] = out["ray_startup_s"] + out["mlflow_store_s"] + out["searches_s"] + out["ray_shutdown_s"]
    out["n_trials"] = sum(s["n_trials"] for s in ok)
    out["epochs"] = sum(sum(t["epochs"] for t in s["trials"]) for s in ok)
    out["load_average_end"] = load_average()
    return out


def _one_unit(root: Path, dataset: str, families: list[str],
              p: SearchParams) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One timed driver call; a call that raised is recorded and left out of the sums."""
    from pipeline.sweep.search import search_many

    start = time.perf_counter()
    try:
        records = search_many(root, dataset, families, p)
    except Exception as exc:  # TrialFailedError and the like: the benchmark goes on
        wall = time.perf_counter() - start
        error = f"{type(exc).__name__}: {exc}"[:300]
        print(f"  ctsweep {dataset}/{','.join(families)}: error {exc}", file=sys.stderr, flush=True)
        return ({"dataset": dataset, "families": families, "status": "error", "wall_s": wall, "error": error},
                [{"dataset": dataset, "family": f, "status": "error", "error": error, "n_trials": 0, "trials": []}
                 for f in families])
    wall = time.perf_counter() - start
    searches = []
    for family in families:
        trials = [{k: t.get(k) for k in ("config", "epochs", "status", "best_val")} for t in records[family]["trials"]]
        searches.append({"dataset": dataset, "family": family, "status": "ok", "n_trials": len(trials),
                         "trials": trials})
    print(f"  ctsweep mc={p.max_concurrent} {dataset}/{','.join(families)}: {wall:.1f} s, epochs "
          f"{[[t['epochs'] for t in s['trials']] for s in searches]}", file=sys.stderr, flush=True)
    return ({"dataset": dataset, "families": families, "status": "ok", "wall_s": wall,
             "n_trials": sum(s["n_trials"] for s in searches)}, searches)


# ------------------------------------------------------------------------------- plain path


@dataclass(frozen=True)
class TrialJob:
    """One search trial to replay; paths absolute (spawned workers share no working directory)."""

    dataset: str
    family: str
    dataset_dir: str
    config: dict[str, Any]  # sampled values plus the fixed ones, as the search record has them
    epochs: int  # epochs to train and score: the reported ones (+1 for a failed trial)
    past_limit: bool  # the trial was cut by the time limit: train on until it, as ctsweep did
    seed: int
    time_limit_s: float | None
    recorded_status: str
    threads: int = 1  # torch threads: the integer part of the trial's `cpu`, as run_trial sets them
    max_epochs: int | None = None  # the search's `epochs`: the trial's budget, which schedules may use
    min_steps: int = 1  # the search's `min_steps`: an epoch is as many passes as run_trial's


def asha_stop_points(p: SearchParams) -> set[int]:
    """Epoch counts at which ASHA may stop a trial, and max_t (Ray's AsyncHyperBand rungs)."""
    grace = min(p.asha.grace_period, p.epochs)  # as pipeline.sweep.tuner builds the scheduler
    rungs = int(math.log(p.epochs / grace) / math.log(p.asha.reduction_factor) + 1)
    return {math.ceil(grace * p.asha.reduction_factor ** k) for k in range(rungs)} | {p.epochs}


def plan_replay(search: dict[str, Any], dataset_dir: Path, p: SearchParams) -> list[TrialJob]:
    """The plain-path jobs for one search's trial records (config, epochs, status).

    An ok trial trains and scores its reported epochs. One that ended at an epoch count where
    ASHA cannot stop it was cut by `trial_time_limit_s` in the epoch after: the replay trains
    on into that epoch until the same limit. A failed trial is replayed up to its failure: one
    epoch past its last reported one, under the same limit; the same seed fails the same way
    (non-finite loss, solver underflow) or reaches the limit. A trial cut by the limit at an
    ASHA stop point cannot be told apart from an early stop; it replays without the cut part.
    """
    stops = asha_stop_points(p)
    res = trial_resources(p, search["family"])
    jobs = []
    for t in search["trials"]:
        failed = t["status"] != "ok"
        epochs = int(t["epochs"] or 0)
        cut = not failed and bool(p.trial_time_limit_s) and epochs not in stops
        jobs.append(TrialJob(search["dataset"], search["family"], str(dataset_dir), dict(t["config"]),
                             epochs + 1 if failed else epochs, cut, p.trial_seed, p.trial_time_limit_s,
                             t["status"], max(1, int(res.cpu)), p.epochs, p.min_steps))
    return jobs


def trial_resources(p: SearchParams, family: str) -> Any:
    """What one trial of `family` asks for: `resources`, with its `family_resources` override
    where the search params have them."""
    return p.resources_for(family) if hasattr(p, "resources_for") else p.resources


def check_replayable(p: SearchParams, families: list[str]) -> None:
    """Refuse, before anything runs, trials the plain loop cannot replay: data-parallel ones."""
    for family in families:
        workers = getattr(trial_resources(p, family), "workers", 1)
        if workers > 1:
            raise ConfigError(f"search resources for {family}: workers = {workers} (data-parallel trials) have "
                              "no plain-loop equivalent; the benchmark needs workers: 1")


_DEVICE = "cpu"


def _init_worker(devices: Any, barrier: Any) -> None:
    """Pool initializer: imports and this worker's device. Waits for every worker to get here,
    so the pool's start-up is timed whole."""
    global _DEVICE
    import pipeline.training.loop  # noqa: F401  imported here, so start-up is timed as start-up

    _DEVICE = devices.get()
    barrier.wait()


def _ready(_: int) -> str:
    return _DEVICE


def build_trainer(job: TrialJob) -> Any:
    """The trial's `pipeline.training.loop.Trainer`, built as `run_trial` builds it, on `_DEVICE`."""
    from pipeline.data.contract import load_dataset
    from pipeline.spaces import split_config
    from pipeline.training.loop import Trainer, TrainSettings

    train_cfg, model_cfg = split_config(job.config)
    # max_epochs: the trial's budget (run_trial passes the search's `epochs`): a schedule set as a
    # fraction of the run (`lr_step_fraction`, CDR-NDE's) steps where the search's trial stepped
    return Trainer(job.family, model_cfg, TrainSettings(**train_cfg), load_dataset(Path(job.dataset_dir)),
                   job.seed, _DEVICE, job.max_epochs, job.min_steps)


def replay_trial(job: TrialJob) -> dict[str, Any]:
    """Train one trial as `pipeline.sweep.trial.run_trial` does, minus Ray, Optuna, MLflow and checkpoints.

    Returns {seconds, epochs, status}: status ok, time_limited (the limit ended it, as intended
    for a cut trial) or error (the trial failed again).
    """
    import torch

    from pipeline.errors import TrialFailedError
    from pipeline.training.loop import TimeLimitReached

    torch.set_num_threads(job.threads)  # concurrent trials must not fight over cores
    start = time.perf_counter()
    status, error, trainer, scores = "ok", None, None, []
    try:
        trainer = build_trainer(job)
        deadline = time.monotonic() + job.time_limit_s if job.time_limit_s else None  # run_trial's clock
        while trainer.epoch < job.epochs:
            scores.append(trainer.run_epoch(deadline)["val_metric"])
        if job.past_limit:  # the part epoch ctsweep trained and dropped; ends at the deadline
            trainer.train_epoch(deadline)
    except TimeLimitReached:
        status = "time_limited"
    except TrialFailedError as exc:
        status, error = "error", str(exc)[:200]
    best = None
    if scores and trainer is not None:  # as the search record's best_val: the best scored epoch
        best = (max if trainer.meta.mode == "max" else min)(scores)
    return {"dataset": job.dataset, "family": job.family, "seconds": time.perf_counter() - start,
            "epochs": 0 if trainer is None else trainer.epoch, "status": status, "error": error,
            "best_val": best, "recorded_status": job.recorded_status}


def _devices(device: str, workers: int) -> list[str]:
    if device == "cpu":
        return ["cpu"] * workers
    import torch

    return [f"cuda:{i % torch.cuda.device_count()}" for i in range(workers)]


def run_plain(jobs_by_unit: list[list[list[TrialJob]]], workers: int, device: str) -> dict[str, Any]:
    """Replay the trials in a pool of `workers` spawned processes, one unit after another (a
    barrier per unit, as the ctsweep path has one per driver call); a unit holds one or several
    searches' jobs, all handed to the pool at once. Pool start-up (spawn, torch import) is timed apart."""
    ctx = mp.get_context("spawn")  # fresh interpreters, as Ray's workers; fork would share torch's state
    devices = ctx.Queue()
    for d in _devices(device, workers):
        devices.put(d)
    out: dict[str, Any] = {"workers": workers, "load_average_start": load_average(), "searches": [], "units": []}
    start = time.perf_counter()
    with CpuAccount() as cpu:  # the pool's workers are this process's children: counted as trials
        pool = ctx.Pool(workers, initializer=_init_worker, initargs=(devices, ctx.Barrier(workers)))
        try:
            pool.map(_ready, [0])  # returns once every worker is past the barrier
            out["pool_startup_s"] = time.perf_counter() - start
            _replay_units(pool, jobs_by_unit, out)
            start = time.perf_counter()
        finally:
            pool.close()
            pool.join()
    out["pool_shutdown_s"] = time.perf_counter() - start
    out["cpu"] = cpu.summary()
    out["searches_s"] = sum(u["wall_s"] for u in out["units"])
    out["total_s"] = out["pool_startup_s"] + out["searches_s"] + out["pool_shutdown_s"]
    out["n_trials"] = sum(s["n_trials"] for s in out["searches"])
    out["epochs"] = sum(t["epochs"] for s in out["searches"] for t in s["trials"])
    out["load_average_end"] = load_average()
    return out


def _replay_units(pool: Any, jobs_by_unit: list[list[list[TrialJob]]], out: dict[str, Any]) -> None:
    """Each unit's jobs through `pool` at once, timed; its searches' replays appended to `out`."""
    for unit in jobs_by_unit:
        start = time.perf_counter()
        trials = pool.map(replay_trial, [job for jobs in unit for job in jobs], chunksize=1)
        wall = time.perf_counter() - start
        out["units"].append({"dataset": unit[0][0].dataset, "families": [jobs[0].family for jobs in unit],
                             "wall_s": wall, "n_trials": len(trials)})
        for jobs in unit:
            mine, trials = trials[:len(jobs)], trials[len(jobs):]
            out["searches"].append({"dataset": jobs[0].dataset, "family": jobs[0].family, "n_trials": len(jobs),
                                    "trials": mine})
        print(f"  plain {unit[0][0].dataset}/{','.join(jobs[0].family for jobs in unit)}: {wall:.1f} s",
              file=sys.stderr, flush=True)


def _paired_trials(ctsweep: dict[str, Any], plain: dict[str, Any]) -> Iterator[tuple[str, dict, dict]]:
    """(label, ctsweep trial record, its replay) for every replayed trial."""
    done = [s for s in ctsweep["searches"] if s["status"] == "ok"]
    for cs, ps in zip(done, plain["searches"]):
        for i, (ct, pt) in enumerate(zip(cs["trials"], ps["trials"])):
            yield f"{cs['dataset']}/{cs['family']} trial {i}", ct, pt


def replay_mismatches(ctsweep: dict[str, Any], plain: dict[str, Any]) -> list[str]:
    """Trials whose replay did not train the epochs ctsweep reported (or failed where it did not)."""
    return [f"{label}: ctsweep {ct['epochs']} epochs, plain {pt['epochs']} ({pt['status']})"
            for label, ct, pt in _paired_trials(ctsweep, plain)
            if ct["status"] == "ok" and (pt["status"] == "error" or pt["epochs"] != ct["epochs"])]


def same_best_val(ctsweep: dict[str, Any], plain: dict[str, Any]) -> tuple[int, int]:
    """(ok trials whose replay scored the same best validation metric, ok trials). Same seed,
    config and epochs on CPU give the same numbers: evidence the replay trained the same trials."""
    pairs = [(ct["best_val"], pt["best_val"]) for _, ct, pt in _paired_trials(ctsweep, plain)
             if ct["status"] == "ok" and ct["best_val"] is not None]
    same = sum(b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) for a, b in pairs)
    return same, len(pairs)


# ------------------------------------------------------------------------------- comparison


def compare(ctsweep: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """Ratios (ctsweep / plain) of whole runs and of the searches alone; overhead per trial."""
    n = plain["n_trials"]
    if not n:
        errors = [f"{s['dataset']}/{s['family']}: {s['error']}" for s in ctsweep["searches"]]
        raise RuntimeError(f"no search finished, so there is nothing to replay: {errors}")
    return {
        "ratio": ctsweep["total_s"] / plain["total_s"],
        "ratio_searches": ctsweep["searches_s"] / plain["searches_s"],
        "overhead_per_trial_s": (ctsweep["total_s"] - plain["total_s"]) / n,
        "overhead_per_trial_searches_s": (ctsweep["searches_s"] - plain["searches_s"]) / n,
        "mismatches": replay_mismatches(ctsweep, plain),
        "same_best_val": same_best_val(ctsweep, plain),
    }


def with_share(p: SearchParams, max_concurrent: int, gpu: float) -> SearchParams:
    return p.model_copy(update={"max_concurrent": max_concurrent,
                                "resources": p.resources.model_copy(update={"gpu": gpu})})


def throughput_row(label: str, run: dict[str, Any]) -> dict[str, Any]:
    """Trials and epochs per hour of the searches (Ray start-up left out: a sweep pays it once)."""
    hours = run["searches_s"] / 3600
    return {"label": label, "max_concurrent": run["max_concurrent"], "gpu": run["resources"]["gpu"],
            "n_trials": run["n_trials"], "epochs": run["epochs"], "searches_s": run["searches_s"],
            "ray_startup_s": run["ray_startup_s"], "trials_per_hour": run["n_trials"] / hours if hours else None,
            "epochs_per_hour": run["epochs"] / hours if hours else None}


def overhead_runs(args: argparse.Namespace, work: Path, data_root: Path,
                  pairs: list[tuple[str, str]], p: SearchParams) -> list[dict[str, Any]]:
    """--repeats times: a ctsweep run, then the plain replay of exactly its trials."""
    from pipeline.stores.paths import processed_dir

    repeats = []
    for r in range(args.repeats):
        ctsweep = run_ctsweep(new_root(work, f"ctsweep-{r}", data_root), pairs, p, args.sequential)
        plain_root = new_root(work, f"plain-{r}", data_root)
        by_pair = {(s["dataset"], s["family"]): s for s in ctsweep["searches"] if s["status"] == "ok"}
        units = [[plan_replay(by_pair[(d, f)], processed_dir(plain_root, d), p) for f in families if (d, f) in by_pair]
                 for d, families in units_of(pairs, args.sequential)]
        plain = run_plain([u for u in units if u], args.workers, args.device)
        repeats.append({"ctsweep": ctsweep, "plain": plain, **compare(ctsweep, plain)})
    return repeats


def throughput_runs(args: argparse.Namespace, work: Path, data_root: Path, pairs: list[tuple[str, str]],
                    p: SearchParams, repeats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ctsweep at each concurrency; the overhead runs' setting is reused, not run again."""
    if args.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        settings = [(f"{k} trial(s) per GPU", k * gpus, 1 / k) for k in args.trials_per_gpu]
    else:
        settings = [(f"{k} worker(s)", k, 0.0) for k in args.throughput_workers]
    rows = []
    for label, concurrent, gpu in settings:
        if concurrent == p.max_concurrent and gpu == p.resources.gpu:
            run = _median_run([r["ctsweep"] for r in repeats])
        else:
            run = run_ctsweep(new_root(work, f"throughput-{concurrent}-{gpu:g}", data_root), pairs,
                              with_share(p, concurrent, gpu), args.sequential)
        rows.append(throughput_row(label, run))
    return rows


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda c: c["searches_s"])
    return ordered[len(ordered) // 2]


# ---------------------------------------------------------------------------------- report


def machine(device: str, threads: int) -> dict[str, Any]:
    import mlflow
    import optuna
    import ray

    from benchmarks.zoo.run import machine_info

    info = machine_info("cuda" if device == "cuda" else "cpu", threads)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    info.update({"memory_gib": round(mem, 1), "ray": ray.__version__, "optuna": optuna.__version__,
                 "mlflow": mlflow.__version__, "ray_address": os.environ.get("RAY_ADDRESS")})
    return info


def summarise(repeats: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("ratio", "ratio_searches", "overhead_per_trial_s", "overhead_per_trial_searches_s")
    return {k: statistics.median(r[k] for r in repeats) for k in keys}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the report written to cluster.json."""
    args = parse_args(argv)
    gpu = 0.0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: CUDA is not available here")
        gpu = min(1.0, torch.cuda.device_count() / args.workers)  # --workers trials share the GPUs evenly
    p = with_share(args.search, args.workers, gpu)
    check_replayable(p, args.families)
    pairs = [(d, f) for d in args.datasets for f in args.families]
    start, load_start = time.perf_counter(), load_average()
    work = Path(args.work or tempfile.mkdtemp(prefix="ctsweep-bench-cluster-")).resolve()
    try:
        with local_tracking():
            sizes = prepare_data(args.params, args.datasets, work / "data-root", args.quick)
            repeats = overhead_runs(args, work, work / "data-root", pairs, p)
            throughput = throughput_runs(args, work, work / "data-root", pairs, p, repeats)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "machine": machine(args.device, max(1, int(p.resources.cpu))),
        "settings": {"quick": args.quick, "device": args.device, "workers": args.workers,
                     "sequential": args.sequential,
                     "repeats": args.repeats, "throughput_workers": args.throughput_workers,
                     "trials_per_gpu": args.trials_per_gpu, "work": str(work) if args.keep else None,
                     "command": "python -m benchmarks.cluster.run " + " ".join(sys.argv[1:] if argv is None else argv)},
        "workload": {"datasets": args.datasets, "families": args.families, "pairs": pairs, "sizes": sizes,
                     "search": p.model_dump()},
        "overhead": repeats, "summary": summarise(repeats), "throughput": throughput,
        "total_seconds": time.perf_counter() - start,
    }
    # Other work on the machine slows both paths, not necessarily alike; the load average flags it.
    report["machine"]["load_average"] = [load_start, load_average()]
    print(write_outputs(report, args.out))
    return report


if __name__ == "__main__":
    main()
