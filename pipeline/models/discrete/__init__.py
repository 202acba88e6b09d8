"""The discrete-time baselines: GRU-D (Che et al. 2018, gru_d.py) and an LSTM fed the elapsed time
beside each observation (Lechner & Hasani 2020, lstm_dt.py).

Imports: models.base.
"""

from pipeline.models.discrete.gru_d import GRUD
from pipeline.models.discrete.lstm_dt import AugmentedLSTM

__all__ = ["GRUD", "AugmentedLSTM"]
