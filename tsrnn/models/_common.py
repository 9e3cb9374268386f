"""Helpers shared by the models: argument checks for token tensors and probabilities.

The general checks live in ``tsrnn._validation``; these two are specific to models that read
integer token ids and take dropout rates.
"""
from __future__ import annotations

import torch

from tsrnn import _validation as check


def tokens(name: str, value, num_classes: int, ndim: int = 2) -> torch.Tensor:
    """An integer tensor of ``ndim`` dimensions (default (T, B)) with ids in [0, num_classes)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(value).__name__}")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of token ids, got dtype {value.dtype}")
    if value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions (time-major (T, B)), got shape {tuple(value.shape)}")
    if value.numel() == 0:
        raise ValueError(f"{name} must hold at least one step and one batch row, got shape {tuple(value.shape)}")
    if not check._tracing():
        low, high = int(value.min()), int(value.max())
        if low < 0 or high >= num_classes:
            raise ValueError(f"{name} must hold ids in [0, {num_classes}), got values in [{low}, {high}]")
    return value.long()


def probability(name: str, value) -> float:
    """A dropout rate in [0, 1) (1 would divide by zero in inverted dropout)."""
    value = check.real(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return value


def nonnegative(name: str, value) -> float:
    """A finite real >= 0 (regularization weights)."""
    value = check.real(name, value)
    if not (value >= 0.0 and value != float("inf")):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def sizes(name: str, value) -> tuple[int, ...]:
    """A non-empty sequence of ints >= 1."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    if len(value) == 0:
        raise ValueError(f"{name} must name at least one layer, got an empty sequence")
    return tuple(check.count(f"{name}[{k}]", v) for k, v in enumerate(value))
