"""The built-in families' names, and the embedding's key, without importing a model.

A command checks a family name, params.yaml and the search spaces before it imports torch
(`ctsweep search nosuch` answers in well under a second); this module is what those checks read.
pipeline/models/zoo.py maps each name to its class, and tests/test_startup.py checks that the two
list the same families, in the same order.
"""

from __future__ import annotations

import inspect

BUILTIN_FAMILIES: tuple[str, ...] = (
    "cfc", "cfc_no_gate", "cf_s", "cfc_mmrnn", "ltc",
    "cdr_nde", "cdr_nde_heat",
    "ncde", "nrde",
    "rde_fwp_delta", "rde_fwp_hebb", "rde_fwp_oja", "rde_node_fwp_delta", "rde_node_fwp_hebb", "rde_node_fwp_oja",
    "cde_fwp_delta", "cde_fwp_hebb", "cde_fwp_oja", "node_fwp_hebb", "node_fwp_oja", "node_fwp_delta",
    "ode_rnn", "ode_rnn_tw", "gru_ode", "gru_ode_tw", "ncde_tw", "latent_ode", "latent_ode_tw",
    "ct_rnn", "ode_lstm", "gru_d", "lstm_dt",
)

EMBED_DIM = "embed_dim"  # a model key of the embedding, not of the family (CfC Table S3 `embed_dim`)


def embedding_arguments_of(representation: str) -> dict[str, inspect.Parameter]:
    """The keys a space may set for the embedding in front of a family reading `representation`:
    `embed_dim` (None: the dataset's embedding_size), for the families that can read an embedding
    at all (those of the plain "raw" representation)."""
    if representation != "raw":
        return {}
    return {EMBED_DIM: inspect.Parameter(EMBED_DIM, inspect.Parameter.KEYWORD_ONLY, default=None,
                                         annotation="int | None")}
