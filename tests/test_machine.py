"""The machine results record (pipeline.runtime.machine): what describes it, its fingerprint, the
MLflow tags a trial or seed carries, and `ctsweep compare` naming another machine before the first
differing number."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pipeline.reporting.compare import compare_runs
from pipeline.runtime import machine

KEYS = {"cpu", "cpu_flags", "isa", "cores", "torch", "numpy", "blas", "python", "device"}


def _other_isa(described: dict) -> str:
    """An instruction set other than this machine's (an AVX2 machine's other is AVX512)."""
    return "AVX512" if described["isa"] == "AVX2" else "AVX2"


def test_the_description_names_the_cpu_its_kernels_the_libraries_and_the_device() -> None:
    d = machine.describe("cpu")
    assert set(d) == KEYS and d["device"] == "cpu" and d["torch"] == torch.__version__
    assert d["isa"] == torch.backends.cpu.get_cpu_capability() and len(d["cpu_flags"]) == 12
    assert d["blas"].startswith("torch: ") and "; numpy: " in d["blas"]
    assert machine.fingerprint(d) == machine.fingerprint(dict(reversed(list(d.items()))))  # order-free
    assert machine.fingerprint({**d, "isa": _other_isa(d)}) != machine.fingerprint(d)


def test_tags_round_trip_and_runs_without_them_read_as_none() -> None:
    tags = machine.run_tags(torch.device("cpu"), 3)
    assert machine.from_tags(tags) == (machine.describe("cpu"), 3)
    assert machine.from_tags({}) == (None, None)
    assert machine.from_tags({machine.MACHINE_TAG: "{not json", machine.THREADS_TAG: "x"}) == (None, None)
    found = machine.Machines([machine.describe("cpu"), None, machine.describe("cpu")])
    assert list(found.described) == [machine.fingerprint(machine.describe("cpu"))] and found.name(None) is None


def _root(root: Path, described: dict, score: float) -> Path:
    name = machine.fingerprint(described)
    record = {"status": "ok", "best_val": score, "machines": {name: described},
              "trials": [{"number": 0, "best_val": score, "machine": name, "threads": 1}]}
    path = root / "results" / "d" / "search" / "cfc.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return root


def test_compare_names_another_machine_before_the_first_differing_number(tmp_path: Path) -> None:
    here = machine.describe("cpu")
    there = {**here, "cpu": "Some Other CPU", "isa": _other_isa(here)}
    a, b = _root(tmp_path / "a", here, 0.91), _root(tmp_path / "b", there, 0.90)
    first, *rest = compare_runs(a, b)
    assert str(first).startswith("machine: another machine (differing: cpu, isa): ")
    assert f"{here['cpu']}, {here['isa']}" in str(first) and f"Some Other CPU, {there['isa']}" in str(first)
    assert any(d.key == "best_val" for d in rest)  # the numbers follow
    same = _root(tmp_path / "c", here, 0.90)
    assert [d.key for d in compare_runs(a, same)] == ["best_val", "trials[0].best_val"]  # no machine line
