"""Connecting to Ray: the cluster in RAY_ADDRESS when set, else a local instance."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import ray

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
    if address:
        _use_token_when_available()
    # The dashboard costs seconds and memory per start on a laptop; a cluster has its own.
    ray.init(address=address, include_dashboard=False if not address else None,
             log_to_driver=bool(os.environ.get("CTSWEEP_RAY_LOGS")), configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
