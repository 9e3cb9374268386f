"""The operators behind ``tsrnn.functional``: their schemas, shape functions and autograd formulas.

Several namespaces share one set of schemas (and so one autograd formula and one fake kernel
each): ``torch.ops.tsrnn.*``, whose kernels are compiled (csrc/cpu for CPU tensors in
``tsrnn._C``, csrc/cuda for CUDA tensors in ``tsrnn._cuda``), and one namespace per Triton path,
``torch.ops.tsrnn_triton_step.*``, ``tsrnn_triton_persistent.*`` and ``tsrnn_triton_scan.*``,
whose kernels are in ``tsrnn.kernels`` (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1).
``op(path, name)`` gives the operator of a path of tsrnn/backend.py.
Registering the backward with ``torch.library.register_autograd`` and the shapes with
``register_fake`` lets ``torch.compile`` trace a module through a whole recurrence as one node.
"""
from __future__ import annotations

import contextlib
import importlib

import torch

from tsrnn import backend  # noqa: F401  (loads the compiled kernels before the schemas below)
from tsrnn.cells import CELLS

# xg: [T,B,G*H] input projection plus bias, w_hh: [G*H,H], h0: [B,H], state0: [S,B,H],
# p: [H] (pLSTM), dt: [T,B] (pLSTM, optional). recurrence_forward returns h_all: [T,B,H],
# state_n: [S,B,H] the final states, state_all: [T,S,B,H] every step's states and saved: [T,B,K*H]
# the gate activations ([0] when save is false), both only for the backward (not differentiable).
# recurrence_backward takes grad_h: dL/dh_all and grad_state_n: dL/dstate_n (each None where the
# loss does not use it) and returns grad_xg: [T,B,G*H], grad_w_hh: [G*H,H], grad_h0: [B,H],
# grad_state0: [S,B,H], grad_p: [H] ([0] without p).
# linear_scan_forward: a, u: [T,N], x0: [N] -> x: [T,N]; backward -> grad_a, grad_u, grad_x0.
SCHEMAS = {
    "recurrence_forward": "(str cell, Tensor xg, Tensor w_hh, Tensor h0, Tensor state0, Tensor? p, "
                          "Tensor? dt, float eps, bool save) -> (Tensor, Tensor, Tensor, Tensor)",
    "recurrence_backward": "(str cell, Tensor? grad_h, Tensor? grad_state_n, Tensor w_hh, Tensor h0, "
                           "Tensor state0, Tensor h_all, Tensor state_all, Tensor saved, Tensor? p, "
                           "Tensor? dt, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "linear_scan_forward": "(Tensor a, Tensor u, Tensor x0) -> Tensor",
    "linear_scan_backward": "(Tensor grad_x, Tensor a, Tensor x, Tensor x0) -> (Tensor, Tensor, Tensor)",
}
# Compiled only: how many thread blocks the persistent CUDA kernel would use for this cell and
# w_hh (its device, dtype and H), 0 where it does not fit on chip or cannot launch cooperatively.
PLAN_SCHEMA = "recurrence_plan(str cell, Tensor w_hh) -> int"
# The operator namespace of each path of tsrnn/backend.py that runs through an operator: the
# compiled kernels share one (the dispatcher sends CPU tensors to tsrnn._C, CUDA ones to
# tsrnn._cuda); each Triton path has its own, with the Triton module that implements it.
NAMESPACES = {"cpu": "tsrnn", "cuda_coop": "tsrnn", "triton_step": "tsrnn_triton_step",
              "triton_persistent": "tsrnn_triton_persistent", "triton_scan": "tsrnn_triton_scan"}
TRITON_MODULES = {"tsrnn_triton_step": "tsrnn.kernels.per_step", "tsrnn_triton_persistent": "tsrnn.kernels.persistent",
                  "tsrnn_triton_scan": "tsrnn.kernels.linear_scan"}


def op(path: str, name: str):
    """The operator ``name`` (e.g. "recurrence_forward") of a path of tsrnn/backend.py."""
    return getattr(getattr(torch.ops, NAMESPACES[path]), name)


def _check_devices(op_name, *tensors):
    """The fake (meta) kernels see mixed devices that the dispatcher would not send to a kernel."""
    devices = {t.device for t in tensors if t is not None}
    torch._check(len(devices) == 1,
                 lambda: f"tsrnn: {op_name} got tensors on several devices: {sorted(map(str, devices))}")


