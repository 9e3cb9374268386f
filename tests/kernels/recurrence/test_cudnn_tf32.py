"""On CUDA the cudnn path runs cuDNN as torch.nn.LSTM does, under the user's settings: TF32 in the
forward and the backward where torch.backends.cudnn.allow_tf32 is true (torch's default), exact
float32 where it is false, a bf16 layer in bf16; no call changes a torch flag, forward or backward
(read inside the backward's hooks too), on any CUDA path; a module's weights are one flat buffer
per layer, as torch.nn.LSTM's, which cuDNN reads without a copy (tests/unit/test_flat_weights.py
runs the same module code on the CPU with a stand-in layout).
``tsrnn.precision.products`` follows the flag, and the harness judges the path with the row of
that precision (tsrnn.backend.tolerance.rows). GPU only: tests/unit/test_precision.py checks the
rule and the rounding on the CPU."""
from __future__ import annotations

import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend, precision, testing
from conftest import assert_close

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _flags():
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    return (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32,
            matmul.allow_bf16_reduced_precision_reduction, torch.get_float32_matmul_precision())


CUDA_PATHS = [p for p in backend.paths_on("cuda", "recurrence")]


@pytest.mark.parametrize("allow_tf32", [True, False])
@pytest.mark.parametrize("path", CUDA_PATHS)
def test_no_flag_changes_forward_or_backward(path, allow_tf32):
    if testing.why_not(path, "lstm", (5, 3, 4, 16), torch.float32, "cuda") is not None:
        pytest.skip(testing.why_not(path, "lstm", (5, 3, 4, 16), torch.float32, "cuda"))
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=allow_tf32):
        before = _flags()
        model = tsrnn.LSTM(4, 16, backend=path).cuda()
        x = torch.randn(5, 3, 4, device="cuda")
        out, (h, c) = model(x)
        assert _flags() == before, "forward"
        (out.square().sum() + c.sum()).backward()
        torch.cuda.synchronize()
        assert _flags() == before, "backward"


@pytest.mark.parametrize("path", CUDA_PATHS)
def test_no_flag_changes_inside_the_backward(path):
    """The flags as a hook sees them while the backward runs: on the output's gradient (before
    the layer's backward) and on each weight's (after it)."""
    if testing.why_not(path, "lstm", (5, 3, 4, 16), torch.float32, "cuda") is not None:
        pytest.skip(testing.why_not(path, "lstm", (5, 3, 4, 16), torch.float32, "cuda"))
    seen = []
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=True):
        before = _flags()
        model = tsrnn.LSTM(4, 16, timescales=[torch.linspace(1, 20, 16)], backend=path).cuda()
        for weight in (model.weight_ih_l0, model.weight_hh_l0, model.bias_ih_l0):
            weight.register_hook(lambda grad: seen.append(_flags()))
        out, _ = model(torch.randn(5, 3, 4, device="cuda"))
        out.register_hook(lambda grad: seen.append(_flags()))
        out.square().sum().backward()
        torch.cuda.synchronize()
    assert len(seen) == 4 and all(flags == before for flags in seen), seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_module_on_cudnn_is_torch_nn_lstms_call(dtype):
    """tsrnn.LSTM on cudnn, bf16 and float32, computes what torch.nn.LSTM computes with the same
    biases (an MTS layer's: its effective bias in b_ih and b_hh = 0): the same cuDNN call in the
    layer's dtype, so the forward bit for bit (the backward within the dtype's row: cuDNN's weight
    gradients may sum in another order from run to run)."""
    torch.manual_seed(0)
    ours = tsrnn.LSTM(24, 40, num_layers=2, timescales=[torch.linspace(1, 30, 40), None],
                      backend="cudnn").cuda().to(dtype)
    torch_lstm = torch.nn.LSTM(24, 40, num_layers=2).cuda().to(dtype)
    with torch.no_grad():
        for k in range(2):
            getattr(torch_lstm, f"weight_ih_l{k}").copy_(getattr(ours, f"weight_ih_l{k}"))
            getattr(torch_lstm, f"weight_hh_l{k}").copy_(getattr(ours, f"weight_hh_l{k}"))
            mts = k in ours.timescale_layers
            getattr(torch_lstm, f"bias_ih_l{k}").copy_(ours.gate_biases(k) if mts else getattr(ours, f"bias_ih_l{k}"))
            getattr(torch_lstm, f"bias_hh_l{k}").copy_(0 if mts else getattr(ours, f"bias_hh_l{k}"))
    x = torch.randn(9, 5, 24, device="cuda", dtype=dtype)
    x_ours, x_torch = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, (h, c) = ours(x_ours)
    want, (h_want, c_want) = torch_lstm(x_torch)
    assert out.dtype == dtype and torch.equal(out, want) and torch.equal(h, h_want) and torch.equal(c, c_want)
    (out.float().square().sum() + c.float().sum()).backward()
    (want.float().square().sum() + c_want.float().sum()).backward()
    _, grad_row = tsrnn.backend.tolerance.rows(dtype)
    torch.testing.assert_close(x_ours.grad, x_torch.grad, **grad_row)
    for k in range(2):
        torch.testing.assert_close(getattr(ours, f"weight_hh_l{k}").grad, getattr(torch_lstm, f"weight_hh_l{k}").grad,
                                   **grad_row)


