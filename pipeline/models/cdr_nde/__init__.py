"""Continuous-depth recurrent neural differential equations (Anumasa, Gunapati & Srijith): CDR-NDE
and CDR-NDE-heat (cdr_nde.py) and their depth field as one autograd Function (depth_rate.py).

Imports: models.base, models.blocks.
"""

from pipeline.models.cdr_nde.cdr_nde import CDRNDE, CDRNDEHeat

__all__ = ["CDRNDE", "CDRNDEHeat"]