# The recurrence operators' argument checks, as csrc/recurrence_op.h's with the same messages:
# ranks, shapes, dtypes and devices only, so they read no values, never sync, and trace with fake
# tensors. The fake kernels and the Triton drivers call them.
def _require(cond, message):
    """torch._check(cond, message): a RuntimeError, or on symbolic shapes a guard or runtime assert;
    a plain True returns at once (all the checks of an eager call take ~20 us)."""
    if cond is not True:
        torch._check(cond, message)


def _check_cell(name):
    _require(name in CELLS, lambda: f"tsrnn: unknown cell '{name}', expected one of {', '.join(map(repr, CELLS))}")
    return CELLS[name]


def _check_tensor(t, name, dim, like):
    """t has ``dim`` dimensions and the device and dtype of ``like``."""
    _require(t.dim() == dim, lambda: f"tsrnn: {name} must have {dim} dimensions, got {list(t.shape)}")
    _require(t.device == like.device, lambda: f"tsrnn: {name} is on {t.device}, expected {like.device}")
    _require(t.dtype == like.dtype, lambda: f"tsrnn: {name} has dtype {t.dtype}, expected {like.dtype}")


def _check_sizes(t, name, sizes, shown=None, hint=""):
    """t (of len(sizes) dimensions) is ``sizes``; the message shows ``shown`` (default: sizes)."""
    for size, want in zip(t.shape, sizes):
        _require(size == want, lambda: f"tsrnn: {name} must be {shown or list(sizes)}, got {list(t.shape)}{hint}")


def _check_empty(T, B, H, name, t):
    for size in (T, B, H):
        _require(size >= 1, lambda: f"tsrnn: empty input, {name} {list(t.shape)}")


def _check_layer(cell, T, B, H, like, w_hh, h0, state0, p, dt):
    """What both directions take besides their own tensors: w_hh (rank checked) [G*H, H], h0 [B, H],
    state0 [S, B, H], p [H] (exactly for the cells with p), dt [T, B] (pLSTM, optional)."""
    _check_sizes(w_hh, "w_hh", (cell.num_gates * H, H))
    _check_tensor(h0, "h0", 2, like)
    _check_sizes(h0, "h0", (B, H))
    _check_tensor(state0, "state0", 3, like)
    _check_sizes(state0, "state0", (cell.num_states, B, H))
    _require((p is not None) == cell.has_p,
             lambda: f"tsrnn: p is {'required' if cell.has_p else 'not used'} for this cell")
    if p is not None:
        _check_tensor(p, "p", 1, like)
        _check_sizes(p, "p", (H,))
    if dt is not None:
        _require(cell.has_p, lambda: "tsrnn: dt is only used by the pLSTM cells")
        _check_tensor(dt, "dt", 2, like)
        _check_sizes(dt, "dt", (T, B))


def check_recurrence_args(cell, xg, w_hh, h0, state0, p, dt):
    """recurrence_forward's tensors against each other and the cell (csrc/recurrence_op.h's
    check_inputs); returns (T, B, H)."""
    shape = _check_cell(cell)
    _check_tensor(xg, "xg", 3, xg)
    _check_tensor(w_hh, "w_hh", 2, xg)
    T, B, H = xg.shape[0], xg.shape[1], w_hh.shape[1]
    _check_empty(T, B, H, "xg", xg)
    _check_layer(shape, T, B, H, xg, w_hh, h0, state0, p, dt)
    _check_sizes(xg, "xg", (T, B, shape.num_gates * H), shown=f"[T, B, {shape.num_gates * H}]")
    return T, B, H


def check_recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt):
    """recurrence_backward's tensors against each other, the cell and the forward's outputs
    (csrc/recurrence_op.h's check_backward_inputs); returns (T, B, H)."""
    shape = _check_cell(cell)
    _require(h_all.dim() == 3, lambda: f"tsrnn: h_all must be [T, B, H], got {list(h_all.shape)}")
    T, B, H = h_all.shape
    _check_empty(T, B, H, "h_all", h_all)
    _check_tensor(w_hh, "w_hh", 2, h_all)
    _check_layer(shape, T, B, H, h_all, w_hh, h0, state0, p, dt)
    S, KH = shape.num_states, shape.num_saved * H
    _check_tensor(state_all, "state_all", 4, h_all)
    _check_sizes(state_all, "state_all", (T, S, B, H), shown="[T, S, B, H]")
    _check_tensor(saved, "saved", saved.dim(), h_all)
    saved_hint = " (was the forward run with save=false?)"
    _require(saved.dim() == 3, lambda: f"tsrnn: saved must be [T, B, {KH}], got {list(saved.shape)}{saved_hint}")
    _check_sizes(saved, "saved", (T, B, KH), shown=f"[T, B, {KH}]", hint=saved_hint)
    if grad_h is not None:
        _check_tensor(grad_h, "grad_h", 3, h_all)
        _check_sizes(grad_h, "grad_h", (T, B, H))
    if grad_state_n is not None:
        _check_tensor(grad_state_n, "grad_state_n", 3, h_all)
        _check_sizes(grad_state_n, "grad_state_n", (S, B, H))
    return T, B, H


