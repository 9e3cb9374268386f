"""The persistent CUDA kernels (tsrnn._cuda, backend="native" on CUDA tensors) against the CPU
kernels and the references. Skipped without a GPU or without the CUDA extension; run by
bench/gpu_report.py (also under compute-sanitizer) on a GPU machine."""
import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend, functional, reference
from conftest import GRAD_TOLERANCE, TOLERANCE, assert_close, needs_native, op_inputs

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(backend.CUDA_LOAD_ERROR is not None, reason=f"tsrnn._cuda not loaded: {backend.CUDA_LOAD_ERROR}"),
    needs_native,
]
CELLS = ["lstm", "plstm_coupled", "plstm_separate"]
# (T, B, I, H): T=1/B=1, odd sizes, H above the SM count so blocks own several units with an
# uneven last block (H=301), the SPEC's H=400, a long sequence, a batch over the warps per block.
SHAPES = [(1, 1, 2, 3), (6, 5, 4, 40), (4, 3, 5, 301), (3, 20, 8, 400), (300, 2, 3, 16), (5, 37, 4, 24)]


def on(device, args):
    return tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in args)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cuda_op_is_the_cpu_op(cell, shape):
    args = op_inputs(cell, *shape, dt=cell != "lstm" and shape[0] > 1)
    assert torch.ops.tsrnn.recurrence_plan(cell, args[2].cuda()) > 0
    got = torch.ops.tsrnn.recurrence_forward(*on("cuda", args), True)
    want = torch.ops.tsrnn.recurrence_forward(*args, True)
    for g, w, name in zip(got, want, ("h", "state", "saved")):
        assert_close(g.cpu(), w, TOLERANCE[torch.float32], name)
    gen = torch.Generator().manual_seed(shape[0])
    grad_h = torch.randn(want[0].shape, generator=gen)
    for grad_state in (None, torch.randn(want[1].shape, generator=gen)):
        bwd = (cell, grad_h, grad_state, args[2], args[3], args[4], *want, args[5], args[6], args[7])
        got = torch.ops.tsrnn.recurrence_backward(*on("cuda", bwd))
        expected = torch.ops.tsrnn.recurrence_backward(*bwd)
        for g, w, name in zip(got, expected, ("grad_xg", "grad_w_hh", "grad_h0", "grad_state0", "grad_p")):
            assert_close(g.cpu(), w, GRAD_TOLERANCE[torch.float32], name)


def test_forward_without_save_matches():
    args = op_inputs("plstm_separate", 7, 3, 4, 33, dt=True)
    h, state, saved = torch.ops.tsrnn.recurrence_forward(*on("cuda", args), False)
    want = torch.ops.tsrnn.recurrence_forward(*args, False)
    assert saved.numel() == 0
    assert_close(h.cpu(), want[0], TOLERANCE[torch.float32], "h")
    assert_close(state.cpu(), want[1], TOLERANCE[torch.float32], "state")


@pytest.mark.parametrize("make", [lambda b: tsrnn.LSTM(3, 50, num_layers=2, timescales=[torch.linspace(1, 40, 50), None], backend=b),
                                  lambda b: tsrnn.PowerLawLSTM(3, 50, input_gate="separate", backend=b)],
                         ids=["mts-lstm", "plstm"])
def test_modules_native_on_cuda_match_the_reference(make):
    x = torch.randn(9, 4, 3)
    results = {}
    for name, device in (("native", "cuda"), ("reference", "cpu")):
        torch.manual_seed(0)
        model = make(name).to(device)
        out = model(x.to(device))[0]
        out.square().sum().backward()
        results[name] = (out.cpu(), model.weight_hh_l0.grad.cpu())
    (out, grad), (out_ref, grad_ref) = results["native"], results["reference"]
    assert_close(out, out_ref, TOLERANCE[torch.float32], "out")
    assert_close(grad, grad_ref, GRAD_TOLERANCE[torch.float32], "grad w_hh")


def test_native_falls_back_where_the_kernel_does_not_apply(monkeypatch):
    monkeypatch.setattr(backend, "_warned", set())
    x = torch.randn(3, 2, 4, device="cuda", dtype=torch.float64)  # float64: no CUDA kernel
    assert torch.ops.tsrnn.recurrence_plan("lstm", torch.zeros(20, 5, device="cuda", dtype=torch.float64)) == 0
    w_ih, w_hh = torch.randn(20, 4, device="cuda", dtype=torch.float64), torch.randn(20, 5, device="cuda", dtype=torch.float64)
    h0 = torch.zeros(2, 5, device="cuda", dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, _ = functional.lstm(x, h0, h0, w_ih, w_hh, backend="native")
    assert any("does not take this shape" in str(w.message) for w in caught)
    want, _, _ = reference.lstm(x.cpu(), h0.cpu(), h0.cpu(), w_ih.cpu(), w_hh.cpu())
    assert_close(out.cpu(), want, TOLERANCE[torch.float64])


def test_too_large_hidden_size_is_refused_clearly():
    H = 8192  # 4 rows x 8192 x (H / SMs) floats per block: far beyond shared memory
    w_hh = torch.zeros(4 * H, H, device="cuda")
    assert torch.ops.tsrnn.recurrence_plan("lstm", w_hh) == 0
    xg = torch.zeros(2, 2, 4 * H, device="cuda")
    h0 = torch.zeros(2, H, device="cuda")
    with pytest.raises(RuntimeError, match=r"does not take H=8192"):
        torch.ops.tsrnn.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, 0.0, False)
