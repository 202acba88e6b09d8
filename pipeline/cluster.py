"""Connecting to Ray: the cluster in RAY_ADDRESS when set, else a local instance."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import ray


@contextlib.contextmanager
def ray_session() -> Iterator[None]:
    """Use an already-initialised Ray, else connect (RAY_ADDRESS) or start one, and shut
    down only what this call started.

    A local instance gets the token authentication Ray 2.60 enables by default; workers of a
    remote cluster find `pipeline` in the same environment the cluster was started from.
    """
    if ray.is_initialized():
        yield
        return
    address = os.environ.get("RAY_ADDRESS")
    # The dashboard costs seconds and memory per start on a laptop; a cluster has its own.
    ray.init(address=address, include_dashboard=False if not address else None,
             log_to_driver=bool(os.environ.get("CTSWEEP_RAY_LOGS")), configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