def test_products_follow_the_flag():
    x = torch.zeros(1, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert precision.products(x.dtype, x.device) == "tf32"
        assert precision.products(torch.bfloat16, x.device) == "bf16"
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert precision.products(x.dtype, x.device) == "ieee"
        assert precision.products(torch.bfloat16, x.device) == "bf16"


@pytest.mark.parametrize("allow_tf32", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 7, 130), (3, 2, 4, 301), testing.TARGET_SHAPES[0]])
def test_cudnn_within_the_row_of_its_precision(shape, allow_tf32):
    """The first GPU run measured cuDNN's TF32 gradients at up to 4.4 times the float32 row: the
    TF32 rows hold them, and with TF32 off the float32 rows hold cuDNN again."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=allow_tf32):
        result = testing.compare("cudnn", "lstm", shape, torch.float32, "cuda")
    assert result.ok, result.failures()


def test_the_projection_rounds_whatever_the_matmul_flag():
    """x W^T + b in "tf32": operands rounded first, so cuBLAS gives the same sums with TF32 on or off
    (to float32's rounding of the accumulation)."""
    from tsrnn.ops.projection import torch_projection

    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).cuda() for s in ((64, 300), (128, 300), (128,)))
    want = (precision.round_operands(x, "tf32").double() @ precision.round_operands(w, "tf32").double().T
            + b.double())
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = flag  # the test's own setting, restored below
            got = torch_projection(x, w, b, "tf32")
            assert (got.double() - want).abs().max().item() <= 1e-5 * want.abs().max().item()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _storages(module, layer):
    names = ("weight_ih", "weight_hh") + (() if layer in module.timescale_layers else ("bias_ih", "bias_hh"))
    return {getattr(module, f"{name}_l{layer}").untyped_storage().data_ptr() for name in names}


def _effective_bias(module, layer=0):
    """[fixed; (b_ih + b_hh)[n:]], formed here in the fixed biases' dtype (float32 in a bf16 module)."""
    fixed = getattr(module, f"bias_fixed_l{layer}")
    b = getattr(module, f"bias_ih_l{layer}").to(fixed.dtype) + getattr(module, f"bias_hh_l{layer}").to(fixed.dtype)
    return torch.cat([fixed, b[fixed.shape[0]:]]).detach()


@pytest.mark.parametrize("options", [{"bidirectional": True}, {"proj_size": 16},
                                     {"bidirectional": True, "proj_size": 16}], ids=str)
