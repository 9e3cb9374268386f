"""Argument checks shared by every public entry point (docs/equations.md §8).

Each check raises a ValueError (bad value or shape) or a TypeError (bad type or dtype) whose
message names the argument and what was expected. Where torch.nn.LSTM refuses the same input with
another type, the error is an instance of both (``ShapeError``, ``DeviceError``, ``DtypeError``,
``StateError``),
so code that catches torch's exception types catches tsrnn's too.

The public entry points check everything once, then call unchecked internals; the operators check
shapes, dtypes and devices again without reading values (``tsrnn.ops.recurrence.checks``,
csrc/recurrence/op.h). Checks of values (finite, positive, non-negative) run on the host for CPU
tensors and on the device for CUDA ones (``torch._assert_async``, docs/backends.md); they are
skipped while tracing, exporting, under torch.func transforms, during CUDA graph capture and for
meta tensors.
"""
from __future__ import annotations

import numbers
import os
from typing import Sequence

import torch


class ShapeError(ValueError, RuntimeError):
    """A bad shape or rank: a ValueError, and the RuntimeError torch's RNN checks raise for it."""


class DeviceError(ValueError, RuntimeError):
    """Tensors on different devices: a ValueError, and the RuntimeError torch's kernels raise."""


class DtypeError(TypeError, ValueError, RuntimeError):
    """A bad or mismatched dtype: a TypeError, the ValueError torch.nn.LSTM raises for an input of
    another dtype than its weights, and the RuntimeError torch's kernels raise for mixed dtypes."""


class StateError(TypeError, RuntimeError):
    """An initial state that is no tuple of the cell's states (a bare tensor, too many entries): a
    TypeError, and the RuntimeError torch.nn.LSTM raises for it."""


def tracing() -> bool:
    """torch.compile (and torch.export) or torch.jit.trace is tracing: values cannot be read."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def under_transforms() -> bool:
    """True inside a torch.func transform (vmap, grad, jacrev, functional_call under them...)."""
    return torch._C._are_functorch_transforms_active()


def eager() -> bool:
    """A call runs eagerly: nothing traces it (``tracing``) and no torch.func transform wraps it
    (``under_transforms``); one expression, as the warm path asks it per op."""
    return not (torch.compiler.is_compiling() or torch.jit.is_tracing() or torch._C._are_functorch_transforms_active())


def capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def capturing_on(t: torch.Tensor) -> bool:
    """Whether work on ``t`` is being captured into a CUDA graph now (``t`` on CUDA and the current
    stream capturing): the test of the capture-time rules on tensors (no cache read or filled, no
    host read of a value), which the CPU tests replace to run them on CPU tensors. (Where no tensor
    is at hand, a Packing's device or the tuner's, ``capturing`` asks the stream itself.)"""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _values_unreadable(value: torch.Tensor) -> bool:
    """Whether a value check must be skipped: tracing, graph capture, torch.func transforms (their
    batched values cannot steer Python), or no data (meta)."""
    if tracing() or value.device.type == "meta" or under_transforms():
        return True
    return capturing_on(value)


def _require(value: torch.Tensor, ok: torch.Tensor, message: str) -> None:
    """Raise ValueError(message) unless the 0-d bool ``ok``; on CUDA, assert on the device."""
    if value.device.type == "cuda":
        torch._assert_async(ok, message)
    elif not bool(ok):
        raise ValueError(message)


def tensor(name: str, value, ndims: Sequence[int] | int | None = None) -> torch.Tensor:
    """A floating-point tensor with one of the allowed ranks."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise DtypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if ndims is not None:
        allowed = (ndims,) if isinstance(ndims, int) else tuple(ndims)
        if value.dim() not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ShapeError(f"{name} must have {want} dimensions, got shape {tuple(value.shape)}")
    return value


def shape(name: str, value: torch.Tensor, expected: Sequence[int]) -> None:
    """Exact shape match."""
    if tuple(value.shape) != tuple(expected):
        raise ShapeError(f"{name} must have shape {tuple(expected)}, got {tuple(value.shape)}")


