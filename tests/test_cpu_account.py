"""CPU time by process kind (benchmarks/cluster/cpu_account.py): the cluster benchmark's split of a pass's CPU
into trial processes, the driver and the processes it started, checked against what real spawned
processes report about themselves."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster.cpu_account import CpuAccount, kind_of  # noqa: E402


@pytest.mark.parametrize("title, descendant, is_self, cluster, kind", [
    ("ray::ImplicitFunc.train", True, False, False, "trials"),
    ("ray::ImplicitFunc", False, False, True, "trials"),  # a cluster's workers are its raylet's
    ("ray::ImplicitFunc", False, False, False, "other"),  # a local run's are its own: this is another's
    ("python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)", True, False, False, "trials"),
    ("python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)", False, False, False, "other"),
    ("/venv/ray/core/src/ray/raylet/raylet --raylet_socket_name=x", True, False, False, "helpers"),
    ("ray::IDLE", True, False, False, "helpers"),
    ("python -m pytest", False, True, False, "driver"),
    ("postgres: checkpointer", False, False, True, "other"),
])
def test_kind_of_reads_ray_s_titles_and_the_pool_s_workers(title: str, descendant: bool, is_self: bool,
                                                             cluster: bool, kind: str) -> None:
    assert kind_of(title, descendant, is_self, cluster) == kind


def test_the_account_splits_cpu_between_pool_workers_helpers_and_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local pass: Tune trials of tests running beside it are not its own
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass\nprint(time.process_time())"
    with CpuAccount(interval_s=0.1) as account:
        with mp.get_context("spawn").Pool(1) as pool:
            pool.apply(sum, (range(20_000_000),))
            worker_cpu = pool.apply(time.process_time)  # everything the worker spent, its start-up included
            time.sleep(1.5)  # polled after its last work, even under load: CPU after the last poll is unseen
        helper_cpu = float(subprocess.run([sys.executable, "-c", burn + "\nimport time; time.sleep(1.5)"],
                                          capture_output=True, text=True, check=True).stdout)
        start = time.process_time()
        while time.process_time() - start < 0.5:
            pass
    cpu = account.summary()["cpu_s"]
    assert cpu["trials"] == pytest.approx(worker_cpu, abs=0.15)
    assert cpu["helpers"] >= helper_cpu - 0.15  # the burner, and the pool's resource tracker
    assert cpu["driver"] >= 0.5
    assert account.summary()["processes"]["trials"] == 1
