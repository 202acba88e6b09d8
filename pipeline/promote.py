"""The `promote` stage: register each dataset's best final model and move alias `champion`.

Per dataset the candidate is the family with the best mean validation metric. It is registered
as a new version of `ctsweep-<dataset>` carrying its metrics and config as tags; the alias moves
only when the candidate beats the current champion's mean validation metric by more than
`promote.min_improvement`, or when a person promotes a family by hand (`force`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from pipeline import tracking
from pipeline.config import PromoteParams
from pipeline.errors import CtsweepError
from pipeline.io import read_json, write_json
from pipeline.paths import final_result_path, reports_dir, require
from pipeline.report import best_family

ALIAS = "champion"


def registered_name(dataset: str) -> str:
    return f"ctsweep-{dataset}"


def _champion(client: MlflowClient, name: str) -> Any | None:
    try:
        return client.get_model_version_by_alias(name, ALIAS)
    except MlflowException:
        return None


def _beats(candidate: float, champion: float, mode: str, margin: float) -> bool:
    return candidate > champion + margin if mode == "max" else candidate < champion - margin


def _register(client: MlflowClient, name: str, record: dict[str, Any]) -> Any:
    try:
        client.create_registered_model(name, tags={"dataset": record["dataset"]})
    except MlflowException:
        pass  # already registered
    tags = {k: str(record[k]) for k in ("dataset", "family", "metric", "mode", "val_mean", "val_std",
                                         "test_mean", "test_std", "n_seeds", "model_seed")}
    tags["config"] = json.dumps(record["config"], sort_keys=True)
    return mlflow.register_model(record["model_uri"], name, tags=tags)


def promote_dataset(root: Path, dataset: str, families: list[str], p: PromoteParams,
                    family: str | None = None) -> dict[str, Any]:
    """Register the candidate of `dataset` and decide on the alias.

    With `family` given (a person's choice) the alias moves to that family's model
    unconditionally; the seed-count rule still applies.
    """
    if family is not None and family not in families:
        raise CtsweepError(f"family {family!r} has no final results for {dataset}; valid: {families}")
    finals = {f: read_json(require(final_result_path(root, dataset, f), f"ctsweep final {dataset} {f}"))
              for f in ([family] if family else families)}
    chosen = family or best_family(finals)
    record = finals[chosen]
    if record["n_seeds"] < p.seeds_required:
        raise CtsweepError(f"refusing to promote {dataset}/{chosen}: {record['n_seeds']} final seeds, "
                           f"promote.seeds_required is {p.seeds_required}")
    mlflow.set_tracking_uri(tracking.tracking_uri(root))
    client = MlflowClient()
    name = registered_name(dataset)
    current = _champion(client, name)
    version = _register(client, name, record)
    previous = float(current.tags["val_mean"]) if current is not None else None
    moved = (family is not None or previous is None
             or _beats(record["val_mean"], previous, record["mode"], p.min_improvement))
    if moved:
        client.set_registered_model_alias(name, ALIAS, version.version)
    return {"dataset": dataset, "registered_model": name, "candidate_family": chosen,
            "candidate_version": int(version.version), "candidate_val_mean": record["val_mean"],
            "previous_champion_version": int(current.version) if current is not None else None,
            "previous_champion_val_mean": previous, "alias_moved": moved, "by_hand": family is not None,
            "champion_version": int(version.version) if moved else int(current.version)}


def promote(root: Path, datasets: list[str], families: list[str], p: PromoteParams) -> list[dict[str, Any]]:
    """Apply the automatic rule to every dataset; writes reports/promotion.json."""
    decisions = [promote_dataset(root, d, families, p) for d in datasets]
    write_json(reports_dir(root) / "promotion.json", decisions)
    return decisions
