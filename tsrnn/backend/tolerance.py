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
    # The seed-004 contexts (tsrnn.memory.contexts) against tsrnn.TILT, their kernels and each other, float64.
    "contexts float64": {"atol": 1e-12, "rtol": 1e-12},
}
GRAD_TOLERANCE = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.bfloat16: {"atol": 5e-2, "rtol": 5e-2},
    torch.float16: {"atol": 5e-3, "rtol": 5e-3},
}


# Products in reduced precision (``tsrnn.precision.products``: on CUDA, "tf32" where
# torch.backends.cudnn.allow_tf32 is true, "bf16" for bf16 layers), as torch.nn.LSTM's cuDNN call
# computes them: the operands of a layer's GEMMs (x W_ih^T, W_hh h_{t-1}; backward dz W_hh, dz W_ih,
# dW_hh = dz^T h, dW_ih = dz^T x) rounded to the format's unit roundoff u (TF32: 10 mantissa bits,
# u = 2^-11 = 4.9e-4; bf16: 7, u = 2^-8 = 3.9e-3), their products exact and summed in float32
# (K 2^-24 << u for any K < 2^13 of a layer); gate math and the states in float32.
# The derivation. A dot product of K terms is then off by sum_k w_k h_k (d_k + e_k), |d_k|, |e_k|
# <= u: at most 2u sum_k |w_k h_k| <= 2u sqrt(K) |w o h| (2-norm, o elementwise) if every error had
# the same sign (40u at K = 400; not reached), and, the roundings being independent with mean 0
# and variance u^2/3, of standard deviation c u sqrt(K) rms_k |w_k h_k|, c = sqrt(2/3) (a random
# walk of K steps). For an LSTM's weights, rows of norm ~1 (the 1/sqrt(K) scale of torch's and the
# tests' initialization), and |h| <= 1, sqrt(K) rms |w o h| <= 1 whatever K: a pre-activation z =
# W_ih x + W_hh h (K = I and H) is off by ~u (one standard deviation), the largest of a layer's
# 10^4-10^6 by 4-5u. The cell passes that on with gains <= 1 (sigmoid' <= 1/4, tanh' <= 1) and the
# cell state sums each step's error weighted by f^k, f < 1: the error does not compound over T,
# only over the forget gate's memory (a random walk of ~1/(1 - f) steps; the pLSTM's f nears 1 as
# the age grows). The backward's GEMMs (K = G*H for dh and dx, K = T*B for dW_hh and dW_ih, each
# error relative to its result's own scale, as above) add their errors to those it carries back.
# So the error is a few u times (1 + max |reference|) at any K and T. Measured
# (tests/kernels/recurrence/test_precision_rows.py: the reference loops in float64 with every GEMM
# operand rounded, every cell, at SHAPES, T=70 B=20 I=H=400 and T=50 B=I=H=128, seeds 0-3):
# error / (u (1 + max |reference|)) at most 2.2 for the values and 2.6 for the gradients in TF32
# with operands rounded to nearest (cvt.rna, as tsrnn's kernels round them), 4.1 and 6.3 with
# operands truncated (as tensor cores read float32 that no one rounded), 1.0 and 1.8 in bf16 (the
# layer's bf16 outputs and gradients rounded too); at T = 1000 (B = 16, H = 128) 1.5 and 1.5. The
# cluster-resident kernel under the SIMT emulation (tests/kernels/recurrence/test_cluster_kernel.py's
# table, small shapes, its input projection in the same precision) measured 0.62 and 2.7 in TF32,
# 0.70 and 2.8 in bf16. The rows: 8u for the values and 16u for the gradients (twice, for the
# backward's own GEMMs): 3.6 and 5.7 times the worst error of rounded operands (2.2u, 2.8u), about
# twice that of truncated ones; at T=70, B=20, H=400 the errors are still 1/22 of them or more
# (the test checks both sides). A path's rows are the looser of its dtype's and its products'
# (``rows``): for bf16 layers the bf16 row alone covers bf16 products too
# (1.0u = 3.9e-3 of 2e-2, 1.8u = 7e-3 of 5e-2), and the products' rows are looser still.
PRODUCTS_U = {"tf32": 2.0 ** -11, "bf16": 2.0 ** -8}
PRODUCTS_TOLERANCE = {name: {"atol": 8 * u, "rtol": 8 * u} for name, u in PRODUCTS_U.items()}
PRODUCTS_GRAD_TOLERANCE = {name: {"atol": 16 * u, "rtol": 16 * u} for name, u in PRODUCTS_U.items()}


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
