"""The recurrence operators' argument checks in Python, as csrc/recurrence/op.h checks them in
C++, with the same messages: ranks, shapes, dtypes and devices only, so they read no values,
never synchronize, and trace with fake tensors. The fake kernels (op.py) and the Triton drivers
(triton_step.py) call them, so that a direct call of any operator namespace
cannot read or write out of bounds.
"""
from __future__ import annotations

import torch

from tsrnn.ops.checks import MATH_DTYPES, _require, triton_device  # noqa: F401  (the Triton drivers' too)
from tsrnn.ops.recurrence.cells import CELLS, Cell


def _cell(name: str) -> Cell:
    _require(name in CELLS, lambda: f"tsrnn: unknown cell '{name}', expected one of {', '.join(map(repr, CELLS))}")
    return CELLS[name]


def _tensor(t, name, dim, like):
    """t has ``dim`` dimensions and the device and dtype of ``like``."""
    _require(t.dim() == dim, lambda: f"tsrnn: {name} must have {dim} dimensions, got {list(t.shape)}")
    _require(t.device == like.device, lambda: f"tsrnn: {name} is on {t.device}, expected {like.device}")
    _require(t.dtype == like.dtype, lambda: f"tsrnn: {name} has dtype {t.dtype}, expected {like.dtype}")


def _sizes(t, name, sizes, shown=None, hint=""):
    """t (of len(sizes) dimensions) is ``sizes``; the message shows ``shown`` (default: sizes)."""
    for size, want in zip(t.shape, sizes):
        _require(size == want, lambda: f"tsrnn: {name} must be {shown or list(sizes)}, got {list(t.shape)}{hint}")


def _nonempty(T, B, H, name, t):
    for size in (T, B, H):
        _require(size >= 1, lambda: f"tsrnn: empty input, {name} {list(t.shape)}")


def _layer(cell: Cell, T, B, H, like, w_hh, h0, state0, params, steps, constants, steps_shape, steps_shown):
    """What both directions take besides their own tensors: w_hh (rank checked) [G*H, H], h0 [B, H],
    state0 [S, B, H], params [P, H] (exactly for a cell of P > 0 parameters), steps ``steps_shape``
    (a cell with a step input, optional), the cell's number of constants."""
    _sizes(w_hh, "w_hh", (cell.num_gates * H, H))
    _tensor(h0, "h0", 2, like)
    _sizes(h0, "h0", (B, H))
    _tensor(state0, "state0", 3, like)
    _sizes(state0, "state0", (cell.num_states, B, H))
    P = len(cell.params)
    _require((params is not None) == (P > 0),
             lambda: f"tsrnn: params are {'required' if P else 'not used'} for the cell {cell.name}")
    if params is not None:
        _tensor(params, "params", 2, like)
        _sizes(params, "params", (P, H))
    if steps is not None:
        _require(cell.step_input is not None, lambda: f"tsrnn: the cell {cell.name} takes no step input (steps)")
        _tensor(steps, "steps", len(steps_shape), like)
        _sizes(steps, "steps", steps_shape, shown=steps_shown)
    _require(len(constants) == len(cell.constants),
             lambda: f"tsrnn: the cell {cell.name} takes {len(cell.constants)} constants, got {len(constants)}")


def _batch_sizes(batch_sizes):
    """batch_sizes [T] int64 on the CPU (torch's PackedSequence layout); returns T."""
    _require(batch_sizes.dim() == 1 and batch_sizes.shape[0] >= 1,
             lambda: f"tsrnn: batch_sizes must be [T] with T >= 1, got {list(batch_sizes.shape)}")
    _require(batch_sizes.dtype == torch.int64, lambda: f"tsrnn: batch_sizes must be int64, got {batch_sizes.dtype}")
    _require(batch_sizes.device.type == "cpu", lambda: f"tsrnn: batch_sizes must be on the CPU, got {batch_sizes.device}")
    return batch_sizes.shape[0]


def _rows(name, t, T, B, width, batch_sizes):
    """t is [T, B, width] (padded) or, with batch_sizes, [N, width] (packed; ``packed_offsets``
    checks N against the values)."""
    if batch_sizes is None:
        _sizes(t, name, (T, B, width), shown=f"[T, B, {width}]")
    else:
        _require(t.shape[1] == width, lambda: f"tsrnn: {name} must be [N, {width}] (packed), got {list(t.shape)}")


