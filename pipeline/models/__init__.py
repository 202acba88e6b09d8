"""The model zoo and its registry: every family a search can name, built-in or the user's own.

    base.py            the contract every family follows (SequenceModel; user families subclass it)
    blocks/            building blocks several lineages share: the CDE path and solver helpers,
                       log-signature windows, the token embedding
    cfc/               closed-form continuous-time networks and LTC (Hasani et al. 2022)
    fast_weights/      continuous-time fast weight programmers (Irie, Faccio & Schmidhuber 2022)
    cdr_nde/           continuous-depth recurrent neural DEs (Anumasa, Gunapati & Srijith)
    temporal_weights/  neural ODEs with temporal weights (Kohan, Rietman & Siegelmann 2022)
    neural_de/         the ODE/CDE/RDE baselines (ODE-RNN, GRU-ODE, CT-RNN, ODE-LSTM, NCDE, NRDE)
    discrete/          the discrete-time baselines (GRU-D, LSTM fed the elapsed time)
    zoo.py             MODELS: the built-in families, name -> class
    builtin.py         their names, without importing them (the checks a command makes first)
    signatures.py      their constructor arguments as a table (signatures.json), without torch
    user.py            families from user code (params.yaml `user_families`, entry points)

Imports: errors, names.

Inside, the order of pipeline.LAYERS: base, blocks, the discrete and then the ODE/CDE/RDE
baselines, the four papers' lineages (which never import one another), the zoo, user families,
and this registry on top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.models import user
from pipeline.models.builtin import BUILTIN_FAMILIES

if TYPE_CHECKING:
    from pipeline.models.base import SequenceModel


def get_model_class(name: str) -> type[SequenceModel]:
    """Registry lookup, then the user families (pipeline/models/user.py); an unknown name raises
    KeyError listing the valid ones."""
    from pipeline.models.zoo import MODELS

    if name in MODELS:
        return MODELS[name]
    cls = user.lookup(name)
    if cls is None:
        raise KeyError(f"unknown model {name!r}; valid: {family_names()}")
    return cls


def family_names() -> list[str]:
    """Every family this process can build: the built-in ones and the registered user families
    (the built-in ones by name: no model is imported)."""
    return sorted({*BUILTIN_FAMILIES, *user.names()})


def is_family(name: str) -> bool:
    """Whether `name` is a built-in or registered user family (entry points count once registered)."""
    return name in family_names()


def __getattr__(name: str) -> Any:
    """MODELS and SequenceModel on first use (PEP 562): `import pipeline.models.user`, which params.yaml
    loading needs, runs this package's body and must not pay for torch and every lineage."""
    if name == "MODELS":
        from pipeline.models.zoo import MODELS

        return MODELS
    if name == "SequenceModel":
        from pipeline.models.base import SequenceModel

        return SequenceModel
    raise AttributeError(f"module 'pipeline.models' has no attribute {name!r}")


__all__ = ["MODELS", "SequenceModel", "family_names", "get_model_class", "is_family"]
