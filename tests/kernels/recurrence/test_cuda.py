"""The tensor-core CUDA kernels (tsrnn._cuda, the paths "cuda_cluster" and "cuda_grid") and the CUDA
dispatch, against the float64 reference. Skipped without a GPU or without the CUDA extension; run by
bench/gpu_report.py (also under compute-sanitizer) on a GPU machine. Every GPU path is also in
the table of tests/kernels/recurrence/test_paths.py."""
import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend, functional, precision, reference, testing
from tsrnn.ops.recurrence import cells
from tsrnn.testing import TOLERANCE
from tsrnn.backend import choice, registry
from conftest import assert_close

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(backend.CUDA_LOAD_ERROR is not None, reason=f"tsrnn._cuda not loaded: {backend.CUDA_LOAD_ERROR}"),
]


@pytest.mark.parametrize("path", ["cuda_cluster", "cuda_grid"])
def test_forward_without_save_matches(path):
    refused = testing.why_not(path, "plstm_separate", (7, 3, 4, 33), torch.float32, "cuda")
    if refused:
        pytest.skip(refused)
    result = testing.compare(path, "plstm_separate", (7, 3, 4, 33), torch.float32, "cuda", dt=True, grads=False)
    assert result.ok, result.failures()


@pytest.mark.parametrize("make", [lambda b: tsrnn.LSTM(3, 50, num_layers=2, timescales=[torch.linspace(1, 40, 50), None], backend=b),
                                  lambda b: tsrnn.PowerLawLSTM(3, 50, input_gate="separate", backend=b)],
                         ids=["mts-lstm", "plstm"])
@pytest.mark.parametrize("path", ["auto", "native", "cuda_cluster", "cuda_grid", "triton"])
def test_modules_on_cuda_match_the_reference(make, path):
    """Within the rows of the precision torch's flags give a float32 layer's products (TF32 by
    default, as torch.nn.LSTM): "auto" and "native" may take a tensor-core kernel or cuDNN."""
    x = torch.randn(9, 4, 3)
    results = {}
    for name, device in ((path, "cuda"), ("reference", "cpu")):
        torch.manual_seed(0)
        model = make(name).to(device)
        out = model(x.to(device))[0]
        out.square().sum().backward()
        results[name] = (out.cpu(), model.weight_hh_l0.grad.cpu())
    (out, grad), (out_ref, grad_ref) = results[path], results["reference"]
    values, grads = testing.rows(torch.float32, precision.products(torch.float32, torch.device("cuda")))
    assert_close(out, out_ref, values, "out")
    assert_close(grad, grad_ref, grads, "grad w_hh")


def test_native_falls_back_where_the_kernel_does_not_apply(monkeypatch):
    monkeypatch.setattr(registry, "_warned", set())
    x = torch.randn(3, 2, 4, device="cuda", dtype=torch.float64)  # float64: no CUDA kernel
    w_ih, w_hh = torch.randn(20, 4, device="cuda", dtype=torch.float64), torch.randn(20, 5, device="cuda", dtype=torch.float64)
    h0 = torch.zeros(2, 5, device="cuda", dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, _ = functional.lstm(x, h0, h0, w_ih, w_hh, backend="native")
    assert any("the CUDA kernels cannot run this call" in str(w.message) for w in caught)
    want, _, _ = reference.lstm(x.cpu(), h0.cpu(), h0.cpu(), w_ih.cpu(), w_hh.cpu(), None)
    assert_close(out.cpu(), want, TOLERANCE[torch.float64])


def test_too_large_hidden_size_is_refused_clearly():
    H = 8192  # W_hh of 1 GiB in float32: beyond the shared memory of every resident block together
    w_hh = torch.zeros(4 * H, H, device="cuda")
    assert torch.ops.tsrnn_grid.recurrence_plan("lstm", w_hh, 2, "tf32") == 0
    assert "does not fit" in testing.why_not("cuda_grid", "lstm", (2, 2, 4, H), torch.float32, "cuda")
    xg = torch.zeros(2, 2, 4 * H, device="cuda")
    h0 = torch.zeros(2, H, device="cuda")
    with pytest.raises(RuntimeError, match=r"grid-resident CUDA kernel does not take H=8192"):
        torch.ops.tsrnn_grid.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, [], False, None, "tf32")


def test_auto_measures_and_records_its_choice(monkeypatch):
    monkeypatch.setattr(choice, "_tuned", {})
    model = tsrnn.LSTM(8, 32, backend="auto").cuda()
    model(torch.randn(10, 4, 8, device="cuda"))[0].sum().backward()
    ((key, path),) = backend.tuned_choices().items()
    assert path in ("cudnn", "cuda_cluster", "cuda_grid") and "True" in key  # a training call: no older path


@pytest.mark.parametrize("make", [lambda: tsrnn.LSTM(8, 32, timescales=[torch.linspace(1, 40, 32)]),
                                  lambda: tsrnn.PowerLawLSTM(8, 32)], ids=["mts-lstm", "plstm"])
def test_cuda_graph_capture_after_one_eager_step(make):
    """Capture skips the tuner and the value checks (no host sync may happen while capturing)."""
    model = make().cuda().eval()
    x = torch.randn(6, 4, 8, device="cuda")
    with torch.no_grad():
        eager = model(x)[0]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            model(x)  # warm-up on the capture stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = model(x)[0]
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(captured, model(x)[0], TOLERANCE[torch.float32], "replayed")
    assert eager.shape == captured.shape


@pytest.mark.parametrize("path", ["cuda_cluster", "cuda_grid"])
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("shape", [(1, 1, 2, 3), (5, 17, 3, 37), (4, 33, 8, 150)], ids=str)
def test_tensor_core_kernels_match_the_reference(path, cell, shape):
    """The cluster- and grid-resident kernels in the precision torch's flags give (TF32 by default):
    T = 1, B = 1; uneven units and K slices with B past one tile or chunk; H past 128 (the
    compute-sanitizer jobs of bench/gpu_report.py run the H = 37 shape)."""
    refused = testing.why_not(path, cell, shape, torch.float32, "cuda")
    if refused:
        pytest.skip(refused)
    result = testing.compare(path, cell, shape, torch.float32, "cuda", dt=cells.get(cell).params != () and shape[0] > 1)
    assert result.ok, result.failures()
