"""A command checks its input before it imports torch, Ray, MLflow or Optuna: each case runs in a fresh
interpreter and reads `sys.modules`, so a module-level import that comes back fails here (the times
themselves live in benchmarks/commands/startup.py, never in a test)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, params_for_tests

HEAVY = ("torch", "ray", "mlflow", "optuna")
NOT_FOR_STATUS = (*HEAVY, "pandas", "scipy")


def _loaded(code: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> dict:
    """Run `code` in a fresh interpreter; it sets `out` (JSON-able). Returns {"out": out, "heavy": [...]}:
    which of NOT_FOR_STATUS it imported."""
    script = (f"import json, sys\n{code}\n"
              f"print(json.dumps({{'out': out, 'heavy': sorted(m for m in {NOT_FOR_STATUS!r} if m in sys.modules)}}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["pipeline.cli.app", "pipeline.config", "pipeline.spaces", "pipeline.models",
                                    "pipeline.reporting.status", "pipeline.progress.running"])
def test_importing_the_command_layer_pulls_in_no_heavy_library(module: str) -> None:
    found = _loaded(f"import {module}\nout = None")
    assert found["heavy"] == [], f"`import {module}` imports {found['heavy']}"


def test_params_and_every_shipped_space_are_checked_without_torch_or_optuna() -> None:
    """What `ctsweep search` reads before Ray: params.yaml and the spaces of every built-in family."""
    code = (
        "from pathlib import Path\n"
        "from pipeline.config import load_params\n"
        "from pipeline.models.builtin import BUILTIN_FAMILIES\n"
        "from pipeline.spaces import load_space, space_path\n"
        f"root = Path({str(REPO)!r})\n"
        "load_params(root / 'params.yaml')\n"
        "out = sorted(f for f in BUILTIN_FAMILIES if space_path(root, f).is_file() and load_space(space_path(root, f), f))"
    )
    found = _loaded(code)
    assert len(found["out"]) >= 30, found["out"]  # the shipped spaces were read, not skipped
    assert [m for m in found["heavy"] if m in HEAVY] == []


def _project(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "search_spaces", tmp_path / "search_spaces")
    (tmp_path / "params.yaml").write_text(params_for_tests((REPO / "params.yaml").read_text()))
    return tmp_path


@pytest.mark.parametrize(("args", "edit", "message"), [
    (["search", "nosuch"], None, "'nosuch' is not in params.yaml `datasets`"),
    (["search", "japanese_vowels", "nosuch"], None, "'nosuch' is not in params.yaml `families`"),
    (["final", "nosuch"], None, "'nosuch' is not in params.yaml `datasets`"),
    (["classical", "nosuch"], None, "'nosuch' is not in params.yaml `prepare`"),
    (["promote", "--dataset", "nosuch", "--dry-run"], None, "'nosuch' is not in params.yaml `datasets`"),
    (["search", "japanese_vowels"], ("params.yaml", "  num_samples: 6", "  num_samples: six"), "num_samples"),
    (["check"], ("params.yaml", "  num_samples: 6", "  num_samples: six"), "num_samples"),
    (["search", "japanese_vowels"], ("search_spaces/cfc.yaml", "\n  hidden_size:", "\n  hiden_size:"), "hiden_size"),
    (["check"], ("search_spaces/cfc.yaml", "\n  hidden_size:", "\n  hiden_size:"), "hiden_size"),
])
def test_a_refusal_comes_before_the_heavy_imports(tmp_path: Path, args: list[str], edit: tuple | None,
                                                  message: str) -> None:
    """The command refuses in one line (exit 2) and has imported none of torch, Ray, MLflow, Optuna."""
    root = _project(tmp_path)
    if edit is not None:
        name, old, new = edit
        text = (root / name).read_text()
        assert old in text, f"{name} no longer holds {old!r}: update this test"
        (root / name).write_text(text.replace(old, new, 1))
    code = ("from typer.testing import CliRunner\n"
            "from pipeline.cli.app import app\n"
            f"r = CliRunner().invoke(app, {[*args, '--root', str(root)]!r})\n"
            "out = [r.exit_code, r.output]")
    found = _loaded(code, cwd=root)
    code_, output = found["out"]
    assert code_ == 2 and message in output, output
    assert [m for m in found["heavy"] if m in HEAVY] == [], f"{args}: imported {found['heavy']} before refusing"


def test_the_builtin_names_are_the_zoo() -> None:
    from pipeline.models.builtin import BUILTIN_FAMILIES
    from pipeline.models.zoo import MODELS

    assert BUILTIN_FAMILIES == tuple(MODELS), "pipeline/models/builtin.py and zoo.py list different families"


def test_the_signature_table_is_current() -> None:
    from pipeline.models import signatures

    shipped = json.loads(signatures.TABLE.read_text())
    assert shipped == signatures.live_table(), (f"pipeline/models/signatures.json differs from the zoo's classes: "
                                                f"run `{signatures.REWRITE}` and commit the table")


def test_a_table_signature_checks_like_the_class() -> None:
    """The table's parameters give the same answers as the class's: a bool for an int is refused."""
    from pipeline.config.arguments import argument_problem
    from pipeline.models.base import model_arguments
    from pipeline.models.signatures import signature
    from pipeline.models.zoo import MODELS

    for family, cls in MODELS.items():
        table = signature(family).arguments
        live = model_arguments(cls)
        assert list(table) == list(live), family
        for name, p in live.items():
            for value in (True, 3, 0.5, "x", None):
                assert argument_problem(table[name], value) == argument_problem(p, value), (family, name, value)


def _store(root: Path, status: str | None) -> None:
    """A real MLflow SQLite store at root/mlflow.db holding one run, terminated with `status` (None: left RUNNING)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    exp = client.create_experiment("ctsweep/japanese_vowels")
    run = client.create_run(exp)
    if status is not None:
        client.set_terminated(run.info.run_id, status)


