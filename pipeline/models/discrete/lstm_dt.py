"""Augmented LSTM: an LSTM whose input is the observation and its elapsed time, [x_k, dt_k].

The "lstm" baseline of Lechner & Hasani 2020 and the CfC paper (mlech26l/ode-lstms, node_cell.py,
LSTMCell fed the concatenation of the features and the elapsed time; forget gate biased by +1).

`code` chooses the initial weights: "torch" (default) PyTorch's, uniform in +-1/sqrt(hidden) for
every weight and bias; "keras" those of the authors' TensorFlow cell, which made the Walker2d and
Person Activity figures that CfC's Table 7 and CDR-NDE's Table 3 print (node_cell.py LSTMCell:
Glorot-uniform input kernel, orthogonal recurrent kernel, zero biases; Keras' Dense read-out:
Glorot-uniform, zero bias). Their cell adds its +1 to the forget gate as a constant and starts the
bias at 0; starting a trainable bias at +1 is the same model and the same gradients.

nn.LSTM runs the whole sequence in one call (its step loop is in C++). That is exact for this
project's batches because the observed steps of each row are a prefix: the outputs up to a row's
last observed step never see its padding, and the steps after it are replaced by the output at
that step, which is what holding the state there would give.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.models.base import SequenceModel, check_raw_inputs, last_valid_index


CODES = ("torch", "keras")  # whose initial weights: the module docstring


def keras_init(lstm: nn.LSTMCell | nn.LSTM, readout: nn.Linear) -> None:
    """Keras' initial weights for an LSTM and its Dense read-out (mlech26l/ode-lstms node_cell.py):
    Glorot-uniform input kernels (fan-in C, fan-out 4H, as Keras' one (C, 4H) kernel), orthogonal
    recurrent kernels, zero biases; the read-out Glorot-uniform with a zero bias."""
    with torch.no_grad():
        for name, weight in lstm.named_parameters():
            if name.startswith("weight_ih"):
                nn.init.xavier_uniform_(weight)
            elif name.startswith("weight_hh"):
                nn.init.orthogonal_(weight)
            else:
                nn.init.zeros_(weight)
        nn.init.xavier_uniform_(readout.weight)
        nn.init.zeros_(readout.bias)


def init_forget_bias(lstm: nn.LSTMCell | nn.LSTM, value: float) -> None:
    """Set the forget-gate bias (PyTorch gate order i, f, g, o) so that b_ih + b_hh = value."""
    hidden = lstm.hidden_size
    with torch.no_grad():
        for name, bias in lstm.named_parameters():
            if name.startswith("bias_"):
                bias[hidden : 2 * hidden] = value if name.startswith("bias_ih") else 0.0


def held_index(mask: torch.Tensor) -> torch.Tensor:
    """(B, L) prefix mask -> (B, L) long: each step's index, or the last observed one after it."""
    steps = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.minimum(steps, last_valid_index(mask).unsqueeze(1))


class AugmentedLSTM(SequenceModel):
    """forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    `code`: "torch" (default) or "keras", the module docstring's initial weights.

    `mask` must be a prefix of each row (the contract of prepared splits); a row with a gap
    raises ValueError, since nn.LSTM could not hold the state across it.
    """

    representation = "raw"

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        forget_bias: float = 1.0,
        code: str = "torch",
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        if code not in CODES:
            raise ValueError(f"unknown code {code!r}; valid: {list(CODES)}")
        self.hidden_size, self.code = hidden_size, code
        self.lstm = nn.LSTM(input_channels + 1, hidden_size, batch_first=True)
        self.readout = nn.Linear(hidden_size, output_size)
        if code == "keras":  # after the torch draws, so that the default's weights stay what they were
            keras_init(self.lstm, self.readout)
        init_forget_bias(self.lstm, forget_bias)

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.input_channels)
        if (mask[:, 1:] & ~mask[:, :-1]).any():
            raise ValueError("AugmentedLSTM needs mask to be a prefix of each row (no gaps)")
        outputs, _ = self.lstm(torch.cat([x, dt.unsqueeze(-1)], dim=-1))  # (B, L, H)
        index = held_index(mask)  # (B, L)
        if self.per_step:
            held = outputs.gather(1, index.unsqueeze(-1).expand_as(outputs))  # (B, L, H)
            return self.readout(held)
        return self.readout(outputs[torch.arange(len(index), device=x.device), index[:, -1]])
