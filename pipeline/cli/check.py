"""`ctsweep check`: everything a run would refuse at its start, without running anything.

It validates params.yaml (every section, the precompute specs and UEA archive names included),
the search space of every family listed in `families`, and the two stores a search writes (`search.storage_path`,
`search.optuna_storage`). It starts no Ray, writes and creates no file (an SQLite store is only
read), and fails on the first problem with the same one-line ConfigError a stage would give. A
dataset whose local copy holds only some of its raw files is a warning line
(pipeline/data/local_copy.py): the rest may still download.
On every dataset already prepared it runs the search's own checks of each family's space (the
reference and the corners of the space built by the model: pipeline.sweep.plans.checked_space).
The user families params.yaml declares are imported as every stage imports them: each module
tried first in a separate interpreter within CTSWEEP_IMPORT_TIMEOUT seconds (default 60), so one
that exits, crashes or hangs when imported is a one-line error too (pipeline/models/user.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pipeline.config import load_params, read_yaml
from pipeline.config.dvc_params import check_dvc_params
from pipeline.errors import ConfigError
from pipeline.names import shown


def check_project(root: Path) -> str:
    """Check the project at `root`; return a one-line summary, or raise a one-line ConfigError."""
    params = load_params(root / "params.yaml")
    check_dvc_params(root, read_yaml(root / "params.yaml"), root / "params.yaml")  # what `dvc repro` would stop at
    from pipeline.spaces import load_space, space_path  # reads the files without torch or Optuna

    n_params = sum(len(load_space(space_path(root, family), family).params) for family in params.families)
    # Late: aeon, torch, Optuna and pyarrow load only once params.yaml and the spaces have passed (a
    # bad file fails in well under a second).
    from pipeline.sweep.sensitivity import check_optuna_storage
    from pipeline.stores.ray_storage import check_storage_path

    for dataset, section in params.prepare.items():
        if section.kind == "uea":  # the archive's name: `prepare` checks it too, before any download
            _check_uea_name(root / "params.yaml", dataset, section.name)
    from pipeline.data.local_copy import partial_copies

    for line in partial_copies(root, params):  # a warning: the rest may still download
        print(f"ctsweep: warning: {line}", file=sys.stderr)
    prepared = _corners(root, params)
    storage = check_storage_path(root, params.search.storage_path)
    optuna_url = check_optuna_storage(root, params.search.optuna_storage)
    precompute = sum(len(getattr(p, "precompute", ())) for p in params.prepare.values())
    return (f"ok: {root / 'params.yaml'}: {len(params.datasets)} dataset(s) ({len(params.prepare)} defined, "
            f"{precompute} precompute spec(s)), {len(params.families)} family search space(s) with {n_params} "
            f"searched params, checked on the {len(prepared)} prepared dataset(s) as the search checks them"
            f"{_unprepared(params.datasets, prepared)}; storage {storage}; optuna storage "
            f"{_without_password(optuna_url)}")


def _corners(root: Path, params: Any) -> list[str]:
    """Every family's space on every prepared dataset of `datasets`, as `ctsweep search` checks it
    before Ray starts (pipeline.sweep.plans.checked_space: the reference and the corners of the
    space built by the model, the protocol, tokens); the prepared datasets' names."""
    from pipeline.data.contract import load_meta
    from pipeline.stores.paths import processed_dir
    from pipeline.sweep.plans import checked_space

    prepared = [d for d in params.datasets if (processed_dir(root, d) / "meta.json").is_file()]
    for dataset in prepared:
        meta = load_meta(processed_dir(root, dataset))
        for family in params.families:
            checked_space(root, dataset, family, params.search, meta)
    return prepared


def _unprepared(datasets: list[str], prepared: list[str]) -> str:
    missing = [d for d in datasets if d not in prepared]
    return f" ({', '.join(missing)}: not prepared yet, checked when searched)" if missing else ""


def _without_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _check_uea_name(path: Path, dataset: str, name: str) -> None:
    from pipeline.data.kinds.uea import archive_names

    if name not in archive_names():
        raise ConfigError(f"{path}: key `prepare.{dataset}.name`: unknown UCR/UEA dataset {shown(name)}; "
                          f"valid: the {len(archive_names())} names aeon lists, {sorted(archive_names(), key=str.lower)}")
