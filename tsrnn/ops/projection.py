"""The input projection x W_ih^T + b of every operator path's layer: torch's GEMM in the call's
precision (``torch_projection``), or on the "cpu" path the CPU engine's own
(csrc/gemm/projection.cpp, ``torch.ops.tsrnn.cpu_projection``), with its fake kernel and autograd
formula; and the schemas of the CPU GEMM kernels the tests and benchmarks call directly.
"""
from __future__ import annotations

import functools

import torch

from tsrnn import precision
from tsrnn.ops import extensions  # noqa: F401  (loads the compiled kernels before their schemas)
from tsrnn.ops import library

# Compiled only, for the tests and benchmarks: the CPU engine's GEMM kernels (csrc/gemm/panel_gemm.h),
# C = init + a b through the kernel named `kernel` by the time loops' driver or, if `blocked`, by
# the threaded one of the large GEMMs (csrc/gemm/blocked_gemm.h; init None, a row [N] or [M, N];
# with row_sums, also a's row sums, else [0]); the names of the kernels this CPU runs; the one the time loops use ("aten" for ATen's
# GEMM); and, with TSRNN_CPU_PROFILE=1, the seconds per phase one thread of the loops spent since
# the last call, on average (csrc/recurrence/cpu/phase_clock.h, bench/cpu_profile.py).
# The CPU engine's input projection x w^T + bias and its backward (csrc/gemm/projection.cpp), the
# "cpu" path's in place of torch.addmm: x [M, I], w [N, I], bias [N] -> [M, N]; the backward takes
# dL/d(result) and which of dx, dw, dbias to compute ([0] for the others).
CPU_SCHEMAS = ("cpu_projection(Tensor x, Tensor w, Tensor? bias) -> Tensor",
               "cpu_projection_backward(Tensor grad, Tensor x, Tensor w, bool[3] mask) -> (Tensor, Tensor, Tensor)",
               "cpu_gemm(Tensor a, Tensor b, str kernel, bool blocked=False, Tensor? init=None, bool row_sums=False) -> (Tensor, Tensor)", "cpu_gemm_kernels() -> str[]",
               "cpu_gemm_in_use() -> str", "cpu_loop_profile() -> float[]")


def torch_projection(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                     products: str = "ieee") -> torch.Tensor:
    """x w^T + bias through torch (addmm), its GEMMs and those of its gradients (dx = g w,
    dw = g^T x) in ``products`` (``tsrnn.precision.products``, read once per layer call by
    ``tsrnn.ops.recurrence.paths.run_operator``): "ieee", torch's GEMMs as torch's flags say;
    "tf32" or "bf16", every operand (x, w and the incoming gradient g) rounded to that format
    first (``tsrnn.precision.round_operands``; w's copy kept per version of w,
    ``tsrnn.precision.rounded_weight``), so a float32 GEMM gives the TF32 (bf16) GEMM's result
    whatever torch.backends.cuda.matmul says, and no flag is touched. A bf16 (fp16) layer's GEMM
    runs in its dtype, as for "ieee"."""
    if products == "ieee":
        return x @ w.t() if bias is None else torch.addmm(bias, x, w.t())
    return _RoundedProjection.apply(x, w, bias, products)


class _RoundedProjection(torch.autograd.Function):
    """x w^T + bias with the operands of the GEMM and of its gradients' GEMMs rounded to
    ``products``; the bias's gradient sums the incoming gradient as it is (no product)."""

    @staticmethod
    def forward(ctx, x, w, bias, products):
        ctx.save_for_backward(x, w)
        ctx.products, ctx.has_bias = products, bias is not None
        xr, wr = precision.round_operands(x, products), precision.rounded_weight(w, products)
        return xr @ wr.t() if bias is None else torch.addmm(bias, xr, wr.t())

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        needs = ctx.needs_input_grad
        # differentiated again (create_graph=True), the rounding's derivative is the identity's
        differentiated = torch.is_grad_enabled()
        rounded = precision.straight_through if differentiated else precision.round_operands
        with library.without_autocast(grad):
            g = rounded(grad, ctx.products)
            wr = rounded(w, ctx.products) if differentiated else precision.rounded_weight(w, ctx.products)
            dx = g @ wr if needs[0] else None
            dw = g.t() @ rounded(x, ctx.products) if needs[1] else None
            db = grad.sum(0) if ctx.has_bias and needs[2] else None
        return dx, dw, db, None


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
        with library.without_autocast(x):
            return (grad @ w if wanted[0] else None, grad.t() @ x if wanted[1] else None,
                    grad.sum(0) if wanted[2] else None)
    dx, dw, db = torch.ops.tsrnn.cpu_projection_backward(grad, x, w, list(wanted))
    return tuple(g if want else None for g, want in zip((dx, dw, db), wanted))


_lib = library.library(library.COMPILED)
for _schema in CPU_SCHEMAS:
    _lib.define(_schema)
torch.library.register_fake("tsrnn::cpu_projection", _projection_fake, lib=_lib)
torch.library.register_fake("tsrnn::cpu_projection_backward", _projection_backward_fake, lib=_lib)
library.register_autograd(library.COMPILED, "cpu_projection", _projection_backward, _projection_setup, _lib)
# cpu_projection(x, w, bias): x w^T + bias through the CPU engine's GEMM, the "cpu" path's projection
cpu_projection = functools.partial(library.call, library.COMPILED, "cpu_projection")
