"""Datasets share the cluster (issue 32): `ctsweep search D` / `ctsweep final D` take on the
out-of-date families of params.yaml's other prepared datasets in the same Ray run
(`search.share_datasets`, `final.share_datasets`). Each (dataset, family) keeps its own study,
rungs, MLflow parent run and result file, and finds what it finds alone, trial for trial; under
`dvc repro` the later datasets' stages find their results current, and a change to one dataset
reruns that dataset's stages only. Real Ray Tune, Optuna, MLflow and DVC throughout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.cli.sharing import siblings
from pipeline.config import FinalParams, SearchParams, XorParams
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.final.stage import final_datasets
from pipeline.stores import tracking
from pipeline.stores.locks import stage_lock
from pipeline.stores.paths import final_result_path, processed_dir, search_result_path
from pipeline.sweep.search import search_datasets, search_many
from tests.conftest import REPO, default_params, stages_run, write_params
from tests.test_concurrent_search import _spans
from tests.test_end_to_end import _env

FAMILY = "cfc"


def _xor(root: Path, name: str, seed: int) -> None:
    save_dataset(processed_dir(root, name), build_xor(name, XorParams(kind="xor", n_train=64, n_test=16, seed=seed)))


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(a0 < b1 and b0 < a1 for a0, a1 in a for b0, b1 in b)


def _trials(record: dict) -> list[tuple]:
    """What a search found, trial by trial: its sampled configuration and its scores."""
    return sorted((t["repeat"], t["number"], json.dumps(t["config"], sort_keys=True), t["best_val"], t["best_epoch"],
                   t["epochs"], t["status"]) for t in record["trials"])


def test_siblings_are_the_other_prepared_datasets_in_params_order(tmp_path: Path) -> None:
    for name, seed in (("c", 1), ("a", 2)):
        _xor(tmp_path, name, seed)
    assert siblings(tmp_path, ["a", "b", "c"], "a", True) == ["c"]  # b is not prepared: left to its own stage
    assert siblings(tmp_path, ["c", "b", "a"], "b", True) == ["c", "a"]
    assert siblings(tmp_path, ["a", "b", "c"], "a", False) == []


def test_a_refusal_of_the_searched_dataset_is_the_only_line_beside_a_left_optional_one(
        project: Path, capsys: pytest.CaptureFixture) -> None:
    """An optional dataset left to its own search is said once every check has passed: when a
    later check refuses the search itself, the refusal is the one line (before Ray starts)."""
    from pipeline.errors import CtsweepError

    for name, seed in (("a", 5), ("busy", 7)):
        _xor(project, name, seed)
    (project / "blocked").write_text("")  # a file where the search's storage folder would go
    p = SearchParams(num_samples=3, max_concurrent=1, epochs=2, n_startup_trials=1,
                     storage_path=str(project / "blocked" / "ray"))
    with stage_lock(project, "search", "busy", FAMILY), pytest.raises(CtsweepError) as refused:
        search_datasets(project, ["a"], [FAMILY], p, only_stale=True, optional=["busy"])
    assert "left to" not in capsys.readouterr().err
    assert "search.storage_path" in str(refused.value)  # the refusal names the key (its value may be cut)


@pytest.mark.slow
def test_two_datasets_search_in_one_run_and_find_what_they_find_alone(project: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture,
                                                                      local_ray: None) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name, seed in (("a", 5), ("b", 6), ("busy", 7)):
        _xor(project, name, seed)
    p = SearchParams(num_samples=3, max_concurrent=1, epochs=2, n_startup_trials=1)
    with stage_lock(project, "search", "busy", FAMILY):  # another driver holds it: left to its own stage
        shared = search_datasets(project, ["a"], [FAMILY], p, only_stale=True, optional=["b", "busy"])
    assert "busy left to `ctsweep search busy`" in capsys.readouterr().err
    assert set(shared) == {"a", "b"}
    a, b = shared["a"][FAMILY], shared["b"][FAMILY]
    assert a["ray_experiment_path"] == b["ray_experiment_path"]  # one Tune run for both datasets
    assert a["searched_with"] == b["searched_with"] == ["a/cfc", "b/cfc"]
    client = MlflowClient(tracking.tracking_uri(project))
    for name, record in ((n, r[FAMILY]) for n, r in shared.items()):
        parent = client.get_run(record["mlflow_parent_run_id"])
        assert parent.data.tags["dataset"] == name and parent.info.status == "FINISHED"
        assert client.get_experiment(parent.info.experiment_id).name.endswith(name)  # its own dataset's experiment
        assert json.loads(search_result_path(project, name, FAMILY).read_text()) == record
    # one trial of each dataset at a time (max_concurrent 1) on two CPUs: they must have overlapped
    assert _overlap(_spans(client, a["mlflow_parent_run_id"]), _spans(client, b["mlflow_parent_run_id"]))

    alone_root = tmp_path / "alone"
    shutil.copytree(project / "search_spaces", alone_root / "search_spaces")
    _xor(alone_root, "b", 6)
    alone = search_many(alone_root, "b", [FAMILY], p)[FAMILY]
    assert _trials(alone) == _trials(b) and alone["best_config"] == b["best_config"]
    assert alone["best_val"] == b["best_val"]

    again = search_datasets(project, ["b"], [FAMILY], p, only_stale=True, optional=["a"])
    assert again["b"][FAMILY].get("up_to_date") and again["a"][FAMILY].get("up_to_date")  # nothing to do

    f = FinalParams(seeds=[1, 2], epochs=2, patience=2, lr_factors=[])
    finals = final_datasets(project, ["a"], [FAMILY], f, only_stale=True, optional=["b", "busy"])
    assert "busy left to `ctsweep final busy`" in capsys.readouterr().err  # never searched: nothing to evaluate
    assert set(finals) == {"a", "b"} and all(finals[n][FAMILY]["n_seeds"] == 2 for n in ("a", "b"))
    assert _overlap(_spans(client, finals["a"][FAMILY]["mlflow_parent_run_id"]),
                    _spans(client, finals["b"][FAMILY]["mlflow_parent_run_id"]))
    kept = final_result_path(project, "b", FAMILY).read_bytes()
    rerun = final_datasets(project, ["b"], [FAMILY], f, only_stale=True, optional=["a"])
    assert rerun["b"][FAMILY].get("up_to_date") and final_result_path(project, "b", FAMILY).read_bytes() == kept


# --- dvc repro over two datasets -----------------------------------------------------------------------

DATASETS = ["xor_a", "xor_b"]


def _params(seed_b: int) -> dict:
    raw = default_params()
    base = raw["prepare"]["xor_event"]
    raw["prepare"] = {"xor_a": {**base, "n_train": 100, "n_test": 40},
                      "xor_b": {**base, "n_train": 100, "n_test": 40, "seed": seed_b}}
    raw.update(datasets=DATASETS, families=[FAMILY])
    raw["search"].update(num_samples=2, max_concurrent=1, epochs=2, n_startup_trials=1)
    raw["search"]["asha"]["grace_period"] = 1
    raw["final"].update(seeds=[0], epochs=2, patience=None, time_limit_s=None, lr_factors=[])
    raw["promote"]["seeds_required"] = 1
    return raw


def _repro(root: Path) -> str:
    """`dvc repro` up to the final stages: the sharing is the search and final stages' (the report
    and promotion of a whole run are the end-to-end test's)."""
    targets = [f"final@{d}" for d in DATASETS]
    done = subprocess.run(["dvc", "repro", *targets], cwd=root, env=_env(root), capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, f"dvc repro failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def _outputs(root: Path, dataset: str) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for stage in ("search", "final") for path in sorted((root / "results" / dataset / stage).glob("*.json"))}


@pytest.mark.timeout(900)
@pytest.mark.slow
def test_dvc_repro_shares_the_run_and_reruns_only_the_changed_dataset(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO / "search_spaces", root / "search_spaces")
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    shutil.copy(REPO / "references.yaml", root / "references.yaml")
    write_params(root, _params(seed_b=7))
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=root, env=_env(root), check=True)

    first = _repro(root)
    ran = stages_run(first)
    assert ran.index("prepare@xor_b") < ran.index("search@xor_a")  # DVC prepares every dataset first
    searched = {d: json.loads(search_result_path(root, d, FAMILY).read_text()) for d in DATASETS}
    assert searched["xor_a"]["ray_experiment_path"] == searched["xor_b"]["ray_experiment_path"]  # one Ray run
    own = first.split("Running stage 'search@xor_b'")[1].split("Running stage")[0]
    assert "xor_b/cfc: best val" in own and "(up to date: not searched again)" in own  # done by search@xor_a
    finals = {d: json.loads(final_result_path(root, d, FAMILY).read_text()) for d in DATASETS}
    assert all(finals[d]["n_seeds"] == 1 for d in DATASETS)
    kept_a = _outputs(root, "xor_a")

    write_params(root, _params(seed_b=8))  # only xor_b's data changes
    second = stages_run(_repro(root))
    assert {"prepare@xor_b", "search@xor_b", "final@xor_b"} <= set(second)
    assert not {"prepare@xor_a", "search@xor_a", "final@xor_a"} & set(second), second
    assert _outputs(root, "xor_a") == kept_a  # byte for byte
    b = json.loads(search_result_path(root, "xor_b", FAMILY).read_text())
    assert b["searched_with"] == [FAMILY] and b["ray_experiment_path"] != searched["xor_b"]["ray_experiment_path"]
