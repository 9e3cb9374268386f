"""The Triton linear scan (tsrnn/ops/linear_scan/triton.py) against the reference. Without a GPU it runs on
CPU tensors through the Triton interpreter (TRITON_INTERPRET=1, set in conftest.py); with one, on
CUDA."""
import pytest
import torch

from tsrnn import backend, functional, reference, testing
from tsrnn.testing import TOLERANCE
from conftest import assert_close

pytestmark = pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("shape", testing.SCAN_SHAPES + testing.TRITON_SCAN_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_triton_linear_scan_matches_reference(shape, dtype):
    result = testing.compare_scan("triton_scan", shape, dtype, DEVICE, seed=len(shape) * 100 + shape[0])
    assert result.ok, result.failures()


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


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_tensors_triton_cannot_read_are_refused_before_running(monkeypatch, device):
    """Meta tensors, and CPU tensors without the interpreter (as on a GPU machine), get the drivers'
    clear error (tsrnn/ops/checks.py's triton_device), not one from inside Triton's launcher."""
    from tsrnn.ops.linear_scan import triton as linear_scan

    a, u, x0 = torch.rand(4, 3, device=device), torch.randn(4, 3, device=device), torch.zeros(3, device=device)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(linear_scan, "_scan_kernel", None)  # a launch would fail with a TypeError
    match = rf"^tsrnn: Triton runs on CUDA tensors .*, got {device} tensors"
    with pytest.raises(RuntimeError, match=match):
        linear_scan.linear_scan_forward(a, u, x0)
    with pytest.raises(RuntimeError, match=match):
        linear_scan.linear_scan_backward(torch.ones_like(u), a, u, x0)
