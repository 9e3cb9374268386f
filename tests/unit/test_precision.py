"""The precision of the products (tsrnn.precision.products, round_operands) on the CPU: the rule
for a layer's dtype and device (``products`` reads only the device's type, so a CUDA device needs
no GPU here), the rounding, the input projection in a precision (its GEMMs and their gradients,
eager and under torch.compile), and that no tsrnn code changes a torch flag."""
from __future__ import annotations

import contextlib
import pathlib
import re

import pytest
import torch

import tsrnn
from tsrnn import backend, precision, testing
from tsrnn.ops.projection import torch_projection
from tsrnn.ops.recurrence import paths as recurrence_paths
from conftest import assert_close, needs_native

CUDA = torch.device("cuda")  # a device object only: products reads its type


@pytest.fixture
def flag():
    """Sets torch.backends.cudnn.allow_tf32 for the test, restored after."""
    before = torch.backends.cudnn.allow_tf32

    def set_flag(value: bool):
        torch.backends.cudnn.allow_tf32 = value

    yield set_flag
    torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("allow_tf32", [True, False])
def test_products_on_cuda_follow_the_cudnn_flag(flag, allow_tf32):
    flag(allow_tf32)
    tf32 = "tf32" if allow_tf32 else "ieee"
    assert precision.products(torch.float32, CUDA) == tf32
    assert precision.products(torch.float16, CUDA) == tf32
    assert precision.products(torch.bfloat16, CUDA) == "bf16"  # a bf16 layer's operands are bf16 either way
    assert precision.products(torch.float64, CUDA) == "ieee"
    assert precision.products(torch.float32, torch.device("cuda", 1)) == tf32


@pytest.mark.parametrize("allow_tf32", [True, False])
def test_products_elsewhere_are_exact(flag, allow_tf32):
    flag(allow_tf32)
    for device in (torch.device("cpu"), torch.device("meta")):
        for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
            assert precision.products(dtype, device) == "ieee"


def test_tf32_rounds_to_nearest_ties_away_keeping_inf_and_nan():
    ulp = 2.0 ** -10  # of TF32 at 1
    x = torch.tensor([1.0, 1 + ulp / 2, 1 + ulp / 2 - 2.0 ** -23, 1 + 1.5 * ulp, -(1 + ulp / 2), 3.4028235e38,
                      float("inf"), -float("inf"), float("nan"), 0.0, -0.0])
    want = torch.tensor([1.0, 1 + ulp, 1.0, 1 + 2 * ulp, -(1 + ulp), float("inf"),
                         float("inf"), -float("inf"), float("nan"), 0.0, -0.0])
    got = precision.round_operands(x, "tf32")
    assert got.dtype == torch.float32
    assert torch.equal(got.nan_to_num(), want.nan_to_num()) and bool(got[8].isnan())
    assert torch.equal(got.signbit(), want.signbit())
    y = torch.randn(10000, generator=torch.Generator().manual_seed(0))
    r = precision.round_operands(y, "tf32")
    assert torch.equal(r, precision.round_operands(r, "tf32"))  # idempotent: TF32 values stay
    assert torch.equal(r.view(torch.int32) & 0x1FFF, torch.zeros_like(r, dtype=torch.int32))  # 10 mantissa bits
    assert ((r - y).abs() <= y.abs() * 2.0 ** -11).all()  # within u = 2^-11


def test_bf16_and_ieee_rounding_and_the_dtypes_tf32_leaves():
    y = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    assert torch.equal(precision.round_operands(y, "bf16"), y.bfloat16().float())
    assert precision.round_operands(y, "ieee") is y
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        t = y.to(dtype)
        assert torch.equal(precision.round_operands(t, "tf32"), t)  # fp16 and bf16 values are TF32 values
    assert torch.equal(precision.round_operands(y.double(), "bf16"), y.double().bfloat16().double())
    with pytest.raises(ValueError, match="products must be one of"):
        precision.round_operands(y, "tf16")


