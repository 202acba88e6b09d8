"""Model inputs built once, not once per trial: precomputed in `prepare`, or cached on first use.

Interpolation coefficients and log-signature windows cost seconds to minutes on a large dataset
(EigenWorms' depth-2 log-signatures, Speech Commands' splines), and every trial of a search
would otherwise rebuild the same tensors. A family's `prepare_inputs` depends only on the split
and on the few model arguments it lists in `input_arguments`, so those name the result:

    data/processed/<dataset>/inputs/<key>/<split>.pt   written by prepare (`precompute` in
                                                      params.yaml), versioned with the dataset
    data/cache/<dataset>/<fingerprint>/<key>/<split>.pt  written by the first trial that needs
                                                      it; fingerprint: identity.py

key = "<representation>[-<arg>=<value>...]", for example "logsig-logsig_depth=2-logsig_step=4".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.data.contract import Split
from pipeline.data.identity import fingerprint
from pipeline.errors import ConfigError
from pipeline.models import SequenceModel, get_model_class
from pipeline.models.base import model_arguments


def input_key(cls: type[SequenceModel], model_kwargs: dict[str, Any]) -> str:
    """The name of the inputs `cls.prepare_inputs` builds with these arguments (defaults filled in)."""
    arguments = model_arguments(cls)
    parts = [cls.representation]
    for name in cls.input_arguments:
        parts.append(f"{name}={model_kwargs.get(name, arguments[name].default)}")
    return "-".join(parts)


def build_inputs(cls: type[SequenceModel], split: Split, model_kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A whole split -> the model's input tensors, computed now."""
    x, t, mask = (torch.from_numpy(np.ascontiguousarray(a)) for a in (split.x, split.t, split.mask))
    return cls.prepare_inputs(x, t, mask, **model_kwargs)


def _save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Atomic: trials running side by side may write the same file; each sees a whole one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(tensors, tmp)
    os.replace(tmp, path)


def cache_dir(folder: Path) -> Path:
    """data/processed/<dataset> -> data/cache/<dataset>/<fingerprint>."""
    return folder.parent.parent / "cache" / folder.name / fingerprint(folder)


def precompute(folder: Path, splits: dict[str, Split], family: str, args: dict[str, Any]) -> str:
    """Write `family`'s inputs for every split into folder/inputs/<key>/; return the key.

    `args` may name only the arguments the family's prepare_inputs reads.
    """
    cls = get_model_class(family)
    unknown = sorted(set(args) - set(cls.input_arguments))
    if unknown:
        raise ConfigError(
            f"precompute for {family}: {unknown} do not change its inputs; allowed: {list(cls.input_arguments)}"
        )
    if cls.representation.startswith("raw"):
        raise ConfigError(f"precompute for {family}: its {cls.representation!r} inputs are cheap; nothing to precompute")
    key = input_key(cls, args)
    for name, split in splits.items():
        _save(build_inputs(cls, split, args), folder / "inputs" / key / f"{name}.pt")
    return key


def load_inputs(cls: type[SequenceModel], split_name: str, split: Split, model_kwargs: dict[str, Any],
                folder: Path | None) -> dict[str, torch.Tensor]:
    """Precomputed inputs if prepare wrote them, else the cache, else built now (and cached).

    Raw representations are cheap to build and are never cached. Without a folder (a dataset
    built in memory) nothing is read or written.
    """
    if folder is None or cls.representation.startswith("raw"):
        return build_inputs(cls, split, model_kwargs)
    key = input_key(cls, model_kwargs)
    for path in (folder / "inputs" / key / f"{split_name}.pt", cache_dir(folder) / key / f"{split_name}.pt"):
        if path.exists():
            return torch.load(path, weights_only=True)
    tensors = build_inputs(cls, split, model_kwargs)
    _save(tensors, cache_dir(folder) / key / f"{split_name}.pt")
    return tensors
