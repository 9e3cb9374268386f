"""The frequency discrimination model of seed 002 (§5.4, A.2): a ``SequenceClassifier`` of 110
units and 2 output units over the samples of a ``tsrnn.lab.data.sine_waves.SineBatch``.

Inputs per step: the amplitude x, and with ``time_input`` also the sample time t times
``time_scale`` (the seed's "w/ TIME" rows feed the raw t, 0 to 125: ``time_scale`` 1). The pLSTM
always receives the step lengths Δt of the samples (S8); the LSTMs see time only through the
optional input. The pLSTM's ε is 1e-5 as in the seed (smaller than any
step), and chrono's t_max, which the seed does not state for this task, is given by the task as
the most samples a sequence can have (``tsrnn.lab.data.sine_waves.longest``). Neil et al.'s
leaky-rectified dense output is a plain linear layer here, as the seed describes ("2 output units").
"""
from __future__ import annotations

import math

import torch

from tsrnn.lab.data.sine_waves import SineBatch
from tsrnn.lab.models.classifier import SequenceClassifier


class FrequencyModel(SequenceClassifier):
    """``logits = model(batch)``: batch a ``tsrnn.lab.data.sine_waves.SineBatch``; logits (B, 2). The
    batch's lengths go to the recurrent layer, which runs each sequence's own samples only and
    is read after its last one (``SequenceClassifier``)."""

    def __init__(self, cell: str = "plstm", hidden_size: int = 110, time_input: bool = False,
                 t_max: float | None = None, generator: torch.Generator | None = None, backend: str = "auto",
                 time_scale: float = 1.0):
        if not (math.isfinite(time_scale) and time_scale > 0):
            raise ValueError(f"time_scale must be a positive finite number, got {time_scale!r}")
        self.time_input, self.time_scale = bool(time_input), float(time_scale)
        super().__init__(cell, 1 + self.time_input, hidden_size, 2, t_max=t_max, eps=1e-5, generator=generator,
                         backend=backend)

    def extra_repr(self) -> str:
        scale = f", time_scale={self.time_scale:g}" if self.time_scale != 1.0 else ""
        return super().extra_repr() + f", time_input={self.time_input}{scale}"

    def forward(self, batch: SineBatch) -> torch.Tensor:
        if not isinstance(batch, SineBatch):
            raise TypeError(f"batch must be a tsrnn.lab.data.sine_waves.SineBatch, got {type(batch).__name__}")
        features = [batch.x, batch.times * self.time_scale] if self.time_input else [batch.x]
        return super().forward(torch.stack(features, dim=-1), batch.lengths, batch.dt)