@pytest.mark.parametrize("products", ["tf32", "bf16"])
def test_the_projection_computes_in_its_precision(products):
    """x W^T + b and its gradients: each GEMM takes operands rounded to the precision (the incoming
    gradient too); the bias's gradient sums the gradient as it is."""
    g = torch.Generator().manual_seed(2)
    x, w, b, grad = (torch.randn(*s, generator=g) for s in ((6, 5), (8, 5), (8,), (6, 8)))
    x, w, b = (t.requires_grad_() for t in (x, w, b))
    out = torch_projection(x, w, b, products)

    def r(t):
        return precision.round_operands(t.detach(), products).double()

    assert_close(out, r(x) @ r(w).T + b.detach().double(), {"atol": 1e-6, "rtol": 0}, "out")
    dx, dw, db = torch.autograd.grad(out, (x, w, b), grad, retain_graph=True)
    assert_close(dx, r(grad) @ r(w), {"atol": 1e-6, "rtol": 0}, "dx")
    assert_close(dw, r(grad).T @ r(x), {"atol": 1e-6, "rtol": 0}, "dw")
    assert torch.equal(db, grad.sum(0))
    assert not torch.allclose(dx, grad @ w.detach(), atol=1e-7, rtol=0)  # it did round
    # differentiated again (create_graph=True), the rounding counts as the identity
    dx, = torch.autograd.grad(out, x, grad.clone().requires_grad_(), create_graph=True)
    assert dx.requires_grad
    assert torch.equal(torch_projection(x, w, None, "ieee"), x @ w.t())


@contextlib.contextmanager
def _path_with_products(products: str):
    """The registry with "cpu_<products>": the compiled CPU kernels (which compute exactly, as a
    kernel may) and torch's projection, products fixed to ``products``: the input projection then
    runs in that precision on the CPU."""
    cpu = backend.REGISTRY["cpu"]
    record = backend.Path(f"cpu_{products}", {"recurrence": recurrence_paths.run_operator}, ("cpu",), None,
                          "operator", cpu.rule, cpu.namespace, torch_projection, lambda dtype, device: products)
    with testing.registered(record) as name:
        yield name


@needs_native
@pytest.mark.parametrize("cell", ["lstm", "plstm_separate"])
def test_a_tf32_projection_is_within_the_tf32_rows(cell):
    with _path_with_products("tf32") as path:
        result = testing.compare(path, cell, (13, 3, 7, 9), torch.float32, dt=cell != "lstm", products="tf32")
        assert result.ok, result.failures()
        exact = testing.compare(path, cell, (13, 3, 7, 9), torch.float32, dt=cell != "lstm")  # the float32 rows
        assert not exact.ok, "the projection's TF32 rounding went unseen"


@needs_native
def test_torch_compile_traces_the_rounded_projection():
    with _path_with_products("tf32") as path:
        torch.manual_seed(3)
        model = tsrnn.LSTM(4, 6, backend=path)

        def step(x):
            out, (h, c) = model(x)
            return out.square().mean() + c.mean()

        x = torch.randn(5, 2, 4)
        loss = step(x)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        loss_c = compiled(x)
        grads_c = torch.autograd.grad(loss_c, list(model.parameters()))
    assert_close(loss_c, loss, testing.TOLERANCE["compiled"], "loss")
    for g, g_c in zip(grads, grads_c):
        assert_close(g_c, g, testing.TOLERANCE["compiled"], "grad")


def _flags():
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    return (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32,
            matmul.allow_bf16_reduced_precision_reduction, torch.get_float32_matmul_precision())


