"""The cudnn path's backward runs with TF32 off (tsrnn.functional._CudnnWithoutTF32). The first
GPU run found its gradients TF32-rounded: cuDNN reads the flag when the backward runs, after the
forward's ``with``. The wrapper is device-independent, so these run on the CPU too: the same
gradients as plain autograd, the flag off while the wrapped graph's backward runs, and a second
backward refused clearly."""
import pytest
import torch

from tsrnn.functional import _CudnnWithoutTF32
from conftest import assert_close


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    h0, c0 = (torch.randn(3, 6, generator=g, dtype=torch.float64) for _ in range(2))
    w_ih = torch.randn(24, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w_hh = torch.randn(24, 6, generator=g, dtype=torch.float64, requires_grad=True)
    return x, h0, c0, w_ih, w_hh


def _lstm(x, h0, c0, w_ih, w_hh):
    return torch._VF.lstm(x, (h0[None], c0[None]), [w_ih, w_hh], False, 1, 0.0, True, False, False)


def test_gradients_equal_plain_autograd():
    inputs = _inputs()
    out, h_n, c_n = _CudnnWithoutTF32.apply(_lstm, *inputs)
    want = _lstm(*inputs)
    assert_close(out, want[0], {"atol": 0, "rtol": 0}, "out")
    weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    wrt = [inputs[0], inputs[3], inputs[4]]
    got = torch.autograd.grad((out * weights).sum() + c_n.sum(), wrt)  # h_n gets no gradient: allowed
    expected = torch.autograd.grad((want[0] * weights).sum() + want[2].sum(), wrt)
    for name, a, b in zip(("x", "w_ih", "w_hh"), got, expected):
        assert_close(a, b, {"atol": 1e-12, "rtol": 0}, f"grad {name}")


def test_the_backward_runs_with_tf32_off_and_once():
    seen = []

    def call(t):
        out = t * 2
        out.register_hook(lambda grad: seen.append(torch.backends.cudnn.allow_tf32))
        return (out,)

    t = torch.randn(3, requires_grad=True)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        (out,) = _CudnnWithoutTF32.apply(call, t)
        out.sum().backward(retain_graph=True)
        assert seen == [False] and torch.backends.cudnn.allow_tf32
        assert torch.equal(t.grad, torch.full((3,), 2.0))
        with pytest.raises(RuntimeError, match="tsrnn: the cudnn path's backward runs once per forward"):
            out.sum().backward()
