"""GRU-D, Che et al. 2018 (Scientific Reports 8:6085), Eqs. 2-5; a baseline of the CfC paper.

Per step k and channel d, with m the observation mask, x' the last observed value, x~ the
empirical mean and delta the time since the channel was last observed before step k:

    gamma_x = exp(-max(0, w_x * delta + b_x))            (diagonal: one weight per channel)
    gamma_h = exp(-max(0, W_gh delta + b_gh))
    x^ = m * x + (1 - m) * (gamma_x * x' + (1 - gamma_x) * x~)
    h^ = gamma_h * h
    z = sigmoid(W_z x^ + U_z h^ + V_z m + b_z)
    r = sigmoid(W_r x^ + U_r h^ + V_r m + b_r)
    h~ = tanh(W x^ + U (r * h^) + V m + b)
    h = (1 - z) * h^ + z * h~

Values are standardised with the train split's statistics before they reach a model, so the
empirical mean x~ is 0 (a buffer, `input_mean`). The decays and x^ depend on the inputs only,
so they and the input projections are computed for all steps at once; the loop over steps
holds only the two recurrent matmuls and is TorchScript-compiled.

mlech26l/ode-lstms (node_cell.py, GRUD) keeps only the hidden decay, driven by the elapsed time;
this is the full model of the paper.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.models.base import SequenceModel


@torch.jit.script
def _recurrence(
    pre: torch.Tensor, decay: torch.Tensor, mask: torch.Tensor, u_zr: torch.Tensor, u_n: torch.Tensor
) -> torch.Tensor:
    """States (B, L, H) from pre (B, L, 3H) = [z, r, candidate] input terms, decay (B, L, H)
    = gamma_h, mask (B, L), u_zr (2H, H) = [U_z; U_r], u_n (H, H) = U."""
    hidden = u_n.shape[0]
    h = pre.new_zeros(pre.shape[0], hidden)
    states = []
    for k in range(pre.shape[1]):
        pre_zr, pre_n = pre[:, k].split([2 * hidden, hidden], dim=1)
        h_dec = decay[:, k] * h
        z, r = torch.sigmoid(pre_zr + h_dec @ u_zr.t()).chunk(2, dim=1)
        candidate = torch.tanh(pre_n + (r * h_dec) @ u_n.t())
        h_new = (1.0 - z) * h_dec + z * candidate
        h = torch.where(mask[:, k].unsqueeze(1), h_new, h)  # held where mask is False
        states.append(h)
    return torch.stack(states, dim=1)


def last_observed(x: torch.Tensor, observed: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per channel: the last observed value at or before each step (0, the mean, before the
    first observation) and the time since the last observation strictly before it.

    Args: x (N, L, C) with 0 where missing; observed (N, L, C) bool; t (N, L).
    Returns: x_last (N, L, C); delta (N, L, C), 0 at the first step and t_k - t_0 until a
    channel is first seen, as the recursion of Che et al. gives.
    """
    steps = torch.arange(x.shape[1], device=x.device).view(1, -1, 1).expand_as(x)  # (N, L, C)
    seen = torch.where(observed, steps, torch.full_like(steps, -1)).cummax(dim=1).values
    x_last = x.gather(1, seen.clamp(min=0)) * (seen >= 0)
    before = torch.cat([torch.full_like(seen[:, :1], -1), seen[:, :-1]], dim=1)  # strictly before k
    times = t.unsqueeze(-1).expand_as(x)  # (N, L, C)
    return x_last, times - times.gather(1, before.clamp(min=0))


class GRUD(SequenceModel):
    """forward(x, observed, x_last, delta (B, L, C), mask (B, L)) -> (B, O), or (B, L, O) with per_step.

    Representation "raw_per_channel": values with 0 where missing, the per-channel observation
    mask as floats, last observed values and times since the last observation (see
    `last_observed`), and the step mask. Built by `prepare_inputs` from x with NaN where missing.
    """

    representation = "raw_per_channel"

    def __init__(
        self, *, input_channels: int, output_size: int, per_step: bool = False, hidden_size: int = 64
    ) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        self.hidden_size = hidden_size
        # w_x, b_x: initialised as an nn.Linear(1, 1) per channel would be
        self.input_decay_weight = nn.Parameter(torch.empty(input_channels).uniform_(-1.0, 1.0))
        self.input_decay_bias = nn.Parameter(torch.empty(input_channels).uniform_(-1.0, 1.0))
        self.hidden_decay = nn.Linear(input_channels, hidden_size)  # W_gh, b_gh
        self.input_map = nn.Linear(2 * input_channels, 3 * hidden_size)  # [W; V] on [x^, m], b
        self.recurrent_zr = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # U_z, U_r
        self.recurrent_n = nn.Linear(hidden_size, hidden_size, bias=False)  # U
        self.readout = nn.Linear(hidden_size, output_size)
        self.register_buffer("input_mean", torch.zeros(input_channels))  # standardised values

    @classmethod
    def prepare_inputs(
        cls, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, **model_kwargs: object
    ) -> dict[str, torch.Tensor]:
        """x (N, L, C) NaN where missing, t (N, L), mask (N, L) -> the five inputs of forward."""
        observed = ~torch.isnan(x) & mask.unsqueeze(-1)  # (N, L, C)
        values = torch.nan_to_num(x, nan=0.0)
        x_last, delta = last_observed(values, observed, t)
        return {"x": values, "observed": observed.to(x.dtype), "x_last": x_last, "delta": delta, "mask": mask}

    def impute(self, x: torch.Tensor, observed: torch.Tensor, x_last: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """x^ (B, L, C): observed values, else the last one decayed towards the mean."""
        gamma_x = torch.exp(-torch.relu(delta * self.input_decay_weight + self.input_decay_bias))
        fill = gamma_x * x_last + (1.0 - gamma_x) * self.input_mean
        return observed * x + (1.0 - observed) * fill

    def forward(
        self, x: torch.Tensor, observed: torch.Tensor, x_last: torch.Tensor, delta: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        expected = (*mask.shape, self.input_channels)
        if mask.ndim != 2 or any(v.shape != expected for v in (x, observed, x_last, delta)):
            raise ValueError(
                f"expected x, observed, x_last, delta (B, L, {self.input_channels}) and mask (B, L); got "
                f"{[tuple(v.shape) for v in (x, observed, x_last, delta, mask)]}"
            )
        x_hat = self.impute(x, observed, x_last, delta)
        decay = torch.exp(-torch.relu(self.hidden_decay(delta)))  # gamma_h (B, L, H)
        pre = self.input_map(torch.cat([x_hat, observed], dim=-1))  # (B, L, 3H)
        states = _recurrence(pre, decay, mask, self.recurrent_zr.weight, self.recurrent_n.weight)
        if self.per_step:
            return self.readout(states)  # (B, L, H) -> (B, L, O)
        return self.readout(states[:, -1])  # held after each row's last step