@pytest.mark.parametrize(("status", "reads_mlflow"), [("FINISHED", False), ("FAILED", False), (None, True)])
def test_status_asks_mlflow_only_when_a_run_may_be_going_on(tmp_path: Path, status: str | None,
                                                            reads_mlflow: bool) -> None:
    _store(tmp_path, status)
    code = ("from pathlib import Path\n"
            "from pipeline.progress.running import running\n"
            f"out = len(running(Path({str(tmp_path)!r})))")
    found = _loaded(code, env={"MLFLOW_TRACKING_URI": ""})
    assert found["out"] == 0  # no ctsweep parent run: nothing to show either way
    assert ("mlflow" in found["heavy"]) is reads_mlflow, found["heavy"]


def test_status_of_another_store_asks_mlflow(tmp_path: Path) -> None:
    """A store that is not a readable SQLite file of MLflow's schema: MLflow answers, as before."""
    (tmp_path / "mlflow.db").write_bytes(b"not a database")
    from pipeline.progress.running import _none_running

    assert not _none_running(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not _none_running("http://127.0.0.1:5000")


def test_the_startup_benchmark_runs_every_case(tmp_path: Path) -> None:
    """benchmarks/commands/startup.py runs each case as a user would and checks its exit status (a case that
    stopped refusing, or started failing, stops the benchmark); its files hold one row per case."""
    from benchmarks.commands import startup

    report = startup.main(["--repeats", "1", "--code", str(REPO), "--out", str(tmp_path)])
    assert [r["case"] for r in report["rows"]] == [c[0] for c in startup.CASES]
    assert json.loads((tmp_path / "startup.json").read_text())["rows"] == report["rows"]
    assert (tmp_path / "startup.md").read_text().count("\n| ") == len(startup.CASES) + 1  # header and rows


@pytest.mark.parametrize("module", ["pipeline.sweep.trial", "pipeline.final.seeds"])
def test_a_trial_or_seed_process_imports_no_optuna_pandas_scipy_of_ours(module: str) -> None:
    """What a Ray worker imports to run a trial or a seed: torch, Ray Tune and MLflow it needs
    (MLflow's own package imports pandas); Optuna is the searcher's, on the driver only."""
    found = _loaded(f"import {module}\nout = None")
    assert "optuna" not in found["heavy"], f"`import {module}` imports Optuna"


def test_startup_tags_give_the_process_figures_to_its_first_trial_only() -> None:
    """pipeline/runtime/startup.py in a fresh interpreter: the imports stamped, two trials tagged."""
    code = (
        "import time\n"
        "t0 = time.time()\n"
        "import pipeline.sweep.trial\n"
        "from pipeline.runtime import startup\n"
        "entered = time.time()\n"
        "first = startup.tags(entered, entered + 0.5)\n"
        "second = startup.tags(entered + 1.0, entered + 1.25)\n"
        "out = {'first': first, 'second': second, 'before_import': entered - t0}"
    )
    found = _loaded(code)["out"]
    first, second = found["first"], found["second"]
    assert first["startup_trial_in_process"] == 1 and second["startup_trial_in_process"] == 2
    assert set(second) == {"startup_trial_in_process", "startup_setup_s"}
    assert {"startup_worker_s", "startup_imports_s", "startup_to_trial_s"} <= set(first)
    assert first["startup_setup_s"] == 0.5 and second["startup_setup_s"] == 0.25
    # the imports stamped are the trial module's (torch, MLflow, Ray Tune): more than nothing, no
    # more than the time from before the import to the trial; the trial came after them
    assert 0 < first["startup_imports_s"] <= found["before_import"]
    assert first["startup_to_trial_s"] >= 0
    assert first["startup_worker_s"] >= 0