@pytest.mark.parametrize("products", ["tf32", "bf16"])
def test_a_weight_is_rounded_once_per_version(monkeypatch, products):
    """rounded_weight keeps a weight's rounded copy while the weight is unchanged (the projection's
    forward and backward of a step round W_ih once; the backward then drops it), rounds again after
    an in-place update or a new .data, and never keeps one for a weight autograd records or a
    tensor that is gone."""
    calls = []  # the shapes rounded: w is [20, 7], x [5, 7], the gradient [5, 20]
    monkeypatch.setattr(precision, "round_operands",
                        lambda t, p, f=precision.round_operands: calls.append(tuple(t.shape)) or f(t, p))
    w = torch.nn.Parameter(torch.randn(20, 7, generator=torch.Generator().manual_seed(0)))
    x = torch.randn(5, 7, requires_grad=True)
    torch_projection(x, w, None, products).sum().backward()
    assert calls.count((20, 7)) == 1 and calls.count((5, 20)) == 1, calls  # w's copy serves the backward
    with torch.no_grad():
        first = precision.rounded_weight(w, products)  # the backward dropped its copy: rounded again
        assert precision.rounded_weight(w, products) is first and calls.count((20, 7)) == 2
        w.add_(1.0)  # an optimizer step
        second = precision.rounded_weight(w, products)
        assert second is not first and torch.equal(second, precision.round_operands(w.detach(), products))
        w.data = torch.zeros(20, 7)
        assert torch.equal(precision.rounded_weight(w, products), torch.zeros(20, 7))
        assert precision.rounded_weight(w, "ieee") is w
    recorded = precision.rounded_weight(w, products)  # grad enabled, w requires grad: rounded each time
    assert recorded is not precision.rounded_weight(w, products)
    del w
    assert not any(entry[0]() is None for entry in precision._rounded.values())


@pytest.mark.parametrize("products", ["tf32", "bf16"])
@pytest.mark.parametrize("input_grad", [True, False], ids=["dx", "no dx"])
def test_a_data_write_after_a_backward_is_rounded_again(products, input_grad):
    """The ``p.data.add_(...)`` training loops write W after the backward with no new version: the
    backward drops W's rounded copy (whether or not it needed dx), so the next forward sees the write."""
    w = torch.nn.Parameter(torch.randn(20, 7, generator=torch.Generator().manual_seed(0)))
    x = torch.randn(5, 7, requires_grad=input_grad)
    for step in range(3):
        out = torch_projection(x, w, None, products)
        want = precision.round_operands(x.detach(), products) @ precision.round_operands(w.detach(), products).t()
        torch.testing.assert_close(out, want, msg=f"step {step}")
        out.sum().backward()
        w.data.add_(1.0)


def test_layers_leave_the_flags_as_they_are(flag):
    """Non-default settings stay through forward and backward of every CPU path."""
    flag(False)
    before_matmul = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        before = _flags()
        for name in ["auto", "reference", *backend.paths_on("cpu", "recurrence")]:
            if name != "auto" and testing.why_not(name, "lstm", (3, 2, 4, 5), torch.float32, "cpu") is not None:
                continue
            model = tsrnn.LSTM(4, 5, backend=name)
            out, (h, c) = model(torch.randn(3, 2, 4))
            (out.sum() + c.sum()).backward()
            assert _flags() == before, name
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before_matmul


def test_no_tsrnn_code_sets_a_torch_flag():
    """The precision is read (tsrnn.precision.products) and passed down; nothing assigns
    torch.backends flags or enters their flags() contexts."""
    root = pathlib.Path(tsrnn.__file__).parent
    setter = re.compile(r"torch\.backends\.[\w.]+\s*=(?!=)|backends\.\w+\.flags\(|set_float32_matmul_precision\(|"
                        r"\b(cudnn|matmul)\.allow_\w+\s*=(?!=)")
    found = [f"{path.relative_to(root)}:{i}: {line.strip()}" for path in root.rglob("*.py")
             for i, line in enumerate(path.read_text().splitlines(), 1) if setter.search(line)]
    assert not found, found


@pytest.mark.usefixtures("clean_backend_state")
def test_a_change_of_precision_chooses_anew(monkeypatch):
    """The remembered choice of a call key (tsrnn.backend.MEMO) holds for one precision of the
    products: after torch.backends.cudnn.allow_tf32 changes (here: products itself), the next call
    works out its path again, verified for that precision."""
    from tsrnn.backend import choice

    model = tsrnn.LSTM(3, 4)
    x = torch.randn(2, 2, 3)
    model(x)
    model(x)
    assert len(choice.MEMO) == 1
    monkeypatch.setattr(precision, "products", lambda dtype, device: "tf32")
    model(x)
    assert len(choice.MEMO) == 2
