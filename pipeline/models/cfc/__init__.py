"""Closed-form continuous-time networks (Hasani et al. 2022, Nature Machine Intelligence): the
cells of Eqs. 9-10 (cells.py), the four CfC families (cfc.py), and the liquid time-constant
network whose ODE they solve in closed form (Hasani et al. 2021, ltc.py).

Imports: models.base, models.blocks.
"""

from pipeline.models.cfc.cfc import CfC, CfCMMRNN, CfCNoGate, CfS
from pipeline.models.cfc.ltc import LTC

__all__ = ["CfC", "CfCMMRNN", "CfCNoGate", "CfS", "LTC"]
