"""Model families: the registry maps a family name (= search space file name) to its class."""

from __future__ import annotations

from .base import SequenceModel
from .cde_fwp import DeltaCDEFWP
from .cfc import CfC
from .ncde import NeuralCDE
from .ode_rnn import ODERNN

MODELS: dict[str, type[SequenceModel]] = {
    "cfc": CfC,
    "ncde": NeuralCDE,
    "cde_fwp_delta": DeltaCDEFWP,
    "ode_rnn": ODERNN,
}


def get_model_class(name: str) -> type[SequenceModel]:
    """Registry lookup; an unknown name raises KeyError listing the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid: {sorted(MODELS)}") from None


__all__ = ["MODELS", "SequenceModel", "get_model_class"]
