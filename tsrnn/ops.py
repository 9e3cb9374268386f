"""The operators behind ``tsrnn.functional``: their schemas, shape functions and autograd formulas.

Several namespaces share one set of schemas (and so one autograd formula and one fake kernel
each): ``torch.ops.tsrnn.*``, whose kernels are compiled (csrc/cpu for CPU tensors in
``tsrnn._C``, csrc/cuda for CUDA tensors in ``tsrnn._cuda``), and one namespace per Triton path,
``torch.ops.tsrnn_triton_step.*``, ``tsrnn_triton_persistent.*`` and ``tsrnn_triton_scan.*``,
whose kernels are in ``tsrnn.kernels`` (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1).
Which path has which namespace and kernel module is tsrnn/backend.py's registry;
``op(path, name)`` gives the operator of a path.
Registering the backward with ``torch.library.register_autograd`` and the shapes with
``register_fake`` lets ``torch.compile`` trace a module through a whole recurrence as one node.
"""
from __future__ import annotations

import contextlib
import importlib

import torch

from tsrnn import backend  # loads the compiled kernels (tsrnn.extensions) before the schemas below
from tsrnn.cells import CELLS
from tsrnn.kernels import checks

# xg: [T,B,G*H] input projection plus bias, w_hh: [G*H,H], h0: [B,H], state0: [S,B,H],
# p: [H] (pLSTM), dt: [T,B] (pLSTM, optional). recurrence_forward returns h_all: [T,B,H],
# state_n: [S,B,H] the final states, state_all: [T,S,B,H] every step's states and saved: [T,B,K*H]
# the gate activations ([0] when save is false), both only for the backward (not differentiable).
# recurrence_backward takes grad_h: dL/dh_all and grad_state_n: dL/dstate_n (each None where the
# loss does not use it) and returns grad_xg: [T,B,G*H], grad_w_hh: [G*H,H], grad_h0: [B,H],
# grad_state0: [S,B,H], grad_p: [H] ([0] without p).
# Packed sequences (``batch_sizes`` given, as torch's PackedSequence lays them out): batch_sizes
# [T] int64 on the CPU, each >= 1, non-increasing, at most B; step t runs the rows b < batch_sizes[t]
# only (the batch sorted by length, longest first), row offsets[t] + b of the packed tensors, with
# offsets[t] = batch_sizes[:t].sum() and N = batch_sizes.sum(). Then xg: [N,G*H], dt: [N],
# h_all and grad_h: [N,H], saved: [N,K*H], grad_xg: [N,G*H]; state_all stays [T,S,B,H] (the rows
# a step does not run are zero) and state_n[:, b] holds row b's states after its last
# step (state0[:, b] for a row of no step, b >= batch_sizes[0]).
# linear_scan_forward: a, u: [T,N], x0: [N] -> x: [T,N]; backward -> grad_a, grad_u, grad_x0.
SCHEMAS = {
    "recurrence_forward": "(str cell, Tensor xg, Tensor w_hh, Tensor h0, Tensor state0, Tensor? p, "
                          "Tensor? dt, float eps, bool save, Tensor? batch_sizes=None) -> (Tensor, Tensor, Tensor, Tensor)",
    "recurrence_backward": "(str cell, Tensor? grad_h, Tensor? grad_state_n, Tensor w_hh, Tensor h0, "
                           "Tensor state0, Tensor h_all, Tensor state_all, Tensor saved, Tensor? p, "
                           "Tensor? dt, float eps, Tensor? batch_sizes=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "linear_scan_forward": "(Tensor a, Tensor u, Tensor x0) -> Tensor",
    "linear_scan_backward": "(Tensor grad_x, Tensor a, Tensor x, Tensor x0) -> (Tensor, Tensor, Tensor)",
}
# Compiled only: how many thread blocks the persistent CUDA kernel would use for this cell and
# w_hh (its device, dtype and H), 0 where it does not fit on chip or cannot launch cooperatively.
PLAN_SCHEMA = "recurrence_plan(str cell, Tensor w_hh) -> int"
# Compiled only, for the tests and benchmarks: the CPU engine's GEMM kernels (csrc/cpu/panel_gemm.h),
# C = init + a b through the kernel named `kernel` by the time loops' driver or, if `blocked`, by
# the threaded one of the large GEMMs (csrc/cpu/blocked_gemm.h; init None, a row [N] or [M, N];
# with row_sums, also a's row sums, else [0]); the names of the kernels this CPU runs; the one the time loops use ("aten" for ATen's
# GEMM); and, with TSRNN_CPU_PROFILE=1, the seconds per phase one thread of the loops spent since
# the last call, on average (csrc/cpu/phase_clock.h, bench/cpu_profile.py).
# The CPU engine's input projection x w^T + bias and its backward (csrc/cpu/projection.cpp), the
# "cpu" path's in place of torch.addmm: x [M, I], w [N, I], bias [N] -> [M, N]; the backward takes
# dL/d(result) and which of dx, dw, dbias to compute ([0] for the others).
CPU_SCHEMAS = ("cpu_projection(Tensor x, Tensor w, Tensor? bias) -> Tensor",
               "cpu_projection_backward(Tensor grad, Tensor x, Tensor w, bool[3] mask) -> (Tensor, Tensor, Tensor)",
               "cpu_gemm(Tensor a, Tensor b, str kernel, bool blocked=False, Tensor? init=None, bool row_sums=False) -> (Tensor, Tensor)", "cpu_gemm_kernels() -> str[]",
               "cpu_gemm_in_use() -> str", "cpu_loop_profile() -> float[]")


