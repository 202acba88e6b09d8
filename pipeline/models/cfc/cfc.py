"""Closed-form continuous-time networks (Hasani et al. 2022, Nature Machine Intelligence).

Four families, stepping through the observations of each sequence with the elapsed time dt
between observations as an input (the equations are in _cfc_cells.py):

    CfC          Eq. 10, time-continuous sigmoid gate between two candidate states
    CfCNoGate    the ablation without the (1 - gate) factor
    CfS          Eq. 9, the direct closed-form solution ("Cf-S", official flag `minimal`)
    CfCMMRNN     CfC as the continuous-time state of an LSTM ("CfC-mmRNN", flag `use_mixed`)

Options of the official configurations that change the model are arguments: `time_scale` (tau:
dt is multiplied by it before it reaches the cell) and `init_gain` (xavier-uniform gain, `init`).
`code` says which of the authors' two implementations the cells follow: "torch" (torch_cfc.py,
the default; PhysioNet's Table S2) or "keras" (tf_cfc.py, which made Tables S1, S3 and S4: XOR,
IMDB, Walker2d); cells.py lists what differs.

`missing_values` says what a step reads where a channel was not measured:
    "zero"           0, the standardised training mean (C inputs per step);
    "last_and_mask"  the channel's last measured value (0 before its first) and a 0/1 flag of
                     whether it was measured at this step (2C inputs per step). This is the
                     authors' PhysioNet input (raminmh/CfC train_physio.py builds the model with
                     `in_features=41 * 2`; torch_cfc.py Cfc.forward carries `forwarded_input`
                     forward where mask is 0 and concatenates the mask). The paper does not
                     print it; Table S2's configurations were tuned with it, so the PhysioNet
                     references use it.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.models.cfc.cells import ACTIVATIONS, CODES, Backbone, CfCCell, CfSCell, CfSEq9Cell, MemoryLSTMCell
from pipeline.models.base import SequenceModel, check_raw_inputs, elapsed_times, gather_steps, last_valid_index

MISSING_VALUES = ("zero", "last_and_mask")


def last_observed_and_mask(x: torch.Tensor) -> torch.Tensor:
    """(N, L, C) values, NaN where not measured -> (N, L, 2C): per channel the last measured
    value up to each step (0 before the first, so the step reads no later value), then the
    0/1 flags of the channels measured at that step."""
    observed = ~torch.isnan(x)
    steps = torch.arange(x.shape[1], device=x.device).view(1, -1, 1).expand_as(x)
    last = torch.where(observed, steps, torch.full_like(steps, -1)).cummax(dim=1).values  # (N, L, C)
    carried = torch.nan_to_num(x, nan=0.0).gather(1, last.clamp(min=0))
    carried = torch.where(last >= 0, carried, torch.zeros_like(carried))
    return torch.cat([carried, observed.to(x.dtype)], dim=-1)


class _ClosedFormRNN(SequenceModel):
    """Shared arguments, validation and step loop.

    forward(x (B, L, C), dt (B, L), mask (B, L)) -> (B, output_size), or (B, L, output_size)
    with per_step; the per-sequence output is read at each row's last observed step. With
    `missing_values: last_and_mask`, x is (B, L, 2C).
    """

    representation = "raw"
    input_arguments = ("missing_values",)

    def __init__(
        self,
        *,
        input_channels: int,
        output_size: int,
        per_step: bool = False,
        hidden_size: int = 64,
        backbone_units: int = 64,
        backbone_layers: int = 1,
        backbone_activation: str = "silu",
        backbone_dropout: float = 0.0,
        time_scale: float = 1.0,
        init_gain: float = 1.0,
        missing_values: str = "zero",
        code: str = "torch",
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        if missing_values not in MISSING_VALUES:
            raise ValueError(f"unknown missing_values {missing_values!r}; valid: {list(MISSING_VALUES)}")
        if code not in CODES:
            raise ValueError(f"unknown code {code!r}; valid: {list(CODES)}")
        self.code = code
        # what one step reads: C values, or C carried values and C measured-flags
        self.step_channels = input_channels * (2 if missing_values == "last_and_mask" else 1)
        _check_positive(hidden_size=hidden_size, backbone_units=backbone_units,
                        backbone_layers=backbone_layers, time_scale=time_scale, init_gain=init_gain)
        if backbone_activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown backbone_activation {backbone_activation!r}; valid: {sorted(ACTIVATIONS)}"
            )
        if not 0.0 <= backbone_dropout < 1.0:
            raise ValueError(f"backbone_dropout must be in [0, 1), got {backbone_dropout}")
        self.hidden_size = hidden_size
        self.time_scale = time_scale
        backbone = Backbone(self._cell_inputs(hidden_size), hidden_size, backbone_units, backbone_layers,
                            backbone_activation, backbone_dropout, dropout_every_layer=code == "keras")
        self.cell = self._make_cell(backbone, hidden_size, init_gain)
        self.readout = nn.Linear(hidden_size, output_size)
        if code == "keras":  # Keras' Dense: glorot-uniform kernel, zero bias
            nn.init.xavier_uniform_(self.readout.weight)
            nn.init.zeros_(self.readout.bias)

    def _cell_inputs(self, hidden_size: int) -> int:
        """What the cell reads per step besides its state: the step's channels."""
        return self.step_channels

    def _make_cell(self, backbone: Backbone, hidden_size: int, init_gain: float) -> nn.Module:
        raise NotImplementedError

    @classmethod
    def prepare_inputs(cls, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor,
                       **model_kwargs: object) -> dict[str, torch.Tensor]:
        """The raw inputs (SequenceModel.prepare_inputs); with `missing_values: last_and_mask`,
        x (N, L, 2C) from `last_observed_and_mask`."""
        if model_kwargs.get("missing_values", "zero") != "last_and_mask":
            return super().prepare_inputs(x, t, mask, **model_kwargs)
        return {"x": last_observed_and_mask(x), "dt": elapsed_times(t, mask), "mask": mask}

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_raw_inputs(x, dt, mask, self.step_channels)
        # Per-step views via unbind: indexing part[step] in the loop would make every step's
        # backward allocate and fill a zero gradient of the whole (L, B, U) tensor.
        parts = [part.unbind(1) for part in self._project_inputs(x)]  # each L x (B, ...)
        dt = (dt * self.time_scale).unsqueeze(-1).unbind(1)  # L x (B, 1)
        states = torch.stack(self._run(parts, dt), dim=1)  # (B, L, H)
        if self.per_step:
            return self.readout(states)  # (B, L, O)
        return self.readout(gather_steps(states, last_valid_index(mask)))  # (B, O)

    def _project_inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The input parts of the step's matmuls, for all steps at once: [(B, L, U)]."""
        return [self.cell.project_inputs(x)]

    def _run(self, parts: list[tuple[torch.Tensor, ...]], dt: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """The state (B, H) after each step, from per-step inputs.

        Observed steps form a prefix of each row, and a step only sees the past, so the states
        of the observed steps do not depend on the padding after them: no per-step masking.
        """
        (x_part,) = parts
        h = x_part[0].new_zeros(x_part[0].shape[0], self.hidden_size)  # (B, H)
        states = []
        for x_t, dt_t in zip(x_part, dt):
            h = self.cell(x_t, h, dt_t)
            states.append(h)
        return states


class CfC(_ClosedFormRNN):
    """CfC, Eq. 10 of Hasani et al. 2022."""

    def _make_cell(self, backbone: Backbone, hidden_size: int, init_gain: float) -> nn.Module:
        return CfCCell(backbone, hidden_size, no_gate=False, init_gain=init_gain, code=self.code)


class CfCNoGate(_ClosedFormRNN):
    """CfC-noGate: h' = tanh(g) + sigmoid(f_a dt + f_b) * tanh(k), Hasani et al. 2022."""

    def _make_cell(self, backbone: Backbone, hidden_size: int, init_gain: float) -> nn.Module:
        return CfCCell(backbone, hidden_size, no_gate=True, init_gain=init_gain, code=self.code)


CFS_FORMS = ("code", "eq9")


class CfS(_ClosedFormRNN):
    """Cf-S, the closed-form solution network of Eq. 9, Hasani et al. 2022.

    `form`: "code" (default) is the official code's cell (B = -A, |f| from the backbone's head),
    "eq9" the printed equation (a learned B, f one sigmoid layer, no backbone: the backbone
    arguments are then unused); _cfc_cells.py says how they differ.
    """

    def __init__(self, *, form: str = "code", **kwargs: object) -> None:
        if form not in CFS_FORMS:
            raise ValueError(f"unknown form {form!r}; valid: {list(CFS_FORMS)}")
        self.form = form
        super().__init__(**kwargs)

    def _make_cell(self, backbone: Backbone, hidden_size: int, init_gain: float) -> nn.Module:
        if self.form == "eq9":
            return CfSEq9Cell(self.step_channels, hidden_size, init_gain=init_gain)
        return CfSCell(backbone, hidden_size, init_gain=init_gain, code=self.code)


class CfCMMRNN(_ClosedFormRNN):
    """CfC-mmRNN, per step with the CfC's state h and the LSTM's memory c:

        code "torch" (torch_cfc.py):  (h_lstm, c) = LSTM(x_t, (h, c)),  h = CfC(x_t, state h_lstm, dt)
        code "keras" (tf_cfc.py MixedCfcCell):  (h_lstm, c) = LSTM(x_t, (h, c)),  h = CfC(h_lstm, state h, dt)

    `forget_bias` is added to the LSTM's forget gate (1.0 in the official PyTorch code).
    """

    def __init__(self, *, forget_bias: float = 1.0, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.memory = MemoryLSTMCell(self.step_channels, self.hidden_size, forget_bias, zero_bias=self.code == "keras")

    def _cell_inputs(self, hidden_size: int) -> int:
        return hidden_size if self.code == "keras" else self.step_channels  # Keras: the LSTM's output

    def _make_cell(self, backbone: Backbone, hidden_size: int, init_gain: float) -> nn.Module:
        return CfCCell(backbone, hidden_size, no_gate=False, init_gain=init_gain, code=self.code)

    def _project_inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.code == "keras":  # the CfC's input is known only step by step
            return [self.memory.project_inputs(x)]  # (B, L, 4H)
        return [self.cell.project_inputs(x), self.memory.project_inputs(x)]  # (B, L, U), (B, L, 4H)

    def _run(self, parts: list[tuple[torch.Tensor, ...]], dt: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        lstm_part = parts[-1]
        h = lstm_part[0].new_zeros(lstm_part[0].shape[0], self.hidden_size)  # (B, H)
        c = torch.zeros_like(h)  # LSTM memory (B, H)
        states = []
        for i, (lstm_t, dt_t) in enumerate(zip(lstm_part, dt)):
            h_lstm, c = self.memory(lstm_t, h, c)
            if self.code == "keras":
                h = self.cell(self.cell.project_inputs(h_lstm), h, dt_t)
            else:
                h = self.cell(parts[0][i], h_lstm, dt_t)
            states.append(h)
        return states


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