def same_device(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Every tensor in ``others`` lives on the device of ``reference``."""
    for name, value in others.items():
        if value is not None and value.device != reference.device:
            raise DeviceError(
                f"{name} is on {value.device} but {reference_name} is on {reference.device}; "
                "move them to one device"
            )


def same_dtype(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Every tensor in ``others`` has the dtype of ``reference``."""
    for name, value in others.items():
        if value is not None and value.dtype != reference.dtype:
            raise DtypeError(
                f"{name} has dtype {value.dtype} but {reference_name} has {reference.dtype}; "
                "cast them to one dtype"
            )


def finite(name: str, value: torch.Tensor) -> None:
    """No NaN or Inf."""
    if not _values_unreadable(value):
        _require(value, torch.isfinite(value).all(), f"{name} must be finite, got NaN or Inf")


def _bounded(name: str, value: torch.Tensor, ok: torch.Tensor, bound: str) -> None:
    finite(name, value)
    if _values_unreadable(value):
        return
    minimum = "" if value.device.type == "cuda" or value.numel() == 0 else f", got minimum {value.min().item():g}"
    _require(value, ok.all(), f"{name} must be {bound}{minimum}")


def positive(name: str, value: torch.Tensor) -> None:
    """Finite and strictly positive."""
    _bounded(name, value, value > 0, "> 0")


def nonnegative(name: str, value: torch.Tensor) -> None:
    """Finite and >= 0."""
    _bounded(name, value, value >= 0, ">= 0")


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
        if not _values_unreadable(reset):
            _require(reset, ((reset == 0) | (reset == 1)).all(), "reset must hold only 0 and 1 (or be a bool tensor)")
        reset = reset != 0
    return reset.transpose(0, 1) if batch_first else reset


def flag(name: str, value) -> bool:
    """A bool, as torch.nn.LSTM requires of its flags (a string such as "False" is truthy); the
    message starts with torch.nn.LSTM's."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} should be of type bool, got: {type(value).__name__}; {name} must be True or False, "
                        f"got {value!r}")
    return value


def choice(name: str, value, options: Sequence) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")


def environment(name: str, options: Sequence[str], default: str) -> str:
    """The environment variable ``name``: one of ``options``, ``default`` where unset or empty."""
    value = os.environ.get(name) or default
    if value not in options:
        raise ValueError(f"the environment variable {name} must be one of {list(options)}, got {value!r} "
                         f"(unset or empty: {default!r})")
    return value


def switch(name: str, default: str = "1") -> bool:
    """An on/off environment variable, "1" or "0" (``default`` where unset or empty)."""
    return environment(name, ("0", "1"), default) == "1"


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
        if not tracing():
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


def lengths(name: str, value, steps: int, batch: int, minimum: int = 1) -> torch.Tensor:
    """Per-sequence lengths: a 1-D integer tensor of ``batch`` values in [``minimum``, ``steps``]
    (the value check skipped under tracing)."""
    if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.dtype == torch.bool \
            or value.dim() != 1:
        raise TypeError(f"{name} must be a 1-D integer tensor")
    shape(name, value, (batch,))
    if not tracing() and (bool((value < minimum).any()) or bool((value > steps).any())):
        raise ValueError(f"{name} must be in [{minimum}, {steps}] (the steps of the sequence)")
    return value


def sequence_lengths(value, steps: int, batch: int) -> torch.Tensor:
    """A recurrence's ``lengths=``: a 1-D integer tensor (on any device) or a list of ``batch``
    ints in [0, ``steps``]; returned as int64 on the CPU (read on the host: a CUDA tensor
    synchronizes once)."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                for v in value):
        value = torch.tensor(value, dtype=torch.int64)
    return lengths("lengths", value, steps, batch, minimum=0).to("cpu", torch.int64)


def sizes(name: str, value) -> tuple[int, ...]:
    """A non-empty sequence of ints >= 1."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    if len(value) == 0:
        raise ValueError(f"{name} must name at least one layer, got an empty sequence")
    return tuple(count(f"{name}[{k}]", v) for k, v in enumerate(value))


def recurrent_layer(cell, x, h0, states: Sequence, w_ih, w_hh, bias, params: Sequence = (), steps=None, w_hr=None,
                    constants: Sequence = ()) -> tuple[torch.Tensor | None, tuple[float, ...]]:
    """One recurrent layer's arguments (``tsrnn.functional``): x (T, B, I), h0 and each state
    (B, H) in the cell's order (``cell.initial_states``), w_ih (G*H, I), w_hh (G*H, H), bias (G*H,)
    or None, ``params`` the cell's per-unit parameters (H,) each, ``steps`` its step input (T, B)
    or (T, B, 1) > 0 or None, ``constants`` its floats; ``cell`` a
    ``tsrnn.ops.recurrence.cells.Cell``. The states of ``cell.math_states`` may have another dtype
    and must be >= 0; the names of ``cell.positive`` must be > 0. With the LSTM's projection
    ``w_hr`` (P, H), P < H: h0 is (B, P) and w_hh (4H, P). Returns (steps as (T, B) or None,
    the constants as floats)."""
    tensor("x", x, 3)
    steps_, batch, in_size = x.shape
    if steps_ < 1 or batch < 1:
        raise ShapeError(f"x must have at least one step and one batch row, got shape {tuple(x.shape)}")
    tensor("w_hh", w_hh, 2)
    if w_hr is not None:
        tensor("w_hr", w_hr, 2)
        if not 1 <= w_hr.shape[0] < w_hr.shape[1]:
            raise ShapeError(f"w_hr must be (P, H) with 1 <= P < H (proj_size < hidden_size), got shape "
                             f"{tuple(w_hr.shape)}")
    out_size = w_hh.shape[1]
    hidden = out_size if w_hr is None else w_hr.shape[1]
    if hidden < 1:
        raise ShapeError(f"w_hh must have at least one hidden unit, got shape {tuple(w_hh.shape)}")
    rows = cell.num_gates * hidden
    shape("w_hh", w_hh, (rows, out_size))
    tensor("w_ih", w_ih, 2)
    shape("w_ih", w_ih, (rows, in_size))
    if bias is not None:
        tensor("bias", bias, 1)
        shape("bias", bias, (rows,))
    if len(states) != cell.num_states:
        raise ValueError(f"the cell {cell.name} takes {cell.num_states} states after h0 "
                         f"({', '.join(cell.initial_states[1:])}), got {len(states)}")
    if len(params) != len(cell.params):
        raise ValueError(f"the cell {cell.name} takes {len(cell.params)} parameters "
                         f"({', '.join(cell.params) or 'none'}), got {len(params)}")
    values = cell_constants(cell, constants)
    named = dict(zip(cell.initial_states, (h0, *states)))
    for name, state in named.items():
        tensor(name, state, 2)
        shape(name, state, (batch, out_size if name == "h0" else hidden))
    per_unit = dict(zip(cell.params, params))
    same_dtype("x", x, w_ih=w_ih, w_hh=w_hh, bias=bias, w_hr=w_hr,
               **{n: v for n, v in named.items() if n not in cell.initial_math_states})
    step_name = cell.step_input or "steps"
    same_device("x", x, w_ih=w_ih, w_hh=w_hh, bias=bias, w_hr=w_hr, **{step_name: steps}, **named, **per_unit)
    for name, value in per_unit.items():
        tensor(name, value, 1)
        shape(name, value, (hidden,))
        if name in cell.positive:
            positive(name, value)
    for name in cell.initial_math_states:
        nonnegative(name, named[name])
    if steps is not None:
        if cell.step_input is None:
            raise ValueError(f"the cell {cell.name} takes no step input, got steps")
        tensor(step_name, steps, (2, 3))
        if steps.dim() == 3:
            shape(step_name, steps, (steps_, batch, 1))
            steps = steps.squeeze(-1)
        shape(step_name, steps, (steps_, batch))
        positive(step_name, steps)
    return steps, values


def cell_constants(cell, constants: Sequence) -> tuple[float, ...]:
    """The cell's constants, in its order, as floats: one a constant, each real, and > 0 where
    ``cell.positive`` names it."""
    if len(constants) != len(cell.constants):
        raise ValueError(f"the cell {cell.name} takes {len(cell.constants)} constants "
                         f"({', '.join(n for n, _ in cell.constants) or 'none'}), got {len(constants)}")
    return tuple(positive_real(name, value) if name in cell.positive else real(name, value)
                 for (name, _), value in zip(cell.constants, constants))
