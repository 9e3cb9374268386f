"""The frequency discrimination model of seed 002 (§5.4, A.2): one recurrent layer of 110 units
read at each sequence's last sample, then 2 output units.

Inputs per step: the amplitude x, and with ``time_input`` also the sample time t (the seed's
"w/ TIME" rows). The pLSTM always receives the step lengths Δt of the samples (S8); the LSTMs
see time only through the optional input. The cells are ``tsrnn.models.recurrent``'s; the
pLSTM's ε is 1e-5 as in the seed (smaller than any step), and chrono's t_max, which the seed does
not state for this task, defaults to the most samples a sequence can have
(``tsrnn.sine_waves.longest``). Neil et al.'s leaky-rectified dense output is a plain linear layer
here, as the seed describes ("2 output units").
"""
from __future__ import annotations

import torch
from torch import nn

from tsrnn import _validation as check
from tsrnn.models.recurrent import recurrent_layer
from tsrnn.sine_waves import SineBatch


class FrequencyModel(nn.Module):
    """(x[, t]) → recurrent layer (hidden_size) → output at the last sample → linear (2).

    ``logits = model(batch)``: batch a ``tsrnn.sine_waves.SineBatch``; logits (B, 2).
    """

    def __init__(self, cell: str = "plstm", hidden_size: int = 110, time_input: bool = False,
                 t_max: float | None = None, generator: torch.Generator | None = None, backend: str = "auto"):
        super().__init__()
        self.cell, self.time_input = cell, bool(time_input)
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.rnn = recurrent_layer(cell, 1 + self.time_input, self.hidden_size, t_max=t_max, eps=1e-5,
                                   generator=generator, backend=backend)
        self.output = nn.Linear(self.hidden_size, 2)

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}, time_input={self.time_input}"

    def forward(self, batch: SineBatch) -> torch.Tensor:
        if not isinstance(batch, SineBatch):
            raise TypeError(f"batch must be a tsrnn.sine_waves.SineBatch, got {type(batch).__name__}")
        check.same_device("output weight", self.output.weight, x=batch.x)
        features = [batch.x, batch.times] if self.time_input else [batch.x]
        x = torch.stack(features, dim=-1).to(self.output.weight.dtype)
        h, _ = self.rnn(x, dt=batch.dt.to(x.dtype)) if self.cell == "plstm" else self.rnn(x)
        last = (batch.lengths - 1).clamp(min=0)
        return self.output(h[last, torch.arange(h.shape[1], device=h.device)])
