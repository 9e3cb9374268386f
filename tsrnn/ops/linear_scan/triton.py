"""Chunked linear scan in Triton: x_t = a_t x_{t-1} + u_t over (T, N), any T.

Each program owns BLOCK_N channels and walks the sequence in chunks of CHUNK steps: within a
chunk ``tl.associative_scan`` composes the affine maps (a, u) ∘ (a', u') = (a a', a' u + u'), and
the carry x from the previous chunk enters as x = A_cum carry + U_cum (float32 carry, float64
for float64 inputs). Padding rows past T are the identity map (a = 1, u = 0).
Backward is the same kernel run in reverse (accelerated-scan's formulation):
    g_t = dL/dx_t + a_{t+1} g_{t+1},  grad_u = g,  grad_a_t = x_{t-1} g_t,  grad_x0 = a_0 g_0.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import checks


@triton.jit
def _compose(a_left, u_left, a_right, u_right):
    return a_left * a_right, a_right * u_left + u_right


@triton.jit
def _scan_kernel(a_ptr, u_ptr, x0_ptr, out_ptr, T, N,  # a, u, out: [T, N]; x0: [N]
                 HAS_X0: tl.constexpr, REVERSE: tl.constexpr, ACC_F64: tl.constexpr,
                 CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
    acc = tl.float64 if ACC_F64 else tl.float32
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if HAS_X0:
        carry = tl.load(x0_ptr + cols, mask=col_ok, other=0.0).to(acc)
    else:
        carry = tl.zeros([BLOCK_N], dtype=acc)
    local = tl.arange(0, CHUNK)
    edge = 0 if REVERSE else CHUNK - 1  # the row that carries into the next chunk
    n_chunks = tl.cdiv(T, CHUNK)
    for i in range(0, n_chunks):
        chunk = n_chunks - 1 - i if REVERSE else i
        rows = (chunk * CHUNK + local).to(tl.int64)
        mask = (rows[:, None] < T) & col_ok[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        a = tl.load(a_ptr + offsets, mask=mask, other=1.0).to(acc)
        u = tl.load(u_ptr + offsets, mask=mask, other=0.0).to(acc)
        a_cum, u_cum = tl.associative_scan((a, u), 0, _compose, reverse=REVERSE)
        x = a_cum * carry[None, :] + u_cum
        tl.store(out_ptr + offsets, x.to(out_ptr.dtype.element_ty), mask=mask)
        carry = tl.sum(tl.where(local[:, None] == edge, x, 0.0), axis=0)


def scan(a: torch.Tensor, u: torch.Tensor, x0: torch.Tensor | None = None, reverse: bool = False,
         chunk: int = 16, block_n: int = 64) -> torch.Tensor:
    """Run the kernel on contiguous (T, N) a, u and (N,) x0; returns x (T, N) in u's dtype."""
    T, N = u.shape
    out = torch.empty_like(u)
    grid = (triton.cdiv(N, block_n),)
    _scan_kernel[grid](a, u, x0 if x0 is not None else u, out, T, N, HAS_X0=x0 is not None,
                       REVERSE=reverse, ACC_F64=u.dtype == torch.float64, CHUNK=chunk, BLOCK_N=block_n)
    return out


def linear_scan_forward(a: torch.Tensor, u: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """torch.ops.tsrnn_triton_scan.linear_scan_forward: x_t = a_t x_{t-1} + u_t; a, u: [T, N], x0: [N]
    (checked as the compiled op checks them: tsrnn/ops/recurrence/checks.py)."""
    checks.scan_args(a, u, x0)
    checks.triton_device(u)
    return scan(a.contiguous(), u.contiguous(), x0.contiguous())


def linear_scan_backward(grad_x, a, x, x0):
    """torch.ops.tsrnn_triton_scan.linear_scan_backward: (grad_a, grad_u, grad_x0)."""
    checks.scan_backward_args(grad_x, a, x, x0)
    checks.triton_device(x)
    a_next = torch.cat([a[1:], torch.zeros_like(a[:1])])  # g_t = dL/dx_t + a_{t+1} g_{t+1}
    g = scan(a_next, grad_x.contiguous(), reverse=True)
    x_prev = torch.cat([x0[None], x[:-1]])
    return x_prev * g, g, a[0] * g[0]
