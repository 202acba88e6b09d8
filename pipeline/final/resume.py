"""Resuming an interrupted final stage: its parent run found again, its finished seeds kept.

A final stage that was interrupted (SIGINT, SIGTERM, a killed driver, a failed seed) leaves its
MLflow parent run without the complete tag. Running the stage again with the same inputs (the
fingerprint: the searched configuration, seeds, epochs, lr factors and the processed data)
reopens that parent and trains only the seeds that have no FINISHED run under it; a finished
seed's scores and learning curve are read back from its run, and its best-validation weights
from the run's artifact `best_state/state.pt` (needed if it turns out to be the best seed,
whose model is logged for promotion).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import torch

from pipeline.final.counts import counts_from_metrics
from pipeline.runtime import machine
from pipeline.stores import tracking
from pipeline.config import FinalParams
from pipeline.data.identity import fingerprint as data_fingerprint
from pipeline.sweep import run_lookup

COMPLETE_TAG = "final_complete"
STATE_ARTIFACT = "best_state"  # folder of a nominal seed's run holding state.pt
_SCORES = ("final_val", "final_test", "num_params", "seconds_per_epoch")


def fingerprint(dataset: str, family: str, searched: dict[str, Any], p: FinalParams, data_dir: Path) -> str:
    """What a final evaluation's results depend on; equal fingerprints may share finished seeds."""
    blob = json.dumps({"dataset": dataset, "family": family, "config": searched["best_config"],
                       "repeats": [r.get("best_config") for r in searched.get("repeats", [])],
                       "search_run": searched.get("mlflow_parent_run_id"), "seeds": p.seeds, "epochs": p.epochs,
                       "patience": p.patience, "time_limit_s": p.time_limit_s, "lr_factors": p.lr_factors,
                       "data": data_fingerprint(data_dir),
                       # only when set: a stage run before the floor existed trained with none (1)
                       **({"min_steps": p.min_steps} if p.min_steps != 1 else {}),
                       **({"validation": p.validation} if p.validation != "prepared" else {})}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def open_parent(client: tracking.MlflowClient, exp_id: str, dataset: str, family: str, fp: str,
                params: dict[str, Any]) -> tuple[str, bool]:
    """(parent run id, resumed): the unfinished final run with this fingerprint, reopened, else a new one."""
    tags = {"dataset": dataset, "family": family, "stage": "final", "final_fingerprint": fp}
    previous = run_lookup.find_unfinished_parent(client, exp_id, tags, COMPLETE_TAG)
    if previous is not None:
        run_id = previous.info.run_id
        client.update_run(run_id, status="RUNNING")
        tracking.set_tags(client, run_id, {"attempts": int(previous.data.tags.get("attempts", "1")) + 1,
                                           tracking.RUN_LEVEL_TAG: tracking.PARENT_LEVEL})
        for stale in ("interrupted", "error"):  # it runs again; the earlier outcome is in `attempts`
            if stale in previous.data.tags:
                client.delete_tag(run_id, stale)
        return run_id, True
    parent = tracking.start_run(client, exp_id, f"final/{family}", tags)
    tracking.log_params(client, parent, params)
    return parent, False


REPEAT_TAG = "search_repeat"  # which repeat of the search found the configuration a seed trains


def seed_key(seed: int, lr_factor: float, repeat: int = 0) -> tuple[int, str, int]:
    """A seed run's identity: the factor as its `lr_factor` tag spells it (`:g`), so a factor read
    back from a tag matches the one in params.yaml, and the search repeat whose best it trains."""
    return int(seed), f"{lr_factor:g}", int(repeat)


def _key(run: Any) -> tuple[int, str, int] | None:
    tags = run.data.tags
    try:
        return seed_key(int(tags["seed"]), float(tags.get("lr_factor", "1")), int(tags.get(REPEAT_TAG, "0")))
    except (KeyError, ValueError):
        return None


STOP_TAG = "stop"  # why a seed's training ended: "patience", "max_epochs" or "time_limit"


def finished_seeds(client: tracking.MlflowClient, exp_id: str, parent: str) -> dict[tuple[int, str, int], dict[str, Any]]:
    """{seed_key: the seed's result as train_seed returns it, without weights} for every
    FINISHED child run that logged all its scores (a nominal seed also its weights)."""
    found: dict[tuple[int, str, int], dict[str, Any]] = {}
    for run in run_lookup.children(client, exp_id, parent):
        key = _key(run)
        metrics = run.data.metrics
        if run.info.status != "FINISHED" or key is None or not all(k in metrics for k in _SCORES):
            continue
        nominal = "lr_factor" not in run.data.tags
        if nominal and run.data.tags.get(STATE_ARTIFACT) != "true":
            continue  # finished before its weights were kept: train it again
        curve = run_lookup.metric_steps(client, run.info.run_id, "val_metric")
        losses = {name: run_lookup.metric_steps(client, run.info.run_id, name) for name in ("train_loss", "val_loss")}
        found[key] = {"seed": key[0], "lr_factor": float(key[1]), "repeat": key[2], "val": metrics["final_val"],
                      "test": metrics["final_test"], "num_params": int(metrics["num_params"]),
                      "seconds_per_epoch": metrics["seconds_per_epoch"],
                      "curve": [curve[s] for s in sorted(curve)], "mlflow_run_id": run.info.run_id,
                      "stop": run.data.tags.get(STOP_TAG, "max_epochs"),
                      # logged since the validation loss breaks ties of the metric (absent before)
                      "val_loss": metrics.get("final_val_loss"), "best_epoch": metrics.get("best_epoch"),
                      # logged since training counts optimiser steps (issue 29; absent before)
                      "steps": None if "steps" not in metrics else int(metrics["steps"]),
                      "steps_per_epoch": None if "steps_per_epoch" not in metrics else int(metrics["steps_per_epoch"]),
                      "train_loss_curve": [losses["train_loss"][s] for s in sorted(losses["train_loss"])],
                      "val_loss_curve": [losses["val_loss"][s] for s in sorted(losses["val_loss"])],
                      # logged since accuracy keeps its counts (absent before: the float scores stand)
                      **counts_from_metrics(metrics),
                      # tagged since results record their machine (absent before: None)
                      **dict(zip(("machine", "threads"), machine.from_tags(run.data.tags)))}
    return found


def save_state(client: tracking.MlflowClient, run_id: str, state: dict[str, torch.Tensor]) -> None:
    """Keep a nominal seed's best weights with its run, so a resumed stage need not retrain it."""
    with tempfile.TemporaryDirectory() as folder:
        torch.save(state, Path(folder) / "state.pt")
        client.log_artifact(run_id, str(Path(folder) / "state.pt"), STATE_ARTIFACT)
    tracking.set_tags(client, run_id, {STATE_ARTIFACT: "true"})


def load_state(tracking_uri: str, run_id: str) -> dict[str, torch.Tensor]:
    """The best weights a finished nominal seed kept (save_state)."""
    with tempfile.TemporaryDirectory() as folder:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"{STATE_ARTIFACT}/state.pt",
                                                   dst_path=folder, tracking_uri=tracking_uri)
        return torch.load(path, weights_only=True)