def op(path: str, name: str):
    """The operator ``name`` (e.g. "recurrence_forward") of a path of tsrnn/backend.py's registry."""
    return getattr(getattr(torch.ops, backend.REGISTRY[path].namespace), name)


def projection(path: str, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The input projection x w^T + bias of an operator path's layer: the CPU engine's own GEMM on
    the "cpu" path (``cpu_projection``), torch's elsewhere."""
    if path == "cpu":
        return torch.ops.tsrnn.cpu_projection(x, w, bias)
    return x @ w.t() if bias is None else torch.addmm(bias, x, w.t())


def _projection_fake(x, w, bias):
    torch._check(x.dim() == 2 and w.dim() == 2 and x.shape[1] == w.shape[1],
                 lambda: f"tsrnn: cpu_projection takes x [M, I] and w [N, I], got {tuple(x.shape)} and {tuple(w.shape)}")
    return x.new_empty(x.shape[0], w.shape[0])


def _projection_backward_fake(grad, x, w, mask):  # contiguous, as the kernel returns them
    dx = x.new_empty(x.shape) if mask[0] else x.new_empty(0)
    dw = w.new_empty(w.shape) if mask[1] else w.new_empty(0)
    return dx, dw, grad.new_empty(w.shape[0] if mask[2] else 0)


def _projection_setup(ctx, inputs, output):
    x, w, bias = inputs
    ctx.save_for_backward(x, w)
    ctx.has_bias = bias is not None


def _projection_backward(ctx, grad):
    """dx = grad w, dw = grad^T x, dbias = the column sums of grad: the engine's kernel, or torch's
    differentiable ops when the backward itself is differentiated (``create_graph=True``)."""
    x, w = ctx.saved_tensors
    needs = ctx.needs_input_grad
    wanted = (needs[0], needs[1], ctx.has_bias and needs[2])
    if torch.is_grad_enabled():
        with _without_autocast(x):
            return (grad @ w if wanted[0] else None, grad.t() @ x if wanted[1] else None,
                    grad.sum(0) if wanted[2] else None)
    dx, dw, db = torch.ops.tsrnn.cpu_projection_backward(grad, x, w, list(wanted))
    return tuple(g if want else None for g, want in zip((dx, dw, db), wanted))


def _recurrence_fake(cell, xg, w_hh, h0, state0, p, dt, eps, save, batch_sizes=None):
    steps, batch, hidden = checks.recurrence_args(cell, xg, w_hh, h0, state0, p, dt, batch_sizes)
    described = CELLS[cell]
    rows = xg.shape[:-1]  # (T, B) or, packed, (N,)
    return (
        xg.new_empty(*rows, hidden),
        xg.new_empty(described.num_states, batch, hidden),
        xg.new_empty(steps, described.num_states, batch, hidden),
        xg.new_empty(*rows, described.num_saved * hidden) if save else xg.new_empty(0),
    )


def _recurrence_backward_fake(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all,
                              saved, p, dt, eps, batch_sizes=None):
    checks.recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt,
                                    batch_sizes)
    return (
        h_all.new_empty(*h_all.shape[:-1], CELLS[cell].num_gates * h_all.shape[-1]),
        torch.empty_like(w_hh),
        torch.empty_like(h0),
        torch.empty_like(state0),
        h_all.new_empty(h_all.shape[-1] if p is not None else 0),
    )


def _recurrence_setup(ctx, inputs, output):
    cell, _, w_hh, h0, state0, p, dt, eps, _, *batch_sizes = inputs
    h_all, _, state_all, saved = output
    ctx.save_for_backward(w_hh, h0, state0, h_all, state_all, saved, p, dt, *batch_sizes)
    ctx.cell, ctx.eps = cell, eps
    ctx.mark_non_differentiable(state_all, saved)
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not a tensor of zeros


def _without_autocast(like: torch.Tensor):
    """Autocast off for ``like``'s device type: a backward run inside an autocast region computes
    in the dtypes its forward saved, as the forward did (tsrnn.precision)."""
    if like.device.type not in ("cpu", "cuda"):
        return contextlib.nullcontext()
    return torch.autocast(like.device.type, enabled=False)


