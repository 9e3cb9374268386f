"""The input projection x W_ih^T + b of every operator path's layer: torch's GEMM in the call's
precision (``torch_projection``), on CUDA's tensor cores (``tensor_core_projection``), or the CPU
engine's (``cpu_projection``, csrc/gemm/projection.cpp); and the CPU GEMM kernels' schemas.
"""
from __future__ import annotations

import functools

import torch

from tsrnn import precision
from tsrnn.ops import extensions  # noqa: F401  (loads the compiled kernels before their schemas)
from tsrnn.ops import library

# cpu_projection: x [M, I], w [N, I], bias [N] -> [M, N]; its backward takes dL/d(result) and which
# of dx, dw, dbias to compute ([0] for the others). For the tests and benchmarks: cpu_gemm, C = init
# + a b (init None, [N] or [M, N]; a's row sums with row_sums, else [0]) by the named kernel
# (csrc/gemm/panel_gemm.h) or, ``blocked``, csrc/gemm/blocked_gemm.h; the kernels this CPU runs;
# the one the loops use ("aten": ATen's); with TSRNN_CPU_PROFILE=1, seconds per phase since the last
# call (csrc/recurrence/cpu/phase_clock.h).
CPU_SCHEMAS = ("cpu_projection(Tensor x, Tensor w, Tensor? bias) -> Tensor",
               "cpu_projection_backward(Tensor grad, Tensor x, Tensor w, bool[3] mask) -> (Tensor, Tensor, Tensor)",
               "cpu_gemm(Tensor a, Tensor b, str kernel, bool blocked=False, Tensor? init=None, bool row_sums=False) -> (Tensor, Tensor)", "cpu_gemm_kernels() -> str[]",
               "cpu_gemm_in_use() -> str", "cpu_loop_profile() -> float[]")


TENSOR_CORE = "tsrnn_tensor_core"  # tsrnn._cuda's GEMMs on the tensor cores (csrc/gemm/cuda/tensor_core_gemm.h)
# mm: bias + a b in float32, a and b float32 holding TF32 values or both bfloat16; round_tf32: as
# tsrnn.precision.round_operands, in one kernel.
TENSOR_CORE_SCHEMAS = ("mm(Tensor a, Tensor b, Tensor? bias) -> Tensor", "round_tf32(Tensor x) -> Tensor")


def define_tensor_core(namespace: str) -> None:
    """Defines the tensor-core GEMM ops (TENSOR_CORE_SCHEMAS) in ``namespace``, with their fake kernels."""
    lib = library.library(namespace)
    for schema in TENSOR_CORE_SCHEMAS:
        lib.define(schema)
    torch.library.register_fake(f"{namespace}::mm", lambda a, b, bias: a.new_empty(a.shape[0], b.shape[1], dtype=torch.float32),
                                lib=lib)
    torch.library.register_fake(f"{namespace}::round_tf32", lambda x: x.new_empty(x.shape), lib=lib)


@functools.cache
def _has_tensor_cores(namespace: str, device_type: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::mm", device_type.upper())


def torch_projection(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                     products: str = "ieee", tensor_cores: str | None = None) -> torch.Tensor:
    """x w^T + bias through torch, its GEMMs and its gradients' (dx = g w, dw = g^T x) in
    ``products`` (``tsrnn.precision.products``): "ieee", as torch's flags say; "tf32" or "bf16",
    every operand rounded first (``tsrnn.precision.round_operands``, w once per version), giving
    the TF32 (bf16) GEMM's result whatever torch's flags say. Float32 GEMMs run on the ops of
    ``tensor_cores`` where it has a kernel for the device. A bf16 (fp16) layer's GEMM runs in its
    dtype."""
    if products == "ieee":
        return x @ w.t() if bias is None else torch.addmm(bias, x, w.t())
    return _RoundedProjection.apply(x, w, bias, products, tensor_cores)


def tensor_core_projection(namespace: str = TENSOR_CORE):
    """``torch_projection`` with its float32 GEMMs in a precision on the ops of ``namespace``."""
    return functools.partial(torch_projection, tensor_cores=namespace)


@functools.cache
def _tensor_core_rounding(namespace: str, products: str):
    """The operand rounding of ``namespace``'s ops in ``products``, one function per pair (the
    identity ``tsrnn.precision.rounded_weight`` keys its copies on)."""
    if products == "tf32":
        return getattr(torch.ops, namespace).round_tf32
    return functools.partial(torch.Tensor.to, dtype=torch.bfloat16)


class _Gemms:
    """A projection's rounding and GEMM: ``namespace``'s ops where usable, else torch's."""

    def __init__(self, products: str, namespace: str | None, x: torch.Tensor, w: torch.Tensor):
        self.products = products
        usable = (namespace is not None and x.dtype == w.dtype == torch.float32
                  and _has_tensor_cores(namespace, x.device.type))
        self.ops = getattr(torch.ops, namespace) if usable else None
        self.rounding = _tensor_core_rounding(namespace, products) if usable else None

    def round(self, t: torch.Tensor) -> torch.Tensor:
        return precision.round_operands(t, self.products) if self.rounding is None else self.rounding(t)

    def weight(self, w: torch.Tensor) -> torch.Tensor:
        return precision.rounded_weight(w, self.products, self.rounding)

    def mm(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.ops is not None:
            return self.ops.mm(a, b, bias)
        return a @ b if bias is None else torch.addmm(bias, a, b)


class _RoundedProjection(torch.autograd.Function):
    """x w^T + bias with the operands of the GEMM and of its gradients' GEMMs rounded to
    ``products``; the bias's gradient sums the incoming gradient as it is (no product)."""

    @staticmethod
    def forward(ctx, x, w, bias, products, tensor_cores):
        ctx.save_for_backward(x, w)
        gemms = _Gemms(products, tensor_cores, x, w)
        ctx.products, ctx.gemms, ctx.has_bias = products, gemms, bias is not None
        return gemms.mm(gemms.round(x), gemms.weight(w).t(), bias)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        needs = ctx.needs_input_grad
        with library.without_autocast(grad):
            db = grad.sum(0) if ctx.has_bias and needs[2] else None
            if torch.is_grad_enabled():  # differentiated again: torch's GEMMs, the rounding's derivative the identity's
                g = precision.straight_through(grad, ctx.products)
                dx = g @ precision.straight_through(w, ctx.products) if needs[0] else None
                dw = g.t() @ precision.straight_through(x, ctx.products) if needs[1] else None
                precision.drop_rounded(w)
                return dx, dw, db, None, None
            gemms = ctx.gemms
            g = gemms.round(grad)
            dx = gemms.mm(g, gemms.weight(w)) if needs[0] else None
            precision.drop_rounded(w)  # its last use in a step: a .data write may follow (rounded_weight)
            dw = gemms.mm(g.t(), gemms.round(x)) if needs[1] else None
        return dx, dw, db, None, None


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
    """dx = grad w, dw = grad^T x, dbias = grad's column sums (torch's ops under create_graph)."""
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
define_tensor_core(TENSOR_CORE)
torch.library.register_fake("tsrnn::cpu_projection", _projection_fake, lib=_lib)
torch.library.register_fake("tsrnn::cpu_projection_backward", _projection_backward_fake, lib=_lib)
library.register_autograd(library.COMPILED, "cpu_projection", _projection_backward, _projection_setup, _lib)
cpu_projection = functools.partial(library.call, library.COMPILED, "cpu_projection")
