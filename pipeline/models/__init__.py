"""Model families: the registry maps a family name (= search space file name) to its class."""

from __future__ import annotations

from .base import SequenceModel
from .cde_fwp import DeltaCDEFWP, HebbCDEFWP, OjaCDEFWP
from .node_fwp import DeltaNODEFWP, HebbNODEFWP, OjaNODEFWP
from .cfc import CfC, CfCMMRNN, CfCNoGate, CfS
from .ltc import LTC
from .cdr_nde import CDRNDE, CDRNDEHeat
from .ncde import NeuralCDE
from .nrde import NeuralRDE
from .rde import RoughDeltaFWP, RoughHebbFWP, RoughOjaFWP
from .rde_node_fwp import RoughDeltaNODEFWP, RoughHebbNODEFWP, RoughOjaNODEFWP
from .ode_rnn import ODERNN
from .gru_ode import GRUODE
from .latent_ode import LatentODE, LatentODETW
from .tw_models import GRUODETW, NeuralCDETW, ODERNNTW
from .ct_rnn import CTRNN
from .gru_d import GRUD
from .lstm_dt import AugmentedLSTM
from .ode_lstm import ODELSTM

MODELS: dict[str, type[SequenceModel]] = {
    "cfc": CfC,
    "cfc_no_gate": CfCNoGate,
    "cf_s": CfS,
    "cfc_mmrnn": CfCMMRNN,
    "ltc": LTC,
    "cdr_nde": CDRNDE,
    "cdr_nde_heat": CDRNDEHeat,
    "ncde": NeuralCDE,
    "nrde": NeuralRDE,
    "rde_fwp_delta": RoughDeltaFWP,
    "rde_fwp_hebb": RoughHebbFWP,
    "rde_fwp_oja": RoughOjaFWP,
    "rde_node_fwp_delta": RoughDeltaNODEFWP,
    "rde_node_fwp_hebb": RoughHebbNODEFWP,
    "rde_node_fwp_oja": RoughOjaNODEFWP,
    "cde_fwp_delta": DeltaCDEFWP,
    "cde_fwp_hebb": HebbCDEFWP,
    "cde_fwp_oja": OjaCDEFWP,
    "node_fwp_hebb": HebbNODEFWP,
    "node_fwp_oja": OjaNODEFWP,
    "node_fwp_delta": DeltaNODEFWP,
    "ode_rnn": ODERNN,
    "ode_rnn_tw": ODERNNTW,
    "gru_ode": GRUODE,
    "gru_ode_tw": GRUODETW,
    "ncde_tw": NeuralCDETW,
    "latent_ode": LatentODE,
    "latent_ode_tw": LatentODETW,
    "ct_rnn": CTRNN,
    "ode_lstm": ODELSTM,
    "gru_d": GRUD,
    "lstm_dt": AugmentedLSTM,
}


def get_model_class(name: str) -> type[SequenceModel]:
    """Registry lookup, then the user families (pipeline/families/user.py); an unknown name raises
    KeyError listing the valid ones."""
    if name in MODELS:
        return MODELS[name]
    from pipeline.families.user import lookup  # late: it imports this package

    cls = lookup(name)
    if cls is None:
        raise KeyError(f"unknown model {name!r}; valid: {family_names()}")
    return cls


def family_names() -> list[str]:
    """Every family this process can build: the built-in ones and the registered user families."""
    from pipeline.families.user import names

    return sorted({*MODELS, *names()})


def is_family(name: str) -> bool:
    """Whether `name` is a built-in or registered user family (entry points count once registered)."""
    return name in family_names()


__all__ = ["MODELS", "SequenceModel", "family_names", "get_model_class", "is_family"]
