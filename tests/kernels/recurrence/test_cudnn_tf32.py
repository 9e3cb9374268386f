"""The cudnn path's backward runs with TF32 off (tsrnn.ops.recurrence.paths._exact_backward). The first GPU
run found its gradients TF32-rounded: cuDNN reads the flag when the backward runs, after the
forward's ``with``. The hooks are device-independent, so these run on the CPU, on the oneDNN
LSTM's backward node: the flag is off while the node runs and restored after, every time it runs
(retain_graph), and gradcheck goes through them."""
import torch

from tsrnn.ops.recurrence.paths import _cudnn_exact, _exact_backward


def _lstm(x, h0, c0, w_ih, w_hh, bias):
    return torch._VF.lstm(x, (h0[None], c0[None]), [w_ih, w_hh, bias, torch.zeros_like(bias)], True, 1, 0.0, True,
                          False, False)


def _inputs():
    g = torch.Generator().manual_seed(0)
    shapes = [(4, 2, 3), (2, 5), (2, 5), (20, 3), (20, 5), (20,)]
    return [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]


def test_the_flag_is_off_while_the_node_runs_and_restored_after_each_run():
    seen = []
    out, _, c_n = _lstm(*_inputs())
    _exact_backward(out.grad_fn)
    out.grad_fn.register_prehook(lambda grad_outputs: seen.append(("in", torch.backends.cudnn.allow_tf32)))
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=True):
        for _ in range(2):  # a second backward through the same graph (retain_graph) runs the hooks again
            (out.sum() + c_n.sum()).backward(retain_graph=True)
            seen.append(("after", torch.backends.cudnn.allow_tf32))
        assert torch.backends.cudnn.benchmark  # the user's other settings are kept
    assert seen == [("in", False), ("after", True)] * 2


def test_gradcheck_through_the_hooks():
    def layer(*inputs):
        out, h_n, c_n = _lstm(*inputs)
        _exact_backward(out.grad_fn)
        return out, h_n, c_n

    assert torch.autograd.gradcheck(layer, _inputs())


def test_cudnn_exact_keeps_benchmark_and_deterministic():
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=False, benchmark=True, deterministic=True, allow_tf32=True):
        with _cudnn_exact():
            assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32) == (True, True, True, False)
        assert (cudnn.enabled, cudnn.allow_tf32) == (False, True)