def _recurrence_fake(cell, xg, w_hh, h0, state0, p, dt, eps, save):
    steps, batch, hidden = check_recurrence_args(cell, xg, w_hh, h0, state0, p, dt)
    shape = CELLS[cell]
    saved = (steps, batch, shape.num_saved * hidden) if save else (0,)
    return (
        xg.new_empty(steps, batch, hidden),
        xg.new_empty(shape.num_states, batch, hidden),
        xg.new_empty(steps, shape.num_states, batch, hidden),
        xg.new_empty(saved),
    )


def _recurrence_backward_fake(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all,
                              saved, p, dt, eps):
    steps, batch, hidden = check_recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all,
                                                          state_all, saved, p, dt)
    return (
        h_all.new_empty(steps, batch, CELLS[cell].num_gates * hidden),
        torch.empty_like(w_hh),
        torch.empty_like(h0),
        torch.empty_like(state0),
        h_all.new_empty(hidden if p is not None else 0),
    )


def _recurrence_setup(ctx, inputs, output):
    cell, _, w_hh, h0, state0, p, dt, eps, _ = inputs
    h_all, _, state_all, saved = output
    ctx.save_for_backward(w_hh, h0, state0, h_all, state_all, saved, p, dt)
    ctx.cell, ctx.eps = cell, eps
    ctx.mark_non_differentiable(state_all, saved)
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not a tensor of zeros


def _recurrence_autograd(backward_op):
    def recurrence_backward(ctx, grad_h, grad_state_n, _grad_state_all, _grad_saved):
        w_hh, h0, state0, h_all, state_all, saved, p, dt = ctx.saved_tensors
        grad_xg, grad_w, grad_h0, grad_state0, grad_p = backward_op(
            ctx.cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, ctx.eps
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


# Per op: (fake forward, fake backward, autograd backward factory, autograd setup_context).
_FORMULAS = {
    "recurrence": (_recurrence_fake, _recurrence_backward_fake, _recurrence_autograd, _recurrence_setup),
    "linear_scan": (_scan_fake, _scan_backward_fake, _scan_autograd, _scan_setup),
}


def _define(namespace: str, op_names) -> torch.library.Library:
    """The schemas, fake kernels and autograd formulas of the ops ``op_names`` ("recurrence",
    "linear_scan"), each a ``{op}_forward`` / ``{op}_backward`` pair, in ``namespace``."""
    lib = torch.library.Library(namespace, "DEF")
    for op in op_names:
        forward, backward = f"{namespace}::{op}_forward", f"{namespace}::{op}_backward"
        fake_forward, fake_backward, autograd, setup = _FORMULAS[op]
        lib.define(f"{op}_forward" + SCHEMAS[f"{op}_forward"])
        lib.define(f"{op}_backward" + SCHEMAS[f"{op}_backward"])
        torch.library.register_fake(forward, fake_forward, lib=lib)
        torch.library.register_fake(backward, fake_backward, lib=lib)
        backward_op = getattr(getattr(torch.ops, namespace), f"{op}_backward")
        torch.library.register_autograd(forward, autograd(backward_op), setup_context=setup, lib=lib)
    return lib


_LIBRARIES = {"tsrnn": _define("tsrnn", ("recurrence", "linear_scan"))}
_LIBRARIES["tsrnn"].define(PLAN_SCHEMA)
for _namespace, _module in TRITON_MODULES.items():
    _op = "linear_scan" if _namespace.endswith("scan") else "recurrence"
    _LIBRARIES[_namespace] = _define(_namespace, (_op,))
    for _name in (f"{_op}_forward", f"{_op}_backward"):
        for _device in ("CPU", "CUDA"):
            _LIBRARIES[_namespace].impl(_name, _triton_kernel(_module, _name), _device)
