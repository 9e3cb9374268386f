"""The linear scan operators x_t = a_t x_{t-1} + u_t: their schemas, shape functions and autograd
formula, in the compiled namespace (``torch.ops.tsrnn``) and the Triton one
(``torch.ops.tsrnn_triton_scan``), see ``tsrnn.ops.library``.
"""
from __future__ import annotations

import torch

from tsrnn.ops import extensions  # noqa: F401  (loads the compiled kernels before their schemas)
from tsrnn.ops import library
from tsrnn.ops.linear_scan import checks

# linear_scan_forward: a, u: [T,N], x0: [N] -> x: [T,N]; backward -> grad_a, grad_u, grad_x0.
SCHEMAS = {
    "linear_scan_forward": "(Tensor a, Tensor u, Tensor x0) -> Tensor",
    "linear_scan_backward": "(Tensor grad_x, Tensor a, Tensor x, Tensor x0) -> (Tensor, Tensor, Tensor)",
}
TRITON = {"tsrnn_triton_scan": "tsrnn.ops.linear_scan.triton"}


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
        with library.without_autocast(x), torch.no_grad():
            grads = backward_op(grad_x, a, x, x0)
        return library.first_order_only("linear scan", (x, grad_x), grads)

    return scan_backward


library.define(library.COMPILED, "linear_scan", SCHEMAS, _scan_fake, _scan_backward_fake, _scan_autograd, _scan_setup)
for _namespace, _kernels in TRITON.items():
    library.define(_namespace, "linear_scan", SCHEMAS, _scan_fake, _scan_backward_fake, _scan_autograd, _scan_setup,
                   _kernels)
