"""The cluster-fill benchmark's shared parts: the workload, the synthetic trial, the driver's modes
over one dataset (MODES, run_mode, the SQLite stores) and the arithmetic of the fill.

benchmarks/fill/run.py runs the benchmark (its docstring says what it measures); the modes over
several datasets (benchmarks/fill/datasets.py) and over the stores (benchmarks/fill/stores.py)
build on this module, and benchmarks/fill/report.py writes fill.md. Ray workers import this
module to unpickle `synthetic_trial`: its imports stay light.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python benchmarks/fill/run.py` as well as `-m benchmarks.fill.run`
    sys.path.insert(0, str(ROOT))

# Light imports only: Ray workers import this module to unpickle `synthetic_trial`.
from benchmarks.cluster.run import local_tracking  # noqa: E402  (MLflow to the project's own SQLite file)
from pipeline.config import AshaParams, Resources, SearchParams, XorParams  # noqa: E402

DATASET = "xor_fill"
WORKLOAD_FILE = "fill_workload.json"  # in the project root: the per-family sleep figures trials read
BUSY_DIR = "busy"  # in the project root: one JSON file per trial attempt, its busy interval

# Twelve real families (their own space files); the trial ignores the model.
FAMILIES = ("cfc", "cde_fwp_delta", "cdr_nde", "ncde", "ode_rnn", "lstm_dt",
            "gru_d", "ltc", "ct_rnn", "ode_lstm", "latent_ode", "nrde")


@dataclass(frozen=True)
class Workload:
    """The synthetic sweep: its size, the driver's settings and the sleep distribution.

    Per-epoch seconds: each family's median is drawn once from a lognormal (geometric mean
    `epoch_s`, log-sd `family_sigma`, clipped to [epoch_min_s, epoch_max_s]); each trial scales
    it by a lognormal factor (log-sd `trial_sigma`, e.g. a bigger hidden size) and each epoch by
    another (log-sd `epoch_sigma`, noise). All seeded by `seed`, the family and the config.
    """

    families: tuple[str, ...] = FAMILIES
    slots: int = 32
    num_samples: int = 16
    epochs: int = 8
    grace_period: int = 2
    reduction_factor: float = 3
    # 4: 12 families x 4 = 48 live trials at most, enough for 32 slots, while each 16-trial TPE
    # study still waits for results after its 3 random proposals (16 at once would be random search).
    max_concurrent: int = 4
    # A family's study proposes a round of 4 and learns from it when all 4 have ended (issue 28):
    # the same 4 live trials per family as before rounds, decided whatever the arrival order.
    round_size: int = 4
    # Rounds of a family's study live at once (search.rounds_in_flight): 1, a round waits for the
    # previous one's slowest trial; 2, the next round takes the slots its fast trials free.
    rounds_in_flight: int = 1
    n_startup_trials: int = 3
    # Shorter than most real epochs so that both modes fit in 14 to 19 minutes here (2 cores,
    # mostly the before mode). Longer epochs stretch both; with today's driver they also raise the
    # after mode's concurrency (benchmarks/README.md: what limits the fill).
    epoch_s: float = 0.5
    family_sigma: float = 0.7
    epoch_min_s: float = 0.3
    epoch_max_s: float = 3.0
    trial_sigma: float = 0.3
    epoch_sigma: float = 0.15
    seed: int = 7
    # Warm the Ray worker processes before the clock starts (local_ray): each imports what a trial
    # imports. This was meant to spare the trials their imports, as a long-lived cluster's idle
    # workers would; it does not: Tune's trial actors never run in these pooled workers, each
    # starts a process of its own. Two rules of Ray's worker pool (2.60) exclude them: an actor
    # only takes an idle worker of its own runtime env, and Tune gives its trainable one
    # (ray/tune/execution/class_cache.py: env_vars PL_DISABLE_FORK); and a worker that has run a
    # task never hosts an actor (measured 2026-11-28: with the actor's runtime env as
    # the job's, 0 of 4 task-warmed workers hosted an actor; untouched prestarted workers of the
    # default env hosted plain actors). What warming still does is fill the OS file cache.
    warm_workers: bool = False
    # The shortest epoch any trial sleeps, whatever its lognormal factors draw (0: no floor).
    epoch_floor_s: float = 0.0

    def params(self) -> SearchParams:
        return SearchParams(num_samples=self.num_samples, max_concurrent=self.max_concurrent, epochs=self.epochs,
                            round_size=self.round_size, rounds_in_flight=self.rounds_in_flight,
                            n_startup_trials=self.n_startup_trials, trial_time_limit_s=3600.0,
                            asha=AshaParams(grace_period=self.grace_period, reduction_factor=self.reduction_factor),
                            resources=Resources(cpu=1), max_failures=0)

    def medians(self) -> dict[str, float]:
        """Each family's median seconds per epoch (seeded: the same in every mode)."""
        rng = random.Random(self.seed)
        return {f: round(min(self.epoch_max_s, max(self.epoch_min_s,
                                                    rng.lognormvariate(math.log(self.epoch_s), self.family_sigma))), 3)
                for f in self.families}