def recurrence_args(cell, xg, w_hh, h0, state0, params, steps, constants, batch_sizes=None):
    """recurrence_forward's tensors against each other and the cell (csrc/recurrence/op.h's
    check_inputs); returns (T, B, H)."""
    described = _cell(cell)
    _tensor(xg, "xg", 3 if batch_sizes is None else 2, xg)
    _tensor(w_hh, "w_hh", 2, xg)
    H = w_hh.shape[1]
    if batch_sizes is None:
        T, B = xg.shape[0], xg.shape[1]
    else:
        _tensor(h0, "h0", 2, xg)
        T, B = _batch_sizes(batch_sizes), h0.shape[0]
    _nonempty(T, B, H, "xg", xg)
    G = described.num_gates
    packed = batch_sizes is not None
    _layer(described, T, B, H, xg, w_hh, h0, state0, params, steps, constants, (xg.shape[0],) if packed else (T, B),
           "[N]" if packed else None)
    _rows("xg", xg, T, B, G * H, batch_sizes)
    return T, B, H


def recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, params,
                             steps, constants, batch_sizes=None):
    """recurrence_backward's tensors against each other, the cell and the forward's outputs
    (csrc/recurrence/op.h's check_backward_inputs); returns (T, B, H)."""
    described = _cell(cell)
    packed = batch_sizes is not None
    if not packed:
        _require(h_all.dim() == 3, lambda: f"tsrnn: h_all must be [T, B, H], got {list(h_all.shape)}")
        T, B, H = h_all.shape
    else:
        _require(h_all.dim() == 2, lambda: f"tsrnn: h_all must be [N, H] (packed), got {list(h_all.shape)}")
        _tensor(h0, "h0", 2, h_all)
        T, B, H = _batch_sizes(batch_sizes), h0.shape[0], h_all.shape[1]
    _nonempty(T, B, H, "h_all", h_all)
    _tensor(w_hh, "w_hh", 2, h_all)
    _layer(described, T, B, H, h_all, w_hh, h0, state0, params, steps, constants, (h_all.shape[0],) if packed else (T, B),
           "[N]" if packed else None)
    S, KH = described.num_states, described.num_saved * H
    _tensor(state_all, "state_all", 4, h_all)
    _sizes(state_all, "state_all", (T, S, B, H), shown="[T, S, B, H]")
    _tensor(saved, "saved", saved.dim(), h_all)
    saved_hint = " (was the forward run with save=false?)"
    rows = tuple(h_all.shape[:-1])
    shown = f"[N, {KH}]" if packed else f"[T, B, {KH}]"
    _require(saved.dim() == len(rows) + 1, lambda: f"tsrnn: saved must be {shown}, got {list(saved.shape)}{saved_hint}")
    _sizes(saved, "saved", (*rows, KH), shown=shown, hint=saved_hint)
    if grad_h is not None:
        _tensor(grad_h, "grad_h", h_all.dim(), h_all)
        _sizes(grad_h, "grad_h", tuple(h_all.shape))
    if grad_state_n is not None:
        _tensor(grad_state_n, "grad_state_n", 3, h_all)
        _sizes(grad_state_n, "grad_state_n", (S, B, H))
    return T, B, H


def packed_offsets(batch_sizes, B, N):
    """The first packed row of each step, [T + 1] int64 on the CPU (the last is N), after checking
    the values of batch_sizes (read on the host: it lives on the CPU): each in [1, B],
    non-increasing, summing to N, the rows of the packed tensors. For the kernels, not the fakes."""
    sizes = batch_sizes.tolist()
    bad = next((s for s in sizes if not 1 <= s <= B), None)
    if bad is not None:
        raise RuntimeError(f"tsrnn: batch_sizes must be in [1, B={B}], got {bad}")
    if any(later > earlier for earlier, later in zip(sizes, sizes[1:])):
        raise RuntimeError("tsrnn: batch_sizes must be non-increasing (the batch sorted by length, longest first)")
    if sum(sizes) != N:
        raise RuntimeError(f"tsrnn: the packed tensors have {N} rows, batch_sizes sums to {sum(sizes)}")
    return torch.tensor([0] + sizes, dtype=torch.int64).cumsum(0)


def math_dtype(t: torch.Tensor) -> None:
    """The Triton recurrences take float32 or float64 tensors, as the compiled ones (the functional
    layer runs bf16/fp16 layers in float32: states stored in bf16 would round c every step)."""
    if t.dtype not in MATH_DTYPES:
        raise TypeError(f"tsrnn: the Triton recurrence kernels take float32 or float64, got {t.dtype}")
