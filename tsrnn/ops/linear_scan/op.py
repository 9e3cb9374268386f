"""The linear scan operators x_t = a_t x_{t-1} + u_t: their schemas, shape functions and autograd
formula, in the compiled namespace (``torch.ops.tsrnn``) and the Triton one
(``torch.ops.tsrnn_triton_scan``), see ``tsrnn.ops.library``.
"""
from __future__ import annotations

import torch

from tsrnn.ops import extensions  # noqa: F401  (loads the compiled kernels before their schemas)
from tsrnn.ops import library
from tsrnn.ops.linear_scan import checks, reference

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


def _differentiable_backward(grad_x, a, x, x0):
    """The scan's backward as torch ops, for a backward that is itself differentiated
    (create_graph=True): g_t = grad_x_t + a_{t+1} g_{t+1} (a reverse scan, the reference loop),
    grad_u = g, grad_a_t = g_t x_{t-1}, grad_x0 = a_0 g_0, with x the op's saved output (its
    derivative the op's own backward)."""
    shifted = torch.cat([a[1:], torch.zeros_like(a[:1])])
    g = reference.linear_scan(shifted.flip(0), grad_x.flip(0)).flip(0)
    previous = torch.cat([x0.unsqueeze(0), x[:-1]])
    return g * previous, g, a[0] * g[0]


def _scan_autograd(backward_op):
    def scan_backward(ctx, grad_x):
        a, x, x0 = ctx.saved_tensors
        if torch.is_grad_enabled():
            with library.without_autocast(x):
                return _differentiable_backward(grad_x, a, x, x0)
        with library.without_autocast(x), torch.no_grad():
            return backward_op(grad_x, a, x, x0)

    return scan_backward


library.define(library.COMPILED, "linear_scan", SCHEMAS, _scan_fake, _scan_backward_fake, _scan_autograd, _scan_setup)
for _namespace, _kernels in TRITON.items():
    library.define(_namespace, "linear_scan", SCHEMAS, _scan_fake, _scan_backward_fake, _scan_autograd, _scan_setup,
                   _kernels)