# A smoke run for the test (not a measurement): 2 families x 4 trials on 2 slots, one trial of a family at
# a time, epochs of about 0.5 s. Two families are the fewest that can share the slots (the test checks
# they do); two slots the fewest they can share, and each slot's process costs a trial's imports.
QUICK = Workload(families=FAMILIES[:2], slots=2, num_samples=4, epochs=3, grace_period=1, max_concurrent=1,
                 round_size=2,
                 n_startup_trials=1, epoch_s=0.5, epoch_min_s=0.3, epoch_max_s=1.0)

# The modes: (driver, environment of the driver while it runs). The driver now sets Tune's
# pending-trial limit itself (pipeline.sweep.cluster.pending_trials); before that, Tune kept one
# trial pending at a time for a custom searcher, which TUNE_MAX_PENDING_TRIALS_PG=1 restores.
# "before" is the driver as it was before concurrent searches: one search after another, one
# pending trial. The other two are diagnostics, each with one of the two changes.
MODES = {"before": ("sequential", {"TUNE_MAX_PENDING_TRIALS_PG": "1"}), "after": ("many", {}),
         "sequential": ("sequential", {}), "after-one-pending": ("many", {"TUNE_MAX_PENDING_TRIALS_PG": "1"})}


# ------------------------------------------------------------------------------ the trial


def _rng(seed: int, family: str, config: dict[str, Any]) -> random.Random:
    """A trial's own random stream: the same config of the same family draws the same sleeps
    and scores in either mode, whatever Ray calls the trial."""
    key = json.dumps([seed, family, config], sort_keys=True, default=str)
    return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))


def score(config: dict[str, Any], epoch: int, best_lr: float, noise: float) -> float:
    """A learning curve: best near `best_lr` (log scale), rising with epochs; mode max (accuracy)."""
    lr = float(config.get("lr", 1e-3))
    closeness = math.exp(-((math.log10(lr) - math.log10(best_lr)) ** 2) / (2 * 0.5 ** 2))
    return min(1.0, max(0.0, 0.5 + 0.45 * closeness * (1 - math.exp(-epoch / 3)) + noise))


def synthetic_trial(config: dict[str, Any], ctx: Any, data: Any) -> None:
    """A search trial without training (the `trial_fn` of `search`/`search_many`): its MLflow run,
    then per epoch a sleep, the metric logged, a report (with a checkpoint as often as
    `search.checkpoint_every_s` lets run_trial save one); its busy interval
    goes to <root>/busy/ as it exits, however it exits (ASHA's stop ends it inside the report).
    Sleeps and scores are keyed by family and config, never by `ctx.dataset`: searched on several
    datasets (benchmarks/fill/datasets.py), each dataset's family gets the same figures."""
    from ray import tune

    from pipeline.stores import tracking
    from pipeline.sweep.trial import trial_run

    start = time.time()
    root = Path(ctx.dataset_dir).parents[2]  # <root>/data/processed/<dataset>
    workload = json.loads((root / WORKLOAD_FILE).read_text())
    rng = _rng(workload["seed"], ctx.family, config)
    median = workload["medians"][ctx.family] * rng.lognormvariate(0, workload["trial_sigma"])
    trial_id = tune.get_context().get_trial_id()
    slept = reporting = tracked = 0.0
    epoch = 0
    saved = start  # the last checkpoint: `search.checkpoint_every_s` counts from it, as in run_trial
    try:
        client = tracking.MlflowClient(ctx.tracking_uri)
        run_id = trial_run(client, ctx, trial_id, config)
        tracked = time.time() - start
        for epoch in range(1, ctx.epochs + 1):
            seconds = max(workload.get("epoch_floor_s", 0.0), median * rng.lognormvariate(0, workload["epoch_sigma"]))
            time.sleep(seconds)
            slept += seconds
            value = score(config, epoch, workload["best_lr"][ctx.family], rng.gauss(0, 0.02))
            before = time.time()
            tracking.log_metrics(client, run_id, {"val_metric": value, "epoch_s": seconds}, step=epoch)
            tracked += time.time() - before
            before = time.time()
            try:  # blocks until the driver asks for the next epoch (or stops the trial: SystemExit)
                metrics = {"epoch": epoch, "val_metric": value, "mlflow_run_id": run_id}
                if before - saved < ctx.checkpoint_every_s:  # run_trial's cadence
                    tune.report(metrics)
                else:
                    with tempfile.TemporaryDirectory() as folder:
                        Path(folder, "state.json").write_text(json.dumps({"epoch": epoch}))
                        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
                    saved = time.time()
            finally:
                reporting += time.time() - before
    finally:
        record = {"trial_id": trial_id, "dataset": ctx.dataset, "family": ctx.family, "pid": os.getpid(),
                  "start": start, "end": time.time(),
                  "epochs": epoch, "slept_s": slept, "report_s": reporting, "mlflow_s": tracked}
        out = root / BUSY_DIR / f"{trial_id}-{os.getpid()}-{int(start * 1e6)}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(record))


