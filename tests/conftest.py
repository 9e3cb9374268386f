"""Shared test helpers: one tolerance table per dtype and builders of random layer arguments."""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # run the Triton kernels on CPU tensors; must precede their import
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tsrnn import backend
from tsrnn.selftest import layer_args  # noqa: F401  (random layer arguments, shared with selftest)

# Max |fused - float64 reference| <= atol + rtol * max|reference|, per dtype of the fused inputs.
# float64: the kernels reorder sums, nothing else. float32: ~1e-7 per op, grown over the
# recurrence and the backward GEMMs. bf16: outputs are rounded to 8 mantissa bits (gate math in fp32).
TOLERANCE = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}
GRAD_TOLERANCE = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.bfloat16: {"atol": 5e-2, "rtol": 5e-2},
}

@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tests use tiny shapes: one thread keeps them fast on a shared 2-core machine. The kernels'
    multi-thread paths are tested with explicit thread counts (test_fused.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


needs_native = pytest.mark.skipif(not backend.native_available(), reason=f"tsrnn._C not loaded: {backend.LOAD_ERROR}")


def assert_close(actual, expected, tol, what=""):
    actual = actual.detach().double()
    expected = expected.detach().double()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual - expected).abs().max().item() if expected.numel() else 0.0
    bound = tol["atol"] + tol["rtol"] * (expected.abs().max().item() if expected.numel() else 0.0)
    assert err <= bound, f"{what}: max error {err:.3e} > {bound:.3e}"


def cast(args, dtype, requires_grad=False):
    """A copy of ``args`` with the float tensors in ``dtype`` (dt stays float64 data)."""
    out = {}
    for name, value in args.items():
        if isinstance(value, torch.Tensor) and name != "dt":
            value = value.detach().to(dtype).requires_grad_(requires_grad)
        out[name] = value
    return out


def differentiable(args):
    return {k: v for k, v in args.items() if isinstance(v, torch.Tensor) and v.requires_grad}


def op_inputs(cell, T, B, I, H, dt, dtype=torch.float32, seed=None):
    """Positional arguments of torch.ops.tsrnn.recurrence_forward (without ``save``) for a random
    layer: (cell, xg, w_hh, h0, state0, p, dt, eps)."""
    a = layer_args(cell, T, B, I, H, seed=T * 31 + H if seed is None else seed, dt=dt)
    G = 3 if cell == "plstm_coupled" else 4
    xg = (a["x"].reshape(T * B, I) @ a["w_ih"].T + a["bias"]).view(T, B, G * H)
    state0 = torch.stack([a["c0"]] + ([a["a0"]] if cell != "lstm" else []))
    cast_ = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    return cell, cast_(xg), cast_(a["w_hh"]), cast_(a["h0"]), cast_(state0), cast_(a.get("p")), cast_(a.get("dt")), 1e-3

