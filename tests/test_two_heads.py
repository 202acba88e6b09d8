"""Two runs on one machine, and a stage that loses its cluster: real `ray start` heads on this machine.

- Two heads started as `make run` starts its head (the Makefile's flags, and the ports
  pipeline/runtime/ray_head.py picks) both stay up past the 30 s after which Ray stopped a second
  head that shared the first one's agent port; a RAY_PORT in use is refused in one line.
- A search whose head is killed mid-trial ends within a minute, status 1, with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.config import XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.stores.paths import processed_dir
from tests.clusters import BIN, RayCluster, _env, _stop, free_port
from tests.conftest import REPO, default_params, write_params

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _head_options(port: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.runtime.ray_head", str(port)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def _healthy(port: int) -> bool:
    return subprocess.run([str(BIN / "ray"), "health-check", f"--address=127.0.0.1:{port}"], env=_env(),
                          capture_output=True, timeout=60).returncode == 0


def _make_run_head(port: int, log: Path) -> subprocess.Popen:
    """The head `make run` starts (Makefile, target run), on `port`."""
    options = _head_options(port)
    assert options.returncode == 0, options.stderr
    return subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", f"--port={port}",
                             "--dashboard-host=127.0.0.1", "--disable-usage-stats", *options.stdout.split()],
                            env=_env(), stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def test_the_makefile_starts_its_head_on_the_ports_ray_head_picks() -> None:
    recipe = (REPO / "Makefile").read_text()
    assert "-m pipeline.runtime.ray_head $(RAY_PORT)) || exit 2" in recipe and "$$ports" in recipe


def test_two_make_run_heads_run_side_by_side_and_a_taken_port_is_refused(tmp_path: Path) -> None:
    first, second = free_port(), free_port()
    heads = [_make_run_head(first, tmp_path / "first.log")]
    try:
        deadline = time.monotonic() + 120
        while not _healthy(first):
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-2000:]
            time.sleep(1)
        heads.append(_make_run_head(second, tmp_path / "second.log"))
        while not _healthy(second):
            assert time.monotonic() < deadline, (tmp_path / "second.log").read_text()[-2000:]
            time.sleep(1)
        time.sleep(40)  # Ray stopped a second head sharing the first one's agent port about 30 s in
        assert [h.poll() for h in heads] == [None, None], (tmp_path / "second.log").read_text()[-2000:]
        assert _healthy(first) and _healthy(second)
        refused = _head_options(first)  # a third run on the first one's port
        assert refused.returncode == 2 and refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith(f"ctsweep: error: RAY_PORT {first} is in use, most likely by the Ray head of another "
                               f"`make run`") and f"RAY_ADDRESS=127.0.0.1:{first} make run" in line
    finally:
        for head in reversed(heads):
            _stop(head)


def test_a_search_that_loses_its_cluster_stops_within_a_minute_in_one_line(project: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    save_dataset(processed_dir(project, "xor"), build_xor("xor", XorParams(kind="xor", n_train=1600, n_test=50, seed=3)))
    raw = default_params()
    raw.update(datasets=["xor"], families=["cfc"], prepare={"xor": {"kind": "xor", "n_train": 1600, "n_test": 50}})
    raw["search"].update(num_samples=2, epochs=200, n_startup_trials=1, asha={"grace_period": 200},
                         saturation={"enabled": False})
    write_params(project, raw)
    cluster = RayCluster(head_cpus=1, log_dir=tmp_path)
    try:
        cluster.wait_for(1)
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        driver = subprocess.Popen(["ctsweep", "search", "xor", "cfc"], cwd=project, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        client, deadline = MlflowClient(f"sqlite:///{project / 'mlflow.db'}"), time.monotonic() + 240
        while True:  # a trial has trained an epoch: the search is under way on the cluster
            assert driver.poll() is None and time.monotonic() < deadline, driver.stdout.read()[-3000:]
            exp = (project / "mlflow.db").exists() and client.get_experiment_by_name("ctsweep/xor")
            if exp and client.search_runs([exp.experiment_id], "metrics.epoch >= 1"):
                break
            time.sleep(1)
        cluster.kill_node(cluster.head)  # the head and everything of it, at once
        lost = time.monotonic()
        out, _ = driver.communicate(timeout=120)
        took = time.monotonic() - lost
    finally:
        _stop(driver) if "driver" in locals() and driver.poll() is None else None
        cluster.close()
    assert took < 60 and driver.returncode == 1, (took, driver.returncode, out[-3000:])
    lines = [line for line in out.splitlines() if "ctsweep: error:" in line]
    assert len(lines) == 1 and lines[0].startswith(f"ctsweep: error: lost the Ray cluster at "), out[-3000:]
    assert "Failed to connect to GCS" not in out and "Traceback" not in out