# ---------------------------------------------------------------------------- the driver


def new_project(work: Path, label: str, workload: Workload, datasets: tuple[str, ...] = (DATASET,)) -> Path:
    """A project root: the repository's search spaces and params.yaml, a tiny XOR dataset per
    name of `datasets` (all alike) and the workload file the trials read (keyed by family only:
    every dataset's trials of a family sleep alike)."""
    from pipeline.data.contract import save_dataset
    from pipeline.data.kinds.xor import build
    from pipeline.stores.paths import processed_dir

    root = (work / label).resolve()
    shutil.copytree(ROOT / "search_spaces", root / "search_spaces")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    for name in datasets:
        save_dataset(processed_dir(root, name), build(name, XorParams(kind="xor", n_train=64, n_test=16, seed=5)))
    best = random.Random(workload.seed + 1)
    (root / WORKLOAD_FILE).write_text(json.dumps({
        **asdict(workload), "medians": workload.medians(),
        "best_lr": {f: 10 ** best.uniform(-3.5, -2) for f in workload.families}}))
    return root


def _ready() -> int:
    time.sleep(0.5)  # long enough that every call needs its own worker
    return os.getpid()


def _warm() -> int:
    """_ready, after importing what a trial imports: the trial code, and torch, MLflow and Ray
    Tune with it (this module's own imports are light)."""
    import pipeline.sweep.trial  # noqa: F401

    return _ready()