@pytest.mark.parametrize("mts", [False, True])
def test_bidirectional_and_projected_flat_layers_match_torch_without_a_copy(options, mts):
    """Each direction of each layer is one flat buffer (W_hr after the biases, as cuDNN lays it out):
    cuDNN reads it without a copy (its warning is an error here) and the results are
    torch.nn.LSTM's with the same state dict (its own cuDNN call, both directions at once)."""
    torch.manual_seed(0)
    timescales = [torch.linspace(1, 30, 40), None] if mts else None
    module = tsrnn.LSTM(24, 40, num_layers=2, timescales=timescales, backend="cudnn", **options).cuda()
    theirs = module.to_torch()
    names = [n for n in theirs._flat_weights_names if "bias" not in n or not mts or "_l0" not in n]
    assert len({getattr(module, n).untyped_storage().data_ptr() for n in names}) == 2 * (
        2 if options.get("bidirectional") else 1)
    x = torch.randn(9, 5, 24, device="cuda", requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, (h, c) = module(x)
    out_t, (h_t, c_t) = theirs(x)
    row = testing.rows(torch.float32, precision.products(torch.float32, x.device))[0]
    for a, b in zip((out, h, c), (out_t, h_t, c_t)):
        assert_close(a, b, row)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_flat_buffer_is_read_in_place_and_rebuilt_after_a_step(dtype):
    """Where torch.nn.LSTM flattens its weights (float32; torch's cuDNN check leaves bf16 out), each
    layer's weights are views of one buffer in cuDNN's layout (a plain layer's biases too; an MTS
    layer's effective bias and zero vector in their slots): cuDNN takes it without copying (it
    would warn: the warnings are errors here), a warm call writes nothing into it, an optimizer step
    rewrites the effective bias in its slot, and a cast flattens again."""
    torch.manual_seed(0)
    module = tsrnn.LSTM(24, 40, num_layers=2, timescales=[torch.linspace(1, 30, 40), None],
                        backend="cudnn").cuda().to(dtype)
    torch_flat = len({p.untyped_storage().data_ptr() for p in torch.nn.LSTM(24, 40).cuda().to(dtype).parameters()}) == 1
    assert [len(_storages(module, k)) == 1 for k in range(2)] == [torch_flat] * 2
    x = torch.randn(9, 5, 24, device="cuda", dtype=dtype)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = module(x)[0]
        memo = module._memo(0, "", x.device)
        slot = memo["value"]
        assert (slot.untyped_storage().data_ptr() == module.weight_ih_l0.untyped_storage().data_ptr()) == torch_flat
        assert torch.equal(slot, _effective_bias(module))
        version = slot._version
        assert torch.equal(module(x)[0], out) and slot._version == version and memo["value"] is slot
        out.float().square().sum().backward()
        optimizer.step()
        module(x)
        assert torch.equal(memo["value"], _effective_bias(module)) and (memo["value"] is slot) == torch_flat
        module.float()
        assert all(len(_storages(module, k)) == 1 for k in range(2))
        module(x.float())[0].sum().backward()


def test_weight_drop_on_a_flat_module_copies_quietly():
    """AWD-LSTM's weight drop hands a new W_hh each call (functional_call): cuDNN copies that
    layer's weights, as it would torch.nn.LSTM's, without tsrnn's calls warning each time, and the
    results are those of the same weights on a module that was never flattened."""
    torch.manual_seed(0)
    module = tsrnn.LSTM(24, 40, timescales=[torch.linspace(1, 30, 40)], backend="cudnn").cuda()
    x = torch.randn(9, 5, 24, device="cuda")
    dropped = torch.nn.functional.dropout(module.weight_hh_l0, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = torch.func.functional_call(module, {"weight_hh_l0": dropped}, (x,))[0]
    h0 = torch.zeros(5, 40, device="cuda")
    want = tsrnn.functional.lstm(x, h0, h0, module.weight_ih_l0, dropped, _effective_bias(module), backend="cudnn")[0]
    assert torch.equal(out, want)