DOUBLE_BACKWARD = ("tsrnn: the fused {op} kernels compute first derivatives only, and this backward was "
                   "differentiated again (create_graph=True: a gradient penalty, a Hessian-vector product); run "
                   "this layer with backend='reference' (or, for the LSTM on CPU, 'onednn'), whose step loops "
                   "torch differentiates to any order")


class _FirstOrderOnly(torch.autograd.Function):
    """``tensors`` unchanged, as results that depend on ``anchors``, whose backward raises
    ``message``: a fused kernel's backward run under create_graph=True. Without it torch would
    treat the kernel's results as constants, and a second derivative would silently miss every
    term through them. The anchors, the forward's saved output and the incoming gradients, put
    this node on every path from the results back to what the forward or the gradients depend on."""

    @staticmethod
    def forward(ctx, message, num_anchors, *tensors):
        ctx.message = message
        return tuple(t.view_as(t) for t in tensors[num_anchors:])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def _first_order_only(op: str, anchors, results: tuple) -> tuple:
    """``results`` (tensors or None) as they are or, when the backward that computed them is itself
    being recorded (create_graph=True), as results whose own backward raises DOUBLE_BACKWARD."""
    if not torch.is_grad_enabled():
        return results
    present = [i for i, r in enumerate(results) if r is not None]
    anchors = [a for a in anchors if a is not None and a.requires_grad]
    marked = _FirstOrderOnly.apply(DOUBLE_BACKWARD.format(op=op), len(anchors), *anchors,
                                   *(results[i] for i in present))
    results = list(results)
    for i, r in zip(present, marked):
        results[i] = r
    return tuple(results)


def _recurrence_autograd(backward_op):
    def recurrence_backward(ctx, grad_h, grad_state_n, _grad_state_all, _grad_saved):
        w_hh, h0, state0, h_all, state_all, saved, p, dt, *batch_sizes = ctx.saved_tensors
        with _without_autocast(h_all), torch.no_grad():
            grad_xg, grad_w, grad_h0, grad_state0, grad_p = backward_op(
                ctx.cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, ctx.eps, *batch_sizes
            )
        grads = _first_order_only("recurrence", (h_all, grad_h, grad_state_n),
                                  (grad_xg, grad_w, grad_h0, grad_state0, grad_p if p is not None else None))
        return (None, *grads, None, None, None, *(None for _ in batch_sizes))

    return recurrence_backward


def _scan_fake(a, u, x0):
    checks.scan_args(a, u, x0)
    return torch.empty_like(u)


def _scan_backward_fake(grad_x, a, x, x0):
    checks.scan_backward_args(grad_x, a, x, x0)
    return torch.empty_like(a), torch.empty_like(x), torch.empty_like(x0)


def _scan_setup(ctx, inputs, output):
    a, _, x0 = inputs
    ctx.save_for_backward(a, output, x0)


def _scan_autograd(backward_op):
    def scan_backward(ctx, grad_x):
        a, x, x0 = ctx.saved_tensors
        with _without_autocast(x), torch.no_grad():
            grads = backward_op(grad_x, a, x, x0)
        return _first_order_only("linear scan", (x, grad_x), grads)

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


def _namespaces() -> dict[str, tuple[tuple[str, ...], str | None]]:
    """{namespace: (its ops, the module of its Python kernels or None for compiled ones)} over the
    registry's operator paths (the compiled "cpu" and "cuda_coop" share one namespace)."""
    spaces = {}
    for path in backend.REGISTRY.values():
        if path.namespace is not None:
            ops, _ = spaces.get(path.namespace, ((), None))
            spaces[path.namespace] = (ops + tuple(o for o in path.ops if o not in ops), path.kernels)
    return spaces


_LIBRARIES = {}
for _namespace, (_ops, _module) in _namespaces().items():
    _LIBRARIES[_namespace] = _define(_namespace, _ops)
    if _module is None:  # compiled: the extensions register the kernels, and the planning op
        for _schema in (PLAN_SCHEMA, *CPU_SCHEMAS):
            _LIBRARIES[_namespace].define(_schema)
        torch.library.register_fake(f"{_namespace}::cpu_projection", _projection_fake, lib=_LIBRARIES[_namespace])
        torch.library.register_fake(f"{_namespace}::cpu_projection_backward", _projection_backward_fake,
                                    lib=_LIBRARIES[_namespace])
        torch.library.register_autograd(f"{_namespace}::cpu_projection", _projection_backward,
                                        setup_context=_projection_setup, lib=_LIBRARIES[_namespace])
        continue
    for _name in (f"{o}_{d}" for o in _ops for d in ("forward", "backward")):
        for _device in ("CPU", "CUDA"):
            _LIBRARIES[_namespace].impl(_name, _triton_kernel(_module, _name), _device)
