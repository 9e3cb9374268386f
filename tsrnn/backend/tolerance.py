"""How far a path may be from the float64 truth: the tolerance tables and their one rule.

Read by the test harness (``tsrnn.testing``, which re-exports them, and the tests) and by the
verification of ``"auto"``'s candidates (``tsrnn.backend.verification``), so a path is judged by the same
bounds wherever it is judged.
"""
from __future__ import annotations

import math

import torch

# max |path - reference| <= atol + rtol * max |reference|: the rule of every row (``error``, read
# by tsrnn.testing's compare and compare_scan, tests/conftest.py's assert_close and
# tsrnn.backend.verification). A row
# per input dtype, for a path against the float64 reference on the same rounded inputs:
# float64: sums in another order only. float32: ~1e-7 per op, grown over the recurrence and the
# backward's GEMMs. bf16: inputs and outputs rounded to 8 mantissa bits, gate math in float32.
# float16: 11 mantissa bits, gate math in float32 (the cpu path measured at most 4.4e-4 for the
# values and 6.9e-4 for the gradients, times max(1, the largest), at the test shapes and T=70,
# B=20, I=H=400: a sixth and a seventh of these rows; the value row is 5 units of fp16's last place).
# Then named rows, for values and gradients alike: checks that ask for less error than their
# dtype's row, each for the reason it gives, and TILT and its contexts, which are no recurrence.
TOLERANCE = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    torch.float16: {"atol": 2.5e-3, "rtol": 2.5e-3},
    # float64, tens of steps: another order of the same sums moves the last bits only (measured
    # <= 3e-13, at H = 301).
    "float64 reordered": {"atol": 1e-12, "rtol": 0},
    # float32 against the reference run on the same float32 inputs, a few steps of layers with
    # H <= 5: a few roundings apart, where the float32 row covers H = 301 and long backward GEMMs.
    "float32 same inputs": {"atol": 1e-5, "rtol": 0},
    # The pLSTM's age over 1000 float32 steps of large dt: a running sum of dt (reset by the gate),
    # one rounding a step, stays within 1e-5 of the largest age (measured 1e-7).
    "float32 age": {"atol": 0, "rtol": 1e-5},
    # torch.compile against eager in float32: the same kernels, only the ops around them fused.
    "compiled": {"atol": 1e-6, "rtol": 0},
    # averaging_context in float32 over 10,000 steps against float64: it accumulates in float64,
    # so only the final rounding remains.
    "averaging float32": {"atol": 1e-6, "rtol": 0},
    # TILT's paths (scan, chunked, FFT) against reference.tilt and each other, float64.
    "tilt float64": {"atol": 0, "rtol": 1e-11},
    # TILT's kernel-form paths (chunked, FFT) in float32 against float64: the kernels are built in
    # float64, so float32 keeps ~1e-7 for any k.
    "tilt float32": {"atol": 0, "rtol": 5e-7},
    # The seed-004 contexts (tsrnn.contexts) against tsrnn.TILT, their kernels and each other, float64.
    "contexts float64": {"atol": 1e-12, "rtol": 1e-12},
}
GRAD_TOLERANCE = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.bfloat16: {"atol": 5e-2, "rtol": 5e-2},
    torch.float16: {"atol": 5e-3, "rtol": 5e-3},
}


# Recurrent products in reduced precision (``tsrnn.precision.products``: on CUDA, TF32 where
# torch.backends.cudnn.allow_tf32 is true, bf16 for bf16 layers), as torch.nn.LSTM's cuDNN call
# computes them: each operand of W_hh h_{t-1}, of W_hh^T dz_t and of dW_hh's GEMM is rounded to the
# format's unit roundoff u (TF32: 10 mantissa bits, u = 2^-11 = 4.9e-4; bf16: 7, u = 2^-8 = 3.9e-3)
# and summed in float32, so each product w h carries a relative error of at most 2u + u^2, and a
# sum over K terms at most 2u sum |w h| <= 2u |w| |h| (Cauchy-Schwarz: the scale of the gate
# pre-activation itself, for the weight scales of an LSTM). The gates and the cell are 1-Lipschitz
# or contracting (sigmoid, tanh, c_t = f c' + ..., f < 1), so the values stay within a few times
# 2u of their scale over the steps: the value row is 4u. The backward adds its own two rounded
# products (W_hh^T dz over K = G*H, dW_hh over K = T*B) to the forward's error it carries: the
# gradient row is 8u. Measured on the cluster-resident kernel (its source under the SIMT
# emulation, tests/kernels/recurrence/test_cluster_kernel.py's table, two seeds): error / (1 + max
# |reference|) at most 0.6u for the values and 2.4u for the gradients in TF32, 0.41u and 1.5u in
# bf16: the rows are 3.4 to 10 times the worst measured. A path's rows are the looser of its
# dtype's and its products'.
PRODUCTS_U = {"tf32": 2.0 ** -11, "bf16": 2.0 ** -8}
PRODUCTS_TOLERANCE = {name: {"atol": 4 * u, "rtol": 4 * u} for name, u in PRODUCTS_U.items()}
PRODUCTS_GRAD_TOLERANCE = {name: {"atol": 8 * u, "rtol": 8 * u} for name, u in PRODUCTS_U.items()}


def rows(dtype: torch.dtype, products: str = "ieee") -> tuple[dict, dict]:
    """(value row, gradient row) for a path computing in ``dtype`` whose recurrent products take
    operands in ``products`` ("ieee", "tf32", "bf16"): the looser of the dtype's rows and the
    products' rows (the dtype's alone for "ieee")."""
    value, grad = TOLERANCE[dtype], GRAD_TOLERANCE[dtype]
    if products not in PRODUCTS_U:
        return value, grad
    looser = lambda a, b: {k: max(a[k], b[k]) for k in ("atol", "rtol")}  # noqa: E731
    return looser(value, PRODUCTS_TOLERANCE[products]), looser(grad, PRODUCTS_GRAD_TOLERANCE[products])


def error(actual: torch.Tensor, expected: torch.Tensor, tol: dict) -> tuple[float, float]:
    """(max |actual - expected|, its bound atol + rtol * max |expected|) for a row ``tol``, over
    the finite elements of ``expected``; where ``expected`` is NaN or Inf (a diverged model's
    values) ``actual`` must be the same, else the error is inf, as it is for a NaN or Inf of
    ``actual`` elsewhere; a shape mismatch is (inf, 0)."""
    actual, expected = actual.detach().double().cpu(), expected.detach().double().cpu()
    if actual.shape != expected.shape:
        return math.inf, 0.0
    if expected.numel() == 0:
        return 0.0, tol["atol"]
    finite = torch.isfinite(expected)
    same = (actual == expected) | (actual.isnan() & expected.isnan())
    if not bool((finite | same).all()):
        return math.inf, 0.0
    err = (actual - expected).abs()[finite].max().item() if bool(finite.any()) else 0.0
    scale = expected.abs()[finite].max().item() if bool(finite.any()) else 0.0
    return err if math.isfinite(err) else math.inf, tol["atol"] + tol["rtol"] * scale
