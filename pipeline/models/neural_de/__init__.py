"""The ODE/CDE/RDE baselines: ODE-RNN (Rubanova et al. 2019), GRU-ODE and the neural CDE (Kidger
et al. 2020), the neural RDE (Morrill et al. 2021), CT-RNN and ODE-LSTM (Lechner & Hasani 2020).

Imports: models.base, models.blocks, models.discrete.
"""

from pipeline.models.neural_de.ct_rnn import CTRNN
from pipeline.models.neural_de.gru_ode import GRUODE
from pipeline.models.neural_de.ncde import NeuralCDE
from pipeline.models.neural_de.nrde import NeuralRDE
from pipeline.models.neural_de.ode_lstm import ODELSTM
from pipeline.models.neural_de.ode_rnn import ODERNN

__all__ = ["CTRNN", "GRUODE", "NeuralCDE", "NeuralRDE", "ODELSTM", "ODERNN"]
