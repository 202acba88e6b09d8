"""Neural rough differential equation, Morrill et al. 2021 (ICML, "Neural rough differential
equations for long time series"), the log-ODE method as computed in their Section 3 ("Method"):

    z(0) = zeta(t_0, x_0),    dz/ds = f(z(s)) logsig_k    for s in [k, k + 1],    y = l(z(W))

with logsig_k the depth-1 or depth-2 log-signature of the path [t, x] over window k (`logsig_step`
observation steps), one unit of solver time per window, and f(z) a (hidden, D) matrix. This is
the Neural CDE of ncde.py driven by the piecewise-linear path of cumulative log-signatures
(logsig.py), whose derivative on window k is logsig_k; its knot 0 is the paper's L_0 (the
log-signature of the straight line from 0 to [t_0, x_0]: [t_0, x_0, 0 ..]), so the NCDE's initial
layer is the NRDE's zeta (the reference's initial Linear on [t_0, x_0]).

Differences from the reference code (jambo6/neuralRDEs, ncdes/model.py): the vector field is the
NCDE's (ReLU MLP with a final tanh on the (hidden, D) output), where the reference applies tanh
before its last Linear and repeats one shared hidden layer; a trailing partial window is kept (see
logsig.py). Depth 3, which the paper also runs, is not offered.
"""

from __future__ import annotations

from pipeline.models.blocks.logsig import LogSigInputs
from pipeline.models.neural_de.ncde import NeuralCDE


class NeuralRDE(LogSigInputs, NeuralCDE):
    """forward(coeffs (B, W+1, D), last (B,) in windows, mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    Arguments: logsig_depth, logsig_step (LogSigInputs) and those of NeuralCDE except
    `interpolation`; the solver's step_fraction is in windows.
    """
