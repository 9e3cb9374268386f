"""Triton kernels against the references. Without a GPU they run on CPU tensors through the
Triton interpreter (TRITON_INTERPRET=1, set in conftest.py); with one, on CUDA."""
import pytest
import torch

from tsrnn import backend, functional, reference
from conftest import GRAD_TOLERANCE, TOLERANCE, assert_close, op_inputs

pytestmark = pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SHAPES = [(1, 1), (5, 3), (16, 64), (37, 70), (50, 2, 33)]  # T=1, odd sizes, N > BLOCK_N, T % CHUNK != 0


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_triton_linear_scan_matches_reference(shape, dtype):
    g = torch.Generator().manual_seed(len(shape) * 100 + shape[0])
    a64 = torch.rand(shape, generator=g, dtype=torch.float64)
    u64 = torch.randn(shape, generator=g, dtype=torch.float64)
    x064 = torch.randn(shape[1:], generator=g, dtype=torch.float64)
    a, u, x0 = (t.to(DEVICE, dtype).requires_grad_() for t in (a64, u64, x064))
    ra, ru, rx0 = (t.to(dtype).double().requires_grad_() for t in (a64, u64, x064))
    x = functional.linear_scan(a, u, x0, backend="triton")
    x_ref = reference.linear_scan(ra, ru, rx0)
    assert x.dtype == dtype and x.device.type == DEVICE.type
    assert_close(x.cpu(), x_ref, TOLERANCE[dtype], "x")
    w = torch.randn(shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((x.double() * w.to(DEVICE)).sum(), (a, u, x0))
    grads_ref = torch.autograd.grad((x_ref * w).sum(), (ra, ru, rx0))
    for name, gr, gr_ref in zip("a u x0".split(), grads, grads_ref):
        assert_close(gr.cpu(), gr_ref, GRAD_TOLERANCE[dtype], f"grad {name}")


def test_triton_linear_scan_constant_decay_no_x0_and_bf16():
    g = torch.Generator().manual_seed(7)
    a = torch.rand(6, generator=g)  # one decay per channel, broadcast over time
    u = torch.randn(20, 3, 6, generator=g)
    x = functional.linear_scan(a.to(DEVICE), u.to(DEVICE), backend="triton")
    assert_close(x.cpu(), reference.linear_scan(a.double(), u.double()), TOLERANCE[torch.float32], "x")
    x16 = functional.linear_scan(a.to(DEVICE, torch.bfloat16), u.to(DEVICE, torch.bfloat16), backend="triton")
    assert x16.dtype == torch.bfloat16
    exact = reference.linear_scan(a.bfloat16().double(), u.bfloat16().double())
    assert_close(x16.cpu(), exact, TOLERANCE[torch.bfloat16], "bf16 x")  # float32 carry inside


def test_triton_is_refused_where_it_cannot_run(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="CUDA tensors"):
        backend.resolve("triton", torch.device("cpu"))
    assert backend.resolve("auto", torch.device("cpu")) in ("native", "reference")


CELLS = ["lstm", "plstm_coupled", "plstm_separate"]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", [(1, 1, 2, 3), (4, 3, 5, 9), (3, 17, 4, 40)], ids=str)
def test_triton_recurrence_is_the_compiled_op(cell, shape):
    """The per-step fused Triton kernels compute what torch.ops.tsrnn.recurrence_* compute."""
    from tsrnn.kernels import recurrence

    args = op_inputs(cell, *shape, dt=cell != "lstm" and shape[0] > 1)
    out = recurrence.recurrence_forward(*args, True)
    ref = torch.ops.tsrnn.recurrence_forward(*args, True)
    for got, want, name in zip(out, ref, ("h", "state", "saved")):
        assert_close(got, want, TOLERANCE[torch.float32], name)
    g = torch.Generator().manual_seed(1)
    grad_h = torch.randn(ref[0].shape, generator=g)
    for grad_state in (None, torch.randn(ref[1].shape, generator=g)):
        bwd_args = (cell, grad_h, grad_state, args[2], args[3], args[4], *ref, args[5], args[6], args[7])
        got = recurrence.recurrence_backward(*bwd_args)
        want = torch.ops.tsrnn.recurrence_backward(*bwd_args)
        for a, b, name in zip(got, want, ("grad_xg", "grad_w_hh", "grad_h0", "grad_state0", "grad_p")):
            assert_close(a, b, GRAD_TOLERANCE[torch.float32], name)


def test_triton_recurrence_bf16_storage_float32_math():
    from tsrnn.kernels import recurrence

    args = op_inputs("plstm_separate", 5, 3, 4, 20, dt=True, dtype=torch.bfloat16)
    h, state, _ = recurrence.recurrence_forward(*args, True)
    assert h.dtype == torch.bfloat16
    exact = torch.ops.tsrnn.recurrence_forward(*(t.float() if isinstance(t, torch.Tensor) else t for t in args), True)
    assert_close(h, exact[0], TOLERANCE[torch.bfloat16], "bf16 h")
