"""Reproduction profiles: one per paper experiment, each the params that run it as published.

A profile is an overlay (`pipeline/profiles/<name>.yaml`) merged over a project's params.yaml:
`_cluster.yaml` first (the settings every reproduction shares: the reference trial only, no
robustness reruns, one GPU per trial), then the profile's own keys (its datasets, families, data
sizes, epochs and seeds). Mappings merge key by key, anything else (lists, numbers) replaces. The
result is validated like params.yaml itself, so a profile that does not fit the code fails here
with the usual one-line error, never on a cluster.

    ctsweep profile                      list the profiles
    ctsweep profile cfc-xor              print the merged params
    ctsweep profile cfc-xor --write      replace params.yaml with them (a hand-written one is kept
                                         as params.yaml.bak; a profile's output is not)

The search of a reproduction is its first trial, the paper's reference configuration for each
dataset (a search space's `reference`, pipeline/spaces/), run for one epoch to record it; the final
stage then trains that configuration over the paper's seeds for the paper's epochs.

Imports: errors, config, spaces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import Params, params_from, read_yaml
from pipeline.errors import ConfigError

FOLDER = Path(__file__).resolve().parent
SHARED = "_cluster"
HEADER = "# Reproduction profile "


def names() -> list[str]:
    """Every profile's name (its file's stem), sorted."""
    return sorted(p.stem for p in FOLDER.glob("*.yaml") if not p.stem.startswith("_"))


def path_of(name: str) -> Path:
    """The overlay file of profile `name`; an unknown name lists the valid ones."""
    if name not in names():
        raise ConfigError(f"unknown profile {name!r}; valid: {names()}")
    return FOLDER / f"{name}.yaml"


def describe(name: str) -> str:
    """The first line of the profile's header comment (what it reproduces)."""
    for line in path_of(name).read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`overlay` over `base`: mappings merge key by key (recursively), other values replace."""
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _overlay(path: Path) -> dict[str, Any]:
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of params.yaml sections, got {type(raw).__name__}")
    return raw


def merged(name: str, params_path: Path) -> dict[str, Any]:
    """params.yaml at `params_path` with the shared cluster settings and profile `name` over it."""
    base = _overlay(params_path)
    return merge(merge(base, _overlay(FOLDER / f"{SHARED}.yaml")), _overlay(path_of(name)))


def load(name: str, params_path: Path) -> tuple[dict[str, Any], Params]:
    """(the merged params as written to params.yaml, the same validated); errors name the profile."""
    raw = merged(name, params_path)
    return raw, params_from(raw, Path(f"profile {name} over {params_path}"))


def check_spaces(name: str, params: Params, root: Path) -> int:
    """Load every listed family's space for every listed dataset (its per-dataset reference and
    fixed values, and the profile's `search.fixed` over them); return the number of (dataset, family) pairs. Raises the space's ConfigError."""
    from pipeline.spaces import fix_values, load_space, space_path

    spaces = {family: load_space(space_path(root, family), family) for family in params.families}
    for dataset in params.datasets:
        for family, space in spaces.items():
            try:
                fix_values(space.for_dataset(dataset), params.search.fixed.get(family, {}))
            except ConfigError as exc:
                raise ConfigError(f"profile {name}: {exc}") from None
    return len(spaces) * len(params.datasets)


def to_yaml(name: str, raw: dict[str, Any]) -> str:
    """The merged params as a params.yaml, headed by where they came from."""
    import yaml

    head = f"{HEADER}`{name}` (pipeline/profiles/{name}.yaml over params.yaml): {describe(name)}\n"
    return head + yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100)
