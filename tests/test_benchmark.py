"""The model-zoo benchmark (benchmarks/zoo/run.py): a quick run writes complete outputs.

Checks fields and structure, never timings: those depend on the machine.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.zoo import run as zoo  # noqa: E402
from benchmarks.zoo.data import DataSpec, synthetic_dataset  # noqa: E402
from benchmarks.zoo.measure import Job, run_job  # noqa: E402
from benchmarks.zoo.render import render_markdown  # noqa: E402

ROW_FIELDS = {"family", "status", "params", "seconds_per_epoch", "epoch_seconds", "train_mb", "peak_mb",
              "setup_seconds", "memory_method", "batch_size", "model_kwargs"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("zoo")
    report = zoo.main(["--quick", "--families", "cfc,ode_rnn", "--out", str(out)])
    return report, out


@pytest.mark.slow  # three measurement processes (about 15 s on an idle 2-core machine)
def test_quick_run_writes_every_output_with_its_fields(quick_run: tuple[dict, Path]) -> None:
    report, out = quick_run
    saved = json.loads((out / "zoo.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert {"date", "cpu", "cores", "torch", "torch_threads", "load_average"} <= set(saved["machine"])
    assert [r["family"] for r in saved["families"]] == ["cfc", "ode_rnn"]
    for row in saved["families"]:
        assert ROW_FIELDS <= set(row), row
        assert row["status"] == "ok", row
        assert row["params"] > 0 and row["seconds_per_epoch"] > 0 and row["train_mb"] >= 0
        assert len(row["epoch_seconds"]) == 1  # --quick: one timed epoch
    # The reference configurations, not the constructor defaults: CfC's paper width is 448.
    assert saved["families"][0]["model_kwargs"]["hidden_size"] == 448
    with open(out / "zoo.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["family"] for r in rows] == ["cfc", "ode_rnn"] and set(zoo.CSV_FIELDS) == set(rows[0])


@pytest.mark.slow
def test_quick_run_has_the_speedup_section(quick_run: tuple[dict, Path]) -> None:
    report, out = quick_run
    section = report["cfc_vs_ode_rnn"]
    assert section["ode_rnn"]["status"] == "ok", section["ode_rnn"]
    assert section["ode_rnn"]["model_kwargs"]["method"] == "rk4"
    labels = [p["label"] for p in section["pairs"]]
    assert labels == ["reference configurations", "CfC at hidden_size 64"]
    for pair in section["pairs"]:
        assert pair["cfc"]["status"] == "ok", pair["cfc"]
        expected = section["ode_rnn"]["seconds_per_epoch"] / pair["cfc"]["seconds_per_epoch"]
        assert pair["speedup"] == pytest.approx(expected)
    markdown = (out / "zoo.md").read_text()
    for heading in ("## Seconds per training epoch and memory", "## CfC speed-up over ODE-RNN",
                    "## Fast weight programmers"):
        assert heading in markdown
    assert "| cfc |" in markdown and "| ode_rnn |" in markdown
    assert report["fwp_adjoint"] == [] and "Not measured: no fast-weight family" in markdown


def test_fwp_section_selects_fast_weight_families_with_an_adjoint() -> None:
    assert zoo.fwp_families(["cfc", "ncde", "cde_fwp_delta", "ode_rnn"]) == ["cde_fwp_delta"]


def test_reference_config_splits_training_keys_from_model_kwargs() -> None:
    settings, model = zoo.reference_config("ode_rnn", batch_size=16)
    assert settings == {"lr": 0.005, "batch_size": 16}
    assert model["method"] == "rk4" and model["solver_steps"] == 3 and "lr" not in model


def test_unknown_family_is_rejected_with_the_valid_names() -> None:
    with pytest.raises(KeyError, match="valid"):
        zoo.parse_args(["--families", "cfc,no_such_model"])


def test_synthetic_dataset_is_seeded_irregular_and_padded() -> None:
    spec = DataSpec(sequences=16, length=10, channels=3, seed=1)
    a, b = synthetic_dataset(spec).splits["train"], synthetic_dataset(spec).splits["train"]
    assert a.x.shape == (16, 10, 3) and np.array_equal(a.x, b.x, equal_nan=True)
    other = synthetic_dataset(DataSpec(sequences=16, length=10, channels=3, seed=2)).splits["train"]
    assert not np.array_equal(a.t, other.t)
    lengths = a.mask.sum(1)
    assert lengths.max() == 10 and lengths.min() < 10  # some rows padded
    assert np.diff(a.t[0]).std() > 0  # irregular sampling
    assert np.isnan(a.x[a.mask]).any()  # missing values among the observed steps


def test_time_limit_and_bad_config_are_recorded_not_raised() -> None:
    data = {"sequences": 8, "length": 5, "channels": 2}
    timeout = run_job(Job("cfc", {"hidden_size": 8}, {"lr": 1e-3, "batch_size": 4}, data,
                          epochs=1, warmup=0, time_limit=0.0))
    assert timeout.status == "timeout" and timeout.params > 0 and not timeout.epoch_seconds
    bad = run_job(Job("cfc", {"hidden_size": 8, "no_such_arg": 1}, {"lr": 1e-3, "batch_size": 4}, data,
                      epochs=1, warmup=0))
    assert bad.status == "error" and "no_such_arg" in bad.error


def test_markdown_reports_missing_sections() -> None:
    report = {"machine": {"date": "d", "cpu": "c", "cores": 2, "torch_threads": 1, "torch": "t", "python": "p"},
              "settings": {"sequences": 1, "length": 2, "channels": 3, "batch_size": 32, "warmup": 0,
                           "epochs": 1, "adjoint_sequences": 4},
              "families": [{"family": "x", "status": "timeout", "error": "killed after 30 s"}],
              "cfc_vs_ode_rnn": None, "fwp_adjoint": []}
    markdown = render_markdown(report)
    assert "| x | – | – |" in markdown and "timeout: killed after 30 s" in markdown
    assert "Not measured: needs both cfc and ode_rnn" in markdown
