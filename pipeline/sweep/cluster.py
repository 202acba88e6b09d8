"""Connecting to Ray: the cluster in RAY_ADDRESS when set, else a local instance."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from pipeline.runtime import allocator
from pipeline.runtime import interrupts
from pipeline.runtime.cluster_watch import ClusterWatch
from pipeline.models import user as user_families
from pipeline.config import Resources
from pipeline.errors import ConfigError, ResourceError

TOKEN_PATH = Path.home() / ".ray" / "auth_token"


def _use_token_when_available() -> None:
    """Ray 2.60 clients send the cluster token only with RAY_AUTH_MODE=token; without it a
    connection to a token-protected cluster retries for a minute and fails. Opt in when a
    token is at hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and the user
    has not chosen a mode."""
    has_token = (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                 or TOKEN_PATH.exists())
    if has_token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        # Ray reads the mode into its C++ config when it is imported, long before this runs;
        # the environment alone is not seen (ray.init refreshes the config only for a local
        # cluster it finds itself, never for an explicit address), so refresh it as Ray does.
        from ray._raylet import Config

        Config.initialize("")


def local_options(dashboard: bool) -> dict[str, Any]:
    """ray.init options of a fresh local instance. The dashboard costs seconds and memory per
    start, so only data-parallel searches get one: Ray Train frees a stopped trial's workers
    only through the State API it serves (else they hold their CPUs until the search ends). Its
    address is handed to Ray's processes so they do not find another Ray instance's dashboard.

    No worker processes are started ahead of time (Ray's `prestart_worker_first_driver`): the
    trials are actors whose processes Ray starts when they are placed, so the idle workers it would
    start for the driver (one per CPU) mostly stayed idle until shutdown: a start and stop costs
    about 1 CPU-s less without them (docs/development/tests.md, "Where the CPU goes")."""
    options: dict[str, Any] = {"_system_config": {"prestart_worker_first_driver": False}}
    if not dashboard:
        return {**options, "include_dashboard": False}
    from pipeline.stores.tracking_server import free_port  # here: MLflow is not needed to read this module

    port = free_port()
    return {**options, "include_dashboard": True, "dashboard_port": port,
            "runtime_env": {"env_vars": {"RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{port}"}}}


@contextlib.contextmanager
def ray_session(dashboard: bool = False) -> Iterator[None]:
    """Use an already-initialised Ray, else connect (RAY_ADDRESS) or start one, and shut
    down only what this call started.

    Without RAY_ADDRESS always a fresh local instance (with token authentication, Ray 2.60's
    default): address=None would join whatever cluster /tmp/ray/ray_current_cluster names, a
    stale one of a killed head included (RAY_ADDRESS=auto asks for that). `dashboard`: start the
    local instance's dashboard (a cluster has its own). Workers of a remote cluster find
    `pipeline` in the same environment the cluster was started from.
    """
    allocator.mode()  # a bad CTSWEEP_MALLOC fails here, not in every trial
    if ray.is_initialized():
        yield
        return
    address = os.environ.get("RAY_ADDRESS")
    if address:
        _use_token_when_available()
    options = {} if address else local_options(dashboard)
    carried = {k: os.environ[k] for k in (user_families.ENV,) if k in os.environ}
    if carried:  # the user's own families, for every trial process wherever it runs (pipeline/models/user.py)
        runtime_env = options.setdefault("runtime_env", {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **carried}
    try:
        with interrupts.deferred():  # a signal during start-up or shutdown is raised after it, not inside Ray
            ray.init(address=address or "local", log_to_driver=bool(os.environ.get("CTSWEEP_RAY_LOGS")),
                     configure_logging=False, **options)
            interrupts.reclaim()  # Ray's own SIGTERM handler would abort the driver without clean-up
        watch = ClusterWatch(ray.get_runtime_context().gcs_address, from_env=bool(address))
        watch.start()  # a head that goes away ends the stage in one line (pipeline/runtime/cluster_watch.py)
        try:
            yield
        finally:
            watch.stop()
    finally:
        with interrupts.deferred():
            ray.shutdown()


def alive_nodes() -> list[dict[str, float]]:
    """The resources ({"CPU": 16.0, "GPU": 4.0, ...}) of every alive node of the connected cluster."""
    return [dict(node["Resources"]) for node in ray.nodes() if node["Alive"]]


def _fits(node: dict[str, float], bundle: dict[str, float]) -> int:
    """How many copies of `bundle` one node holds (1e-9: 4 x 0.25 GPU must fit one GPU)."""
    counts = [int(node.get(k, 0.0) / v + 1e-9) for k, v in bundle.items() if v > 0]
    return min(counts) if counts else 1 << 30


def check_fits(resources: Resources, key: str, autoscaling: bool = False,
               nodes: list[dict[str, float]] | None = None) -> None:
    """Refuse at once a request no node can satisfy, instead of a trial PENDING forever.

    `resources.workers` copies of {cpu, gpu} must fit on the cluster's nodes (one process each,
    placed by Ray). With `autoscaling` the cluster may add nodes later: nothing is refused.
    `nodes`: those of a local instance not started yet (local_node), else the connected cluster's.
    """
    if autoscaling:
        return
    here = nodes is not None
    nodes = nodes if here else alive_nodes()
    bundle = {"CPU": resources.cpu, "GPU": resources.gpu}
    room = sum(_fits(node, bundle) for node in nodes)
    if room >= resources.workers:
        return
    largest = max(nodes, key=lambda n: (n.get("GPU", 0.0), n.get("CPU", 0.0)), default={})
    asked = f"cpu={resources.cpu:g}, gpu={resources.gpu:g}" + (
        f" for each of {resources.workers} workers" if resources.workers > 1 else "")
    has = f"CPU={largest.get('CPU', 0):g}, GPU={largest.get('GPU', 0):g}"
    if here:
        raise ResourceError(
            f"params.yaml: `{key}` asks for {asked}, which this machine cannot provide to the local Ray instance "
            f"the command starts (it has {has}). Lower the request, or set RAY_ADDRESS to a cluster that has it.")
    raise ResourceError(
        f"params.yaml: `{key}` asks for {asked}, which this Ray cluster cannot provide "
        f"({len(nodes)} node(s); the largest has {has}). "
        f"Lower the request, add nodes, or set `search.autoscaling: true` if the cluster adds nodes on demand.")


def local_node() -> list[dict[str, float]] | None:
    """What a local Ray instance started by ray_session would declare here, for check_fits before
    it starts: None when Ray is initialised or RAY_ADDRESS names a cluster (the cluster is asked).

    Upper bounds of what Ray detects, so that nothing it would accept is refused: every CPU the
    system has (Ray may count fewer under a container's quota), and the GPUs torch or the NVIDIA
    device files show (Ray reads CUDA_VISIBLE_DEVICES or NVML)."""
    if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return None
    import torch

    devices = len(list(Path("/dev").glob("nvidia[0-9]*"))) if "CUDA_VISIBLE_DEVICES" not in os.environ else 0
    gpus = max(torch.cuda.device_count(), devices)
    return [{"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}]


PENDING_TRIALS_ENV = "TUNE_MAX_PENDING_TRIALS_PG"
# Tune warns each time it forces an experiment snapshot within 5 s of the last one, which with a
# checkpoint per epoch and num_to_keep=2 is hundreds of times per search. The cost was measured
# (docs/benchmarks/cluster.md: about 0.04 of the overhead ratio) and accepted to bound the
# storage, so the warning is switched off the way Ray's message says.
SNAPSHOT_WARNING_ENV = "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"


def trial_slots(requests: list[Resources]) -> int:
    """The most trials the connected cluster runs at once: that of the request that packs best.

    A data-parallel trial (workers > 1) counts as its workers' bundles; at least 1.
    """
    nodes = alive_nodes()
    best = 0
    for res in requests:
        room = sum(_fits(node, {"CPU": res.cpu, "GPU": res.gpu}) for node in nodes)
        best = max(best, room // max(1, res.workers))
    return max(1, best)


@contextlib.contextmanager
def pending_trials(limit: int) -> Iterator[None]:
    """Let Tune start up to `limit` trials at once.

    Tune allows ONE pending trial (placement group asked, trial not yet running) for any searcher
    that is not a ConcurrencyLimiter (ray.tune.execution.tune_controller._get_max_pending_trials),
    so an empty cluster fills one trial per scheduling round: at most 3 trials ran at once on a
    32-slot cluster (docs/benchmarks/fill.md). Tune's documented knob is this
    environment variable, read when the run starts. `TuneConfig(max_concurrent_trials)` is not
    used: its ConcurrencyLimiter forgets its live trials on restore and then drops the results of
    the trials a resumed run carries over, so their families would never see them end. Also
    silences Tune's snapshot warning (SNAPSHOT_WARNING_ENV). A value the user set is kept.
    """
    own = {key: value for key, value in ((PENDING_TRIALS_ENV, str(max(1, limit))), (SNAPSHOT_WARNING_ENV, "0"))
           if key not in os.environ}
    os.environ.update(own)
    try:
        yield
    finally:
        for key in own:
            os.environ.pop(key, None)


def is_uri(location: str) -> bool:
    """s3://..., gs://..., file://...: a storage URI rather than a path."""
    return "://" in location


def check_shared_storage(tracking_uri: str, storage_path: str | None = None, key: str = "") -> None:
    """On a multi-node cluster, refuse stores only the head node's disk holds.

    Worker nodes cannot write a local SQLite file or read checkpoints in a folder of the
    head's disk; a relative `storage_path` is such a folder (an absolute one is trusted to be
    on a shared filesystem, as a URI is to be an object store).
    """
    from pipeline.stores.database_url import masked
    from pipeline.stores.tracking import is_local_store, is_loopback_server

    n = len(alive_nodes())
    if n <= 1:
        return
    if is_local_store(tracking_uri):
        raise ConfigError(
            f"this Ray cluster has {n} nodes but the MLflow tracking store is local ({tracking_uri}): "
            "trials on other nodes cannot write it. Start an MLflow tracking server (`make mlflow-server`, "
            "docs/how-to/cluster.md) and set MLFLOW_TRACKING_URI=http://<host>:<port>.")
    hosts = {node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]}
    if is_loopback_server(tracking_uri) and len(hosts) > 1:  # nodes on one host share its loopback
        raise ConfigError(
            f"this Ray cluster spans {len(hosts)} hosts but MLFLOW_TRACKING_URI={masked(tracking_uri)} is this machine's "
            "loopback: "
            "other nodes cannot reach it. Serve MLflow on the head's private address "
            "(`make mlflow-server MLFLOW_HOST=<head-ip>`) and set MLFLOW_TRACKING_URI=http://<head-ip>:5000.")
    if storage_path is not None and not is_uri(storage_path) and not Path(storage_path).is_absolute():
        raise ConfigError(
            f"params.yaml: `{key}` is {storage_path!r}, a folder on this machine, but this Ray cluster has {n} "
            "nodes: give an absolute path on a filesystem every node mounts, or a URI such as s3://bucket/ctsweep.")
