"""One local Ray per test process, shared by the tests that ask for the `local_ray` fixture
(tests/conftest.py), and its bookkeeping.

The state lives here, not in conftest.py: pytest imports conftest.py as the module `conftest`,
while a test that imports a helper from it (`from tests.conftest import ...`) gets a second copy,
`tests.conftest`, with dictionaries of its own. A flag set through one copy would be unseen by
the other; this module is imported once, as `tests.shared_ray`, by both."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

LOCAL_RAY_CPUS = 2  # what a fresh local instance declares on this 2-core machine
_PROCESS_ENV = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
# started: the Ray initialised in this process is the shared one; held: a wider-scoped fixture
# initialised one of its own for its tests (held_ray).
_LOCAL_RAY = {"started": False, "held": False}


def start_local_ray() -> None:
    """The `local_ray` instance, started if no Ray is initialised here (for wider-scoped fixtures)."""
    import ray

    from pipeline.sweep.cluster import local_options

    if ray.is_initialized():
        return
    # Ray's processes inherit the environment of the moment it starts: that of the test process,
    # not whatever the first test to ask had set with monkeypatch.
    now = dict(os.environ)
    os.environ.clear()
    os.environ.update(_PROCESS_ENV)
    try:
        # The options ray_session gives the local instance it starts (no dashboard, no prestarted workers).
        ray.init(address="local", num_cpus=LOCAL_RAY_CPUS, log_to_driver=False, configure_logging=False,
                 **local_options(dashboard=False))
        _LOCAL_RAY["started"] = True
    finally:
        os.environ.clear()
        os.environ.update(now)


@contextlib.contextmanager
def held_ray() -> Iterator[None]:
    """For a wider-scoped fixture that initialises a Ray of its own in the test process and keeps
    it for its tests: the shared instance is stopped first, and the end-of-test check (conftest.py) leaves
    the fixture's Ray alone while it is held (the fixture still stops it itself)."""
    stop_local_ray()
    _LOCAL_RAY["held"] = True
    try:
        yield
    finally:
        _LOCAL_RAY["held"] = False


def stop_local_ray() -> None:
    """Stop the shared instance if it runs: before a test, or a fixture of a wider scope, starts a
    Ray of its own in this process (a Ray that something else started is left alone)."""
    ray = sys.modules.get("ray")  # imported only where some test used Ray
    if _LOCAL_RAY["started"] and ray is not None and ray.is_initialized():
        ray.shutdown()
    _LOCAL_RAY["started"] = False


def leaked() -> bool:
    """A Ray initialised in this process that is neither the shared one nor held by a fixture."""
    ray = sys.modules.get("ray")
    return not (_LOCAL_RAY["started"] or _LOCAL_RAY["held"] or ray is None or not ray.is_initialized())