@contextlib.contextmanager
def local_ray(slots: int, gpus: int = 0, warm: bool = False) -> Iterator[float]:
    """A local Ray of this run's own declaring `slots` logical CPUs (benchmarks.cluster.run.ray_for_run's
    options, whatever RAY_ADDRESS says: the point is a 32-slot head on this machine); yields its
    start-up seconds. The driver's ray_session finds it initialised and uses it.

    Start-up lasts until `slots` worker processes answer: Ray starts one per logical CPU when the
    driver connects, and on a small machine their start would otherwise load the first searches.
    `gpus`: GPUs it declares (benchmarks.gpu.run), physical or, without a CUDA device, logical.
    `warm`: every worker also imports what a trial imports first (Workload.warm_workers)."""
    import ray

    start = time.perf_counter()
    ray.init(address="local", num_cpus=slots, num_gpus=gpus, include_dashboard=False,
             log_to_driver=bool(os.environ.get("CTSWEEP_RAY_LOGS")), configure_logging=False)
    try:
        ready = ray.remote(num_cpus=1)(_warm if warm else _ready)
        ray.get([ready.remote() for _ in range(slots)])
        yield time.perf_counter() - start
    finally:
        ray.shutdown()


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration (the driver reads Tune's settings from it)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def sqlite_stores(root: Path) -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
    """The project's own SQLite files for MLflow and Optuna (the defaults): no environment or
    `search` settings to change. benchmarks/fill/stores.py has the PostgreSQL alternative."""
    with local_tracking():
        yield {}, {}


def run_mode(work: Path, label: str, workload: Workload, stores: Any = sqlite_stores,
             driver: tuple[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """One mode (MODES, or `driver`: (driver, environment)) in its own project and Ray: every
    search through the real driver, timed. `stores(root)`: a context manager yielding the MLflow
    and Optuna stores' (environment, `search` settings) for the run (sqlite_stores by default)."""
    from pipeline.stores import tracking
    from pipeline.sweep.search import search, search_many

    driver, env = driver or MODES[label]
    sequential = driver == "sequential"
    env = {k: str(workload.slots) if v == "slots" else v for k, v in env.items()}
    root = new_project(work, label, workload)
    load_start = load_average()
    with stores(root) as (store_env, store_params), environment(store_env), \
            local_ray(workload.slots, warm=workload.warm_workers) as ray_startup_s, environment(env):
        p = workload.params().model_copy(update=store_params)
        tracking.experiment_id(root, DATASET)  # the store, created before the clock starts (as benchmarks/cluster/run.py)
        calls = []
        t0 = time.time()
        if sequential:
            records = {}
            for family in workload.families:
                begin = time.time()
                records[family] = search(root, DATASET, family, p, trial_fn=synthetic_trial)
                calls.append({"family": family, "start": begin - t0, "wall_s": time.time() - begin})
        else:
            records = search_many(root, DATASET, list(workload.families), p, trial_fn=synthetic_trial)
        t1 = time.time()
        workers = worker_processes_started()
    busy = [json.loads(f.read_text()) for f in sorted((root / BUSY_DIR).glob("*.json"))]
    out = {"mode": label, "sequential": sequential, "environment": env, "stores": stores.__name__,
           "ray_startup_s": ray_startup_s, "calls": calls,
           "worker_processes_started": workers,
           "load_average": [load_start, load_average()], **summarise(busy, records, t0, t1, workload)}
    print(f"  {label}: wall {out['wall_s']:.1f} s, fill {out['fill']:.3f}, {out['n_trials']} trials",
          file=sys.stderr, flush=True)
    return out


def worker_processes_started() -> int | None:
    """Python worker processes this Ray instance started (one log file each), the start-up's
    `slots` included: far more than the trial processes means processes started and discarded."""
    try:
        import ray._private.worker as ray_worker  # no public handle on the session's log folder

        return len(list(Path(ray_worker._global_node.get_logs_dir_path()).glob("python-core-worker-*.log")))
    except Exception:  # a Ray without this layout: not worth failing the benchmark
        return None


def concurrency(intervals: list[tuple[float, float]]) -> list[tuple[float, int]]:
    """(time, trials running from then on), at every start and end."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running, steps = 0, []
    for t, delta in events:
        running += delta
        steps.append((t, running))
    return steps


def idle_by_phase(spans: list[tuple[float, float]], t0: float, t1: float, slots: int) -> dict[str, float]:
    """Idle slot-seconds (slots not running a trial) over the run's three phases, from the
    concurrency timeline: `before_first` (t0 to the first trial's start), `waiting` (from then to
    the last trial's start: trials were still to come, but the driver had none to give: every
    family's round or live-trial cap was full, or Tune had not yet placed them) and `after_last`
    (the last start to t1: the end of the work). Unlike idle_slot_time it does not depend on
    which process ran what: a process Tune stops while no trial is ready counts here as waiting."""
    first, last = min(s for s, _ in spans), max(s for s, _ in spans)
    out = {"before_first": slots * (first - t0), "waiting": 0.0, "after_last": 0.0}
    steps = concurrency(spans) + [(t1, 0)]
    for (a, running), (b, _) in zip(steps, steps[1:]):
        for phase, lo, hi in (("waiting", first, last), ("after_last", last, t1)):
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                out[phase] += max(0, slots - running) * overlap
    return out


def family_switches(busy: list[dict[str, Any]]) -> int:
    """How often the family changes from one trial start to the next: one search after another
    gives (families - 1); one run holding every family, turn by turn, many more."""
    order = [b["family"] for b in sorted(busy, key=lambda b: b["start"])]
    return sum(a != b for a, b in zip(order, order[1:]))


def families_at_once(busy: list[dict[str, Any]]) -> int:
    """The most distinct families with a trial running at the same moment."""
    best = 0
    for t in sorted(b["start"] for b in busy):
        best = max(best, len({b["family"] for b in busy if b["start"] <= t < b["end"]}))
    return best


def summarise(busy: list[dict[str, Any]], records: dict[str, dict[str, Any]], t0: float, t1: float,
              workload: Workload) -> dict[str, Any]:
    """Fill and what explains it, from the trials' busy intervals and the search records."""
    wall = t1 - t0
    spans = [(max(b["start"], t0), min(b["end"], t1)) for b in busy]
    busy_s = sum(max(0.0, e - s) for s, e in spans)
    steps = concurrency(spans)
    full = next((t - t0 for t, n in steps if n >= workload.slots), None)
    trials = [t for r in records.values() for t in r["trials"]]
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for b in busy:
        by_pid.setdefault(b["pid"], []).append(b)
    gaps, firsts = [], []
    for runs in by_pid.values():
        runs.sort(key=lambda b: b["start"])
        gaps += [nxt["start"] - prev["end"] for prev, nxt in zip(runs, runs[1:])]  # a reused process: next trial
        firsts.append(runs[0]["start"] - t0)
    firsts.sort()
    spacing = [b - a for a, b in zip(firsts, firsts[1:])]
    lost = idle_slot_time(by_pid, t0, t1, workload.slots)
    phases = idle_by_phase(spans, t0, t1, workload.slots)
    waiting_s = max(s for s, _ in spans) - min(s for s, _ in spans)  # the first start to the last
    step = max(1.0, wall / 60)
    return {
        "wall_s": wall, "busy_s": busy_s, "fill": busy_s / (workload.slots * wall),
        "sleep_s": sum(b["slept_s"] for b in busy), "report_s": sum(b["report_s"] for b in busy),
        "mlflow_s": sum(b["mlflow_s"] for b in busy),
        "work_fill": sum(b["slept_s"] for b in busy) / (workload.slots * wall),
        "n_trials": len(trials), "expected_trials": len(workload.families) * workload.num_samples,
        "n_busy_records": len(busy), "n_failed": sum(t["status"] == "error" for t in trials),
        "asha_stopped": sum(t["status"] == "ok" and t["epochs"] < workload.epochs for t in trials),
        "epochs": sum(t["epochs"] for t in trials),
        "families_ok": sum(r["status"] == "ok" for r in records.values()),
        "first_trial_s": min(b["start"] for b in busy) - t0, "all_slots_busy_s": full,
        "after_last_trial_s": t1 - max(e for _, e in spans), "peak_running": max(n for _, n in steps),
        "families_at_once": families_at_once(busy), "family_switches": family_switches(busy),
        "trial_processes": len(by_pid),
        "reuse_gap_median_s": statistics.median(gaps) if gaps else None,
        # When each trial process ran its first trial: how the slots came into use.
        "process_first_trial_s": [round(t, 2) for t in firsts],
        "new_process_spacing_median_s": statistics.median(spacing) if spacing else None,
        "idle_slot_s": lost,  # where the slots' idle time went (idle_slot_time)
        "idle_phase_s": phases,
        # trials running, time-weighted, from the first trial's start to the last one's: the slots
        # less the idle ones of that phase
        "running_while_waiting": workload.slots - phases["waiting"] / waiting_s if waiting_s > 0 else None,
        "timeline_step_s": step,  # trials running at t0, t0 + step, ...
        "timeline": [sum(s <= t0 + i * step < e for s, e in spans) for i in range(int(wall / step) + 1)],
    }


def idle_slot_time(by_pid: dict[int, list[dict[str, Any]]], t0: float, t1: float, slots: int) -> dict[str, float]:
    """Where the idle slot-seconds (slots x wall - busy) went, counted per trial process (one
    per slot when Tune keeps its processes): `start_up` from the first search call to each
    process's first trial (Ray's process start, the trial's imports, the driver's set-up),
    `between` from a trial's end to the next one's start in the same process (Tune's scheduling),
    `drain` from each process's last trial to the last return (the search running out of trials,
    then writing its records), `unused` whole wall times of slots no process ever took."""
    out = {"start_up": 0.0, "between": 0.0, "drain": 0.0, "unused": max(0, slots - len(by_pid)) * (t1 - t0)}
    for runs in by_pid.values():
        runs = sorted(runs, key=lambda b: b["start"])
        out["start_up"] += max(0.0, runs[0]["start"] - t0)
        out["between"] += sum(max(0.0, nxt["start"] - prev["end"]) for prev, nxt in zip(runs, runs[1:]))
        out["drain"] += max(0.0, t1 - runs[-1]["end"])
    return out


# ---------------------------------------------------------------------------------- report


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def machine() -> dict[str, Any]:
    """benchmarks.cluster.run.machine's description (CPU, cores, memory, versions, commit)."""
    from benchmarks.cluster.run import machine as describe

    return describe("cpu", 1)
