"""benchmarks/papers/run_state.py: a reproduction's finished seeds archived from a real MLflow store
and put back where the final stage finds them again."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.papers import run_state


def _project(root: Path) -> None:
    """A project whose store holds one finished seed, one killed seed and their parent."""
    root.mkdir(parents=True)
    (root / "dvc.yaml").write_text("stages: {}\n")
    (root / "results" / "physionet2012" / "search").mkdir(parents=True)
    (root / "results" / "physionet2012" / "search" / "gru_d.json").write_text("{}")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    exp = client.create_experiment("ctsweep/physionet2012", artifact_location=(root / "mlartifacts").as_uri())
    parent = client.create_run(exp, tags={"stage": "final", "family": "gru_d"}, run_name="final/gru_d").info.run_id
    for seed, status in ((0, "FINISHED"), (1, "KILLED")):
        run = client.create_run(exp, tags={"stage": "final", "family": "gru_d", "seed": str(seed),
                                           "mlflow.parentRunId": parent}, run_name=f"seed-{seed}/final/gru_d")
        for key, value in (("final_val", 0.85 + seed / 100), ("final_test", 0.81), ("best_epoch", 11),
                           ("seconds_per_epoch", 27.0)):
            client.log_metric(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id, status)


def test_save_lists_only_finished_seeds_and_restore_puts_the_store_back(tmp_path: Path) -> None:
    root = tmp_path / "project"
    _project(root)
    manifest = run_state.save(root, tmp_path / "kept", commit="abc123")
    assert [(s["family"], s["seed"], s["val"]) for s in manifest["finished_seeds"]] == [("gru_d", 0, 0.85)]
    assert json.loads((tmp_path / "kept" / "seeds.json").read_text()) == manifest["finished_seeds"]
    assert "| gru_d | 0 | 0.8500 | 0.8100 | 11 | 27.0 |" in (tmp_path / "kept" / "seeds.md").read_text()
    with tarfile.open(tmp_path / "kept" / "run-state.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"mlflow.db", "results", run_state.MANIFEST} <= names and not any(n.startswith("data/processed") for n in names)

    # another folder is refused (MLflow's artifact paths are whole), as is one that still has a store
    with pytest.raises(SystemExit, match="saved from"):
        run_state.restore(tmp_path / "kept" / "run-state.tar.gz", tmp_path / "elsewhere")
    with pytest.raises(SystemExit, match="already there"):
        run_state.restore(tmp_path / "kept" / "run-state.tar.gz", root)

    for name in ("mlflow.db", "results"):  # a fresh copy of the code in the same folder
        path = root / name
        path.unlink() if path.is_file() else shutil.rmtree(path)
    run_state.restore(tmp_path / "kept" / "run-state.tar.gz", root)
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("ctsweep/physionet2012")
    finished = client.search_runs([exp.experiment_id], "tags.seed = '0' and attributes.status = 'FINISHED'")
    assert [r.data.metrics["final_val"] for r in finished] == [0.85]
    assert (root / "results" / "physionet2012" / "search" / "gru_d.json").is_file()
