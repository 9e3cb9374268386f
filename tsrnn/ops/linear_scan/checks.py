"""The linear scan operators' argument checks, as csrc/linear_scan/cpu.cpp's check_scan with the same
messages: ranks, shapes, dtypes and devices only (no values read, traceable with fake tensors)."""
from __future__ import annotations

from tsrnn.ops.checks import MATH_DTYPES, _require, triton_device  # noqa: F401  (the Triton driver's too)


def scan_args(a, u, x0):
    """linear_scan_forward's tensors (csrc/linear_scan/cpu.cpp's check_scan): u [T, N] with T >= 1,
    a [T, N], x0 [N], one device, one float32 or float64 dtype; returns (T, N)."""
    _require(u.dim() == 2 and u.shape[0] >= 1,
             lambda: f"tsrnn: linear_scan u must be [T, N] with T >= 1, got {list(u.shape)}")
    T, N = u.shape
    _require(a.shape == u.shape, lambda: f"tsrnn: linear_scan a must match u {list(u.shape)}, got {list(a.shape)}")
    _require(x0.dim() == 1 and x0.shape[0] == N, lambda: f"tsrnn: linear_scan x0 must be [{N}], got {list(x0.shape)}")
    for t in (a, x0):
        _require(t.device == u.device, lambda: f"tsrnn: linear_scan tensors on several devices: {t.device} vs {u.device}")
        _require(t.dtype == u.dtype, lambda: f"tsrnn: linear_scan dtypes differ: {t.dtype} vs {u.dtype}")
    _require(u.dtype in MATH_DTYPES, lambda: f"tsrnn: linear_scan takes float32 or float64, got {u.dtype}")
    return T, N


def scan_backward_args(grad_x, a, x, x0):
    """linear_scan_backward's tensors: those of the forward, and grad_x like x."""
    steps = scan_args(a, x, x0)
    _require(grad_x.shape == x.shape and grad_x.dtype == x.dtype and grad_x.device == x.device,
             lambda: "tsrnn: linear_scan grad_x must match x")
    return steps
