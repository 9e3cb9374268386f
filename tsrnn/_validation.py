"""Argument checks shared by every public entry point (SPEC §8).

Each check raises a ValueError (bad value or shape) or a TypeError (bad type or dtype) whose
message names the argument and what was expected. Checks that read tensor values (finiteness,
positivity) are skipped while torch.compile traces, where they would break the graph.
"""
from __future__ import annotations

from typing import Sequence

import numbers

import torch


def _tracing() -> bool:
    return torch.compiler.is_compiling()


def tensor(name: str, value, ndims: Sequence[int] | int | None = None) -> torch.Tensor:
    """A floating-point tensor with one of the allowed ranks."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if ndims is not None:
        allowed = (ndims,) if isinstance(ndims, int) else tuple(ndims)
        if value.dim() not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(value.shape)}")
    return value


def shape(name: str, value: torch.Tensor, expected: Sequence[int]) -> None:
    """Exact shape match."""
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(value.shape)}")


def same_device(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Every tensor in ``others`` lives on the device of ``reference``."""
    for name, value in others.items():
        if value is not None and value.device != reference.device:
            raise ValueError(
                f"{name} is on {value.device} but {reference_name} is on {reference.device}; "
                "move them to one device"
            )


def same_dtype(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Every tensor in ``others`` has the dtype of ``reference``."""
    for name, value in others.items():
        if value is not None and value.dtype != reference.dtype:
            raise TypeError(
                f"{name} has dtype {value.dtype} but {reference_name} has {reference.dtype}; "
                "cast them to one dtype"
            )


def finite(name: str, value: torch.Tensor) -> None:
    """No NaN or Inf."""
    if not _tracing() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite, got NaN or Inf")


def positive(name: str, value: torch.Tensor) -> None:
    """Finite and strictly positive."""
    finite(name, value)
    if not _tracing() and not bool((value > 0).all()):
        raise ValueError(f"{name} must be > 0, got minimum {value.min().item():g}")


def nonnegative(name: str, value: torch.Tensor) -> None:
    """Finite and >= 0."""
    finite(name, value)
    if not _tracing() and not bool((value >= 0).all()):
        raise ValueError(f"{name} must be >= 0, got minimum {value.min().item():g}")


def index(name: str, value, size: int) -> int:
    """An int in [0, size)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value < size:
        raise ValueError(f"{name} must be in [0, {size}), got {value}")
    return value


def reset_mask(reset, steps: int, batch: int, batch_first: bool, like_name: str,
               like: torch.Tensor) -> torch.Tensor:
    """A reset mask as a time-major (T, B) bool tensor.

    Accepts bool, or integer/float holding only 0 and 1, of shape (T, B) ((B, T) if batch_first:
    errors name the caller's layout), on the device of ``like``.
    """
    if not isinstance(reset, torch.Tensor):
        raise TypeError(f"reset must be a torch.Tensor or None, got {type(reset).__name__}")
    if reset.is_complex():
        raise TypeError(f"reset must be a bool or 0/1 tensor, got dtype {reset.dtype}")
    shape("reset", reset, (batch, steps) if batch_first else (steps, batch))
    same_device(like_name, like, reset=reset)
    if reset.dtype != torch.bool:
        if not _tracing() and not bool(((reset == 0) | (reset == 1)).all()):
            raise ValueError("reset must hold only 0 and 1 (or be a bool tensor)")
        reset = reset != 0
    return reset.transpose(0, 1) if batch_first else reset


def choice(name: str, value, options: Sequence) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")


def real(name: str, value) -> float:
    """A real python/numpy number (not a bool), as float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def positive_real(name: str, value) -> float:
    """A finite real number > 0, as float."""
    value = real(name, value)
    positive(name, torch.tensor(value, dtype=torch.float64))
    return value


def count(name: str, value, minimum: int = 1) -> int:
    """An int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def token_ids(name: str, value, ndim: int, num_classes: int | None = None) -> torch.Tensor:
    """An integer (not bool) tensor of ``ndim`` dimensions; with ``num_classes``, non-empty and
    holding ids in [0, num_classes). Returned as int64."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(value).__name__}")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of token ids, got dtype {value.dtype}")
    if value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension{'s' if ndim > 1 else ''}, got shape {tuple(value.shape)}")
    if num_classes is not None:
        if value.numel() == 0:
            raise ValueError(f"{name} must hold at least one step and one batch row, got shape {tuple(value.shape)}")
        if not _tracing():
            low, high = int(value.min()), int(value.max())
            if low < 0 or high >= num_classes:
                raise ValueError(f"{name} must hold ids in [0, {num_classes}), got values in [{low}, {high}]")
    return value.long()


def probability(name: str, value) -> float:
    """A dropout rate in [0, 1) (1 would divide by zero in inverted dropout)."""
    value = real(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return value


def nonnegative_real(name: str, value) -> float:
    """A finite real number >= 0."""
    value = real(name, value)
    if not (value >= 0.0 and value != float("inf")):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def sizes(name: str, value) -> tuple[int, ...]:
    """A non-empty sequence of ints >= 1."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    if len(value) == 0:
        raise ValueError(f"{name} must name at least one layer, got an empty sequence")
    return tuple(count(f"{name}[{k}]", v) for k, v in enumerate(value))
