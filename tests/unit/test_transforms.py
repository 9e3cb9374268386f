"""torch.func transforms (grad, vmap, vmap of grad, jacrev) over the modules: "auto" runs the
reference loops inside them and gives what the reference gives; any other backend raises a
ValueError that says so, never a crash inside a kernel."""
import pytest
import torch
from torch.func import functional_call, grad, jacrev, vmap

import tsrnn
from tsrnn import functional

T, B, I, H = 4, 3, 2, 5


def _module(kind, backend):
    torch.manual_seed(0)
    make = tsrnn.LSTM if kind == "lstm" else tsrnn.PowerLawLSTM
    return make(I, H, backend=backend).double()


def _loss(module):
    def loss(params, x):
        return functional_call(module, params, (x,))[0].pow(2).sum()
    return loss


@pytest.mark.parametrize("kind", ["lstm", "plstm"])
def test_auto_matches_the_reference_under_transforms(kind, clean_backend_state):
    x = torch.randn(T, B, I, dtype=torch.float64)
    results = {}
    for backend in ("auto", "reference"):
        module = _module(kind, backend)
        params = {k: v.detach() for k, v in module.named_parameters()}
        loss = _loss(module)
        per_row = vmap(grad(loss), in_dims=(None, 1))(params, x[:, :, None])
        results[backend] = (grad(loss)(params, x), per_row, vmap(lambda r: functional_call(module, params, (r,))[0],
                                                                   in_dims=1, out_dims=1)(x))
    auto, ref = results["auto"], results["reference"]
    for k in auto[0]:
        torch.testing.assert_close(auto[0][k], ref[0][k], rtol=0, atol=0)
        torch.testing.assert_close(auto[1][k], ref[1][k], rtol=0, atol=0)
    torch.testing.assert_close(auto[2], ref[2], rtol=0, atol=0)
    # vmap over the batch gives the batched layer's outputs
    torch.testing.assert_close(auto[2], _module(kind, "reference")(x)[0])


def test_jacrev_of_the_scan():
    a, u = torch.rand(6, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    jac = jacrev(lambda u: functional.linear_scan(a, u))(u)
    expected = torch.autograd.functional.jacobian(lambda u: functional.linear_scan(a, u, backend="reference"), u)
    torch.testing.assert_close(jac, expected)


@pytest.mark.parametrize("backend", ["native", "cpu", "onednn", "triton", "triton_step"])
def test_a_fused_backend_under_transforms_is_a_clear_error(backend):
    module = _module("lstm", backend)
    params = {k: v.detach() for k, v in module.named_parameters()}
    with pytest.raises(ValueError, match="torch.func transforms .* reference loops only"):
        grad(_loss(module))(params, torch.randn(T, B, I, dtype=torch.float64))


def test_vmap_over_step_lengths():
    """vmap over the pLSTM's Δt (the value checks are skipped inside transforms): each row as its
    own call."""
    torch.manual_seed(1)
    module = tsrnn.PowerLawLSTM(I, H).double()
    x = torch.randn(T, B, I, dtype=torch.float64)
    dt = torch.rand(3, T, B, dtype=torch.float64) + 0.1
    batched = vmap(lambda d: module(x, dt=d)[0])(dt)
    for k in range(3):
        torch.testing.assert_close(batched[k], module(x, dt=dt[k])[0])
