"""Autograd formulas and shape functions of the compiled operators ``torch.ops.tsrnn.*``.

The schemas and CPU kernels live in ``csrc/``. Registering the backward with
``torch.library.register_autograd`` and the shapes with ``register_fake`` lets ``torch.compile``
trace a module through the whole recurrence as one node, without a graph break.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from tsrnn import backend


class CellShape(NamedTuple):
    """Per-unit sizes of a cell, as in csrc/cpu/cells.h."""

    gates: int  # rows of W per unit
    states: int  # states besides h: c (and a for pLSTM)
    saved: int  # activations saved for backward
    forget: int  # slot of f among the saved activations


CELLS = {
    "lstm": CellShape(gates=4, states=1, saved=4, forget=1),
    "plstm_coupled": CellShape(gates=3, states=2, saved=4, forget=0),
    "plstm_separate": CellShape(gates=4, states=2, saved=5, forget=0),
}


def _check_devices(op, *tensors):
    """The fake (meta) kernels see mixed devices that the dispatcher would not send to a kernel."""
    devices = {t.device for t in tensors if t is not None}
    torch._check(len(devices) == 1, lambda: f"tsrnn: {op} got tensors on several devices: {sorted(map(str, devices))}")


def _recurrence_fake(cell, xg, w_hh, h0, state0, p, dt, eps, save):
    _check_devices("recurrence_forward", xg, w_hh, h0, state0, p, dt)
    shape = CELLS[cell]
    steps, batch, hidden = xg.shape[0], xg.shape[1], w_hh.shape[1]
    saved = (steps, batch, shape.saved * hidden) if save else (0,)
    return (
        xg.new_empty(steps, batch, hidden),
        xg.new_empty(steps, shape.states, batch, hidden),
        xg.new_empty(saved),
    )


def _recurrence_backward_fake(cell, grad_h, grad_state, w_hh, h0, state0, h_all, state_all,
                              saved, p, dt, eps):
    _check_devices("recurrence_backward", grad_h, grad_state, w_hh, h0, state0, h_all, state_all, saved, p, dt)
    steps, batch, hidden = h_all.shape
    return (
        h_all.new_empty(steps, batch, CELLS[cell].gates * hidden),
        torch.empty_like(w_hh),
        torch.empty_like(h0),
        torch.empty_like(state0),
        h_all.new_empty(hidden if p is not None else 0),
    )


def _recurrence_setup(ctx, inputs, output):
    cell, _, w_hh, h0, state0, p, dt, eps, _ = inputs
    h_all, state_all, saved = output
    ctx.save_for_backward(w_hh, h0, state0, h_all, state_all, saved, p, dt)
    ctx.cell, ctx.eps = cell, eps
    ctx.mark_non_differentiable(saved)


def _recurrence_backward(ctx, grad_h, grad_state, _grad_saved):
    w_hh, h0, state0, h_all, state_all, saved, p, dt = ctx.saved_tensors
    grad_xg, grad_w, grad_h0, grad_state0, grad_p = torch.ops.tsrnn.recurrence_backward(
        ctx.cell, grad_h, grad_state, w_hh, h0, state0, h_all, state_all, saved, p, dt, ctx.eps
    )
    return None, grad_xg, grad_w, grad_h0, grad_state0, grad_p if p is not None else None, None, None, None


def _scan_fake(a, u, x0):
    _check_devices("linear_scan_forward", a, u, x0)
    return torch.empty_like(u)


def _scan_backward_fake(grad_x, a, x, x0):
    _check_devices("linear_scan_backward", grad_x, a, x, x0)
    return torch.empty_like(a), torch.empty_like(x), torch.empty_like(x0)


def _scan_setup(ctx, inputs, output):
    a, _, x0 = inputs
    ctx.save_for_backward(a, output, x0)


def _scan_backward(ctx, grad_x):
    a, x, x0 = ctx.saved_tensors
    return torch.ops.tsrnn.linear_scan_backward(grad_x, a, x, x0)


if backend.native_available():
    torch.library.register_fake("tsrnn::recurrence_forward")(_recurrence_fake)
    torch.library.register_fake("tsrnn::recurrence_backward")(_recurrence_backward_fake)
    torch.library.register_autograd(
        "tsrnn::recurrence_forward", _recurrence_backward, setup_context=_recurrence_setup
    )
    torch.library.register_fake("tsrnn::linear_scan_forward")(_scan_fake)
    torch.library.register_fake("tsrnn::linear_scan_backward")(_scan_backward_fake)
    torch.library.register_autograd(
        "tsrnn::linear_scan_forward", _scan_backward, setup_context=_scan_setup
    )

if backend.native_available() and torch.cuda.is_available() and backend.triton_available():
    # On CUDA tensors the recurrence ops run the per-step fused Triton kernels (tsrnn/kernels).
    from tsrnn.kernels import recurrence as _triton_recurrence

    _cuda = torch.library.Library("tsrnn", "IMPL")
    _cuda.impl("recurrence_forward", _triton_recurrence.recurrence_forward, "CUDA")
    _cuda.impl("recurrence_backward", _triton_recurrence.recurrence_backward, "CUDA")
