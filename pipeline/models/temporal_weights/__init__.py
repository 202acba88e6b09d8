"""Neural ODEs with temporal weights (Kohan, Rietman & Siegelmann 2022): the weights rebuilt at the
solver's time t (weights.py, Eqs. 1-2), Eq. 2 as one autograd Function (fused.py), the weights
built ahead for every time a fixed-step solver asks for (stages.py), ODE-RNN, GRU-ODE and the
neural CDE with temporal weights in their fields (ode_models.py), and the Latent ODE with and
without them (latent_ode.py, the pair of the paper's Table 1a).

Imports: models.base, models.blocks, models.neural_de.
"""

from pipeline.models.temporal_weights.latent_ode import LatentODE, LatentODETW
from pipeline.models.temporal_weights.ode_models import GRUODETW, NeuralCDETW, ODERNNTW
from pipeline.models.temporal_weights.weights import TemporalLinear, TemporalMLP, TemporalWeights

__all__ = ["GRUODETW", "LatentODE", "LatentODETW", "NeuralCDETW", "ODERNNTW", "TemporalLinear", "TemporalMLP",
           "TemporalWeights"]
