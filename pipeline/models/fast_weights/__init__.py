"""Continuous-time fast weight programmers (Irie, Faccio & Schmidhuber 2022, NeurIPS): the learning
rules (rules.py, Eqs. 18-21 and 23-25), the slow net programming the fast weights
(programmer.py), the direct NODE variants (node.py), the CDE variants (cde.py) and both on
log-signature windows (rde.py, rde_node.py).

Imports: models.base, models.blocks.
"""

from pipeline.models.fast_weights.cde import DeltaCDEFWP, HebbCDEFWP, OjaCDEFWP
from pipeline.models.fast_weights.node import DeltaNODEFWP, HebbNODEFWP, OjaNODEFWP
from pipeline.models.fast_weights.rde import RoughDeltaFWP, RoughHebbFWP, RoughOjaFWP
from pipeline.models.fast_weights.rde_node import RoughDeltaNODEFWP, RoughHebbNODEFWP, RoughOjaNODEFWP

__all__ = [
    "DeltaCDEFWP", "DeltaNODEFWP", "HebbCDEFWP", "HebbNODEFWP", "OjaCDEFWP", "OjaNODEFWP", "RoughDeltaFWP",
    "RoughDeltaNODEFWP", "RoughHebbFWP", "RoughHebbNODEFWP", "RoughOjaFWP", "RoughOjaNODEFWP",
]
