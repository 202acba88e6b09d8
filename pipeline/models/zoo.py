"""The built-in families: family name (= search-space file name, search_spaces/<name>.yaml) -> class.

One entry per family of the zoo, grouped by the lineage subpackage it comes from. User families
are not here: pipeline/models/user.py registers them, and pipeline.models looks in both.
"""

from __future__ import annotations

from pipeline.models.base import SequenceModel
from pipeline.models.cdr_nde import CDRNDE, CDRNDEHeat
from pipeline.models.cfc import LTC, CfC, CfCMMRNN, CfCNoGate, CfS
from pipeline.models.discrete import GRUD, AugmentedLSTM
from pipeline.models.fast_weights import (
    DeltaCDEFWP, DeltaNODEFWP, HebbCDEFWP, HebbNODEFWP, OjaCDEFWP, OjaNODEFWP, RoughDeltaFWP,
    RoughDeltaNODEFWP, RoughHebbFWP, RoughHebbNODEFWP, RoughOjaFWP, RoughOjaNODEFWP,
)
from pipeline.models.neural_de import CTRNN, GRUODE, ODELSTM, ODERNN, NeuralCDE, NeuralRDE
from pipeline.models.temporal_weights import GRUODETW, LatentODE, LatentODETW, NeuralCDETW, ODERNNTW

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
