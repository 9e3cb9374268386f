"""The operators behind ``tsrnn.functional``: their schemas, shape functions and autograd formulas.

Two namespaces share one set of schemas (and so one autograd formula and one fake kernel each):
``torch.ops.tsrnn.*``, whose kernels are compiled (csrc/cpu for CPU tensors in ``tsrnn._C``,
csrc/cuda for CUDA tensors in ``tsrnn._cuda``), and ``torch.ops.tsrnn_triton.*``, whose kernels
are the Triton ones in ``tsrnn.kernels`` (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1).
Registering the backward with ``torch.library.register_autograd`` and the shapes with
``register_fake`` lets ``torch.compile`` trace a module through a whole recurrence as one node.
"""
from __future__ import annotations

import contextlib
import importlib
from typing import NamedTuple

import torch

from tsrnn import backend  # noqa: F401  (loads the compiled kernels before the schemas below)

# xg: [T,B,G*H] input projection plus bias, w_hh: [G*H,H], h0: [B,H], state0: [S,B,H],
# p: [H] (pLSTM), dt: [T,B] (pLSTM, optional). Returns h_all: [T,B,H], state_all: [T,S,B,H],
# saved: [T,B,K*H] gate activations for backward ([0] when save is false).
# recurrence_backward returns grad_xg: [T,B,G*H], grad_w_hh: [G*H,H], grad_h0: [B,H],
# grad_state0: [S,B,H], grad_p: [H] ([0] without p).
# linear_scan_forward: a, u: [T,N], x0: [N] -> x: [T,N]; backward -> grad_a, grad_u, grad_x0.
SCHEMAS = {
    "recurrence_forward": "(str cell, Tensor xg, Tensor w_hh, Tensor h0, Tensor state0, Tensor? p, "
                          "Tensor? dt, float eps, bool save) -> (Tensor, Tensor, Tensor)",
    "recurrence_backward": "(str cell, Tensor? grad_h, Tensor? grad_state, Tensor w_hh, Tensor h0, "
                           "Tensor state0, Tensor h_all, Tensor state_all, Tensor saved, Tensor? p, "
                           "Tensor? dt, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "linear_scan_forward": "(Tensor a, Tensor u, Tensor x0) -> Tensor",
    "linear_scan_backward": "(Tensor grad_x, Tensor a, Tensor x, Tensor x0) -> (Tensor, Tensor, Tensor)",
}
# Compiled only: how many thread blocks the persistent CUDA kernel would use for this cell and
# w_hh (its device, dtype and H), 0 where it does not fit on chip or cannot launch cooperatively.
PLAN_SCHEMA = "recurrence_plan(str cell, Tensor w_hh) -> int"
NAMESPACES = {"native": "tsrnn", "triton": "tsrnn_triton"}
TRITON_MODULES = {"recurrence": "tsrnn.kernels.recurrence", "linear_scan": "tsrnn.kernels.linear_scan"}


def op(impl: str, name: str):
    """The operator ``name`` of the backend ``impl`` ("native" or "triton")."""
    return getattr(getattr(torch.ops, NAMESPACES[impl]), name)


class CellShape(NamedTuple):
    """Per-unit sizes of a cell, as in csrc/cells.h."""

    gates: int  # rows of W per unit
    states: int  # states besides h: c (and a for pLSTM)
    saved: int  # activations saved for backward
    forget: int  # slot of f among the saved activations


CELLS = {
    "lstm": CellShape(gates=4, states=1, saved=4, forget=1),
    "plstm_coupled": CellShape(gates=3, states=2, saved=4, forget=0),
    "plstm_separate": CellShape(gates=4, states=2, saved=5, forget=0),
}


def _check_devices(op_name, *tensors):
    """The fake (meta) kernels see mixed devices that the dispatcher would not send to a kernel."""
    devices = {t.device for t in tensors if t is not None}
    torch._check(len(devices) == 1,
                 lambda: f"tsrnn: {op_name} got tensors on several devices: {sorted(map(str, devices))}")


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


def _recurrence_autograd(backward_op):
    def recurrence_backward(ctx, grad_h, grad_state, _grad_saved):
        w_hh, h0, state0, h_all, state_all, saved, p, dt = ctx.saved_tensors
        grad_xg, grad_w, grad_h0, grad_state0, grad_p = backward_op(
            ctx.cell, grad_h, grad_state, w_hh, h0, state0, h_all, state_all, saved, p, dt, ctx.eps
        )
        return None, grad_xg, grad_w, grad_h0, grad_state0, grad_p if p is not None else None, None, None, None

    return recurrence_backward


def _scan_fake(a, u, x0):
    _check_devices("linear_scan_forward", a, u, x0)
    return torch.empty_like(u)


def _scan_backward_fake(grad_x, a, x, x0):
    _check_devices("linear_scan_backward", grad_x, a, x, x0)
    return torch.empty_like(a), torch.empty_like(x), torch.empty_like(x0)


def _scan_setup(ctx, inputs, output):
    a, _, x0 = inputs
    ctx.save_for_backward(a, output, x0)


def _scan_autograd(backward_op):
    def scan_backward(ctx, grad_x):
        a, x, x0 = ctx.saved_tensors
        return backward_op(grad_x, a, x, x0)

    return scan_backward


@contextlib.contextmanager
def _on_device_exact_fp32(args):
    """Triton launches on the current CUDA device, not the tensors' one, and the Triton drivers'
    torch matmuls (dh, dW_hh) would use TF32 if the user allowed it: run on the tensors' device
    with TF32 off, as the kernels' own IEEE dots."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
    if device is None:
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.cuda.device(device):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _triton_kernel(module: str, name: str):
    """Calls ``module.name``, imported at the first call: importing triton costs a second, and
    TRITON_INTERPRET must be set before the kernels' module is imported."""

    def kernel(*args):
        with _on_device_exact_fp32(args):
            return getattr(importlib.import_module(module), name)(*args)

    return kernel


def _define(namespace: str) -> torch.library.Library:
    lib = torch.library.Library(namespace, "DEF")
    for name, schema in SCHEMAS.items():
        lib.define(name + schema)
    qualified = lambda name: f"{namespace}::{name}"  # noqa: E731
    torch.library.register_fake(qualified("recurrence_forward"), _recurrence_fake, lib=lib)
    torch.library.register_fake(qualified("recurrence_backward"), _recurrence_backward_fake, lib=lib)
    torch.library.register_autograd(qualified("recurrence_forward"),
                                    _recurrence_autograd(getattr(torch.ops, namespace).recurrence_backward),
                                    setup_context=_recurrence_setup, lib=lib)
    torch.library.register_fake(qualified("linear_scan_forward"), _scan_fake, lib=lib)
    torch.library.register_fake(qualified("linear_scan_backward"), _scan_backward_fake, lib=lib)
    torch.library.register_autograd(qualified("linear_scan_forward"),
                                    _scan_autograd(getattr(torch.ops, namespace).linear_scan_backward),
                                    setup_context=_scan_setup, lib=lib)
    return lib


_native = _define(NAMESPACES["native"])
_native.define(PLAN_SCHEMA)
_triton = _define(NAMESPACES["triton"])
for _name in SCHEMAS:
    _kernel = _triton_kernel(TRITON_MODULES[_name.rsplit("_", 1)[0]], _name)
    for _device in ("CPU", "CUDA"):
        _triton.impl(_name, _kernel, _device)
