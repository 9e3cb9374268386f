"""How far a path may be from the float64 truth: the tolerance tables and their one rule.

Read by the test harness (``tsrnn.testing``, which re-exports them, and the tests) and by the
verification of ``"auto"``'s candidates (``tsrnn.backend.verification``), so a path is judged by the same
bounds wherever it is judged.
"""
from __future__ import annotations

import math

import torch

# max |path - reference| <= atol + rtol * max |reference| (``error``): one row per input dtype,
# for a path against the float64 reference on the same rounded inputs (bf16 and float16: gate math
# in float32), then named rows for checks that ask for less, each with its reason.
TOLERANCE = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    torch.float16: {"atol": 2.5e-3, "rtol": 2.5e-3},
    # float64, tens of steps: another order of the same sums moves the last bits only.
    "float64 reordered": {"atol": 1e-12, "rtol": 0},
    # float32 against the reference run on the same float32 inputs, a few steps of layers with
    # H <= 5: a few roundings apart, where the float32 row covers H = 301 and long backward GEMMs.
    "float32 same inputs": {"atol": 1e-5, "rtol": 0},
    # The pLSTM's age over 1000 float32 steps of large dt: a running sum, one rounding a step.
    "float32 age": {"atol": 0, "rtol": 1e-5},
    # torch.compile against eager in float32: the same kernels, only the ops around them fused.
    "compiled": {"atol": 1e-6, "rtol": 0},
    # averaging_context in float32 against float64: it accumulates in float64.
    "averaging float32": {"atol": 1e-6, "rtol": 0},
    # TILT's paths (scan, chunked, FFT) against reference.tilt and each other, float64.
    "tilt float64": {"atol": 0, "rtol": 1e-11},
    # TILT's chunked and FFT paths in float32 against float64 (their kernels are built in float64).
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


# Products in reduced precision (``tsrnn.precision.products``), as torch.nn.LSTM's cuDNN call
# computes them: every GEMM operand rounded to the format's unit roundoff u, products summed in
# float32. The error is a few u times (1 + max |reference|) at any K and T (the derivation and the
# measured errors: docs/backends.md, "The precision of the products"); the rows are 8u for values
# and 16u for gradients, and a path's rows are the looser of its dtype's and its products' (``rows``).
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
