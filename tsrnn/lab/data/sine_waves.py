"""Frequency discrimination (seed 002 §5.4, A.2): is a sampled sine wave's period in [5, 6]?

The task and every parameter of its data are Neil et al. (2016)'s (Phased LSTM §3.1), as their
public ``freq_task.py`` draws them, which seed 002 adopts ("all other parameters of the dataset
... as in Neil et al."). Per sequence, in time units of 1 (ms in Neil et al.):

    period P ~ exp(U(log 1, log 100)), and P ~ U(5, 6) for the first half of every batch
    duration D ~ U(15, 125), start s ~ U(0, 125 - D), phase φ ~ U(0, D)
    sample times: sync, s, s + Δ, s + 2Δ, ... < s + D (Δ = ``resolution``: 1 or 0.1);
                  async, N ~ U(15, 125) points (N = int of the draw) uniform in [s, s + D), sorted
    x_n = sin(2π t_n / P - φ), label 1 if 5 <= P <= 6 else 0

so a batch is about 52% class 1 (half by construction, plus the log-uniform draws that land in
[5, 6]). Neil et al. left-pad with a mask that freezes the state; tsrnn right-pads instead and
passes ``lengths`` to the recurrence, which runs each sequence's own samples only and ends in
the state after its last one (``tsrnn.lab.models.FrequencyModel``): the same computation.

Step lengths for the pLSTM (seed 002 A.1, S8): dt_n = t_n - t_{n-1}, and dt_1 = D / N (the mean
spacing; the seed does not say what the first step's Δt is). Async draws can coincide in float
arithmetic; dt is at least ``min_dt`` = 1e-5, the ε the seed uses for this task. Padding has
x = 0, t = 0, dt = 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tsrnn import _validation as check

__all__ = ["SineBatch", "sine_waves", "longest"]

MAX_DURATION = 125.0
MIN_DURATION = 15.0
MIN_POINTS, MAX_POINTS = 15, 125
PERIODS = (1.0, 100.0)          # log-uniform range of the periods
TARGET = (5.0, 6.0)             # class 1: the period lies here
MIN_DT = 1e-5


@dataclass(frozen=True)
class SineBatch:
    """x, times, dt (L, B) float32, padded after each sequence; lengths (B,) int64; labels (B,) int64."""
    x: torch.Tensor
    times: torch.Tensor
    dt: torch.Tensor
    lengths: torch.Tensor
    labels: torch.Tensor

    def to(self, device) -> "SineBatch":
        return SineBatch(*(t.to(device) for t in (self.x, self.times, self.dt, self.lengths, self.labels)))


def longest(resolution: float | None) -> int:
    """The most samples a sequence can have: 125 for async, ceil(125 / Δ) for sync."""
    return MAX_POINTS if resolution is None else math.ceil(MAX_DURATION / resolution)


def sine_waves(batch_size: int, resolution: float | None = None,
               generator: torch.Generator | None = None) -> SineBatch:
    """One batch of the frequency discrimination task: async if ``resolution`` is None, else
    sampled every ``resolution`` time units. Draws (float64) use ``generator``."""
    B = check.count("batch_size", batch_size)
    if resolution is not None:
        resolution = check.positive_real("resolution", resolution)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")

    def uniform(low, high, *shape):
        return low + (high - low) * torch.rand(*(shape or (B,)), generator=generator, dtype=torch.float64)

    duration = uniform(MIN_DURATION, MAX_DURATION)
    start = uniform(0.0, 1.0) * (MAX_DURATION - duration)
    periods = torch.exp(uniform(math.log(PERIODS[0]), math.log(PERIODS[1])))
    phase = uniform(0.0, 1.0) * duration
    periods[:B // 2] = uniform(*TARGET, B // 2)
    if resolution is None:
        lengths = uniform(MIN_POINTS, MAX_POINTS).long()
        L = int(lengths.max())
        u = uniform(0.0, 1.0, L, B)
        u = torch.where(torch.arange(L)[:, None] < lengths, u, 2.0).sort(dim=0).values
        times = start + u * duration
    else:
        lengths = torch.ceil(duration / resolution).long().clamp(min=1)
        L = int(lengths.max())
        times = start + resolution * torch.arange(L, dtype=torch.float64)[:, None]
    valid = torch.arange(L)[:, None] < lengths
    x = torch.sin(2 * math.pi * times / periods - phase)
    dt = torch.cat([(duration / lengths)[None], times.diff(dim=0)]).clamp(min=MIN_DT)
    labels = ((periods >= TARGET[0]) & (periods <= TARGET[1])).long()
    return SineBatch(x=torch.where(valid, x, 0.0).float(), times=torch.where(valid, times, 0.0).float(),
                     dt=torch.where(valid, dt, 1.0).float(), lengths=lengths, labels=labels)
