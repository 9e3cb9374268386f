"""Second derivatives (create_graph=True: gradient penalties, Hessian-vector products).

On the CPU every path is differentiable to any order, as torch.nn.LSTM is there: the reference
loops and torch's own LSTM kernel (onednn) by autograd, the fused paths because their backward,
asked for a graph, recomputes the layer through the reference steps (tsrnn/ops/recurrence/
recompute.py): gradgradcheck, and gradient penalties equal to the reference's, through the
functional layer and the modules on "auto" (padded and packed, Δt drawn or 1, a loss on every
result or on some), third derivatives too, and a plain backward never recomputes. On CUDA, as
torch.nn.LSTM's cuDNN kernel, the fused recurrence kernels compute first derivatives only and
differentiating their backward raises an error that names the way out, whichever input the
second derivative is taken for.
"""
import pytest
import torch

import tsrnn
from tsrnn import backend, functional, testing
from tsrnn.ops.recurrence import cells
from conftest import needs_native

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FUSED = [p for p in testing.LAYER_PATHS if p not in ("onednn", "cudnn")]
SHAPE = (3, 2, 2, 3)


def _layer_inputs(path, cell, seed=0, unit_dt=False):
    """The float64 arguments of one layer on ``path``; a pLSTM's Δt drawn per step and row, or 1
    (dt=None) with ``unit_dt``."""
    reason = testing.why_not(path, cell, SHAPE, torch.float64, DEVICE)
    if reason:
        pytest.skip(reason)
    args = testing.layer_args(cell, *SHAPE, seed=seed, dt=cells.get(cell).params != () and not unit_dt)
    return {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}


@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("path", ["reference", "onednn"])
def test_gradgradcheck(path, cell):
    args = _layer_inputs(path, cell)
    names = testing.differentiable(args)

    def layer(*tensors):
        out, state = testing.run_layer(cell, {**args, **dict(zip(names, tensors))}, path)
        return out, *state

    inputs = tuple(args[k].clone().requires_grad_() for k in names)
    assert torch.autograd.gradgradcheck(layer, inputs)


def _penalty_grads(path, cell, wrt, scale_out=False, lengths=None, unit_dt=False, reads="both"):
    """d/d(wrt) of |dL/dx|^2 with L the layer's loss, the way a gradient penalty computes it. L
    reads the outputs and the final states (``reads`` "both"), the outputs only ("out": the op's
    backward gets no grad_state_n) or the final cell state only ("c": no grad_h)."""
    args = _layer_inputs(path, cell, unit_dt=unit_dt)
    if lengths is not None:
        args["lengths"] = torch.tensor(lengths)
    for name in testing.differentiable(args):
        args[name] = args[name].clone().requires_grad_()
    head = torch.linspace(-1, 1, SHAPE[3], dtype=torch.float64, device=DEVICE).requires_grad_()
    out, state = testing.run_layer(cell, args, path)
    out_loss = (out * head).sum() if scale_out else out.pow(2).sum()
    state_loss = sum(s.pow(2).sum() for s in state)
    loss = {"both": out_loss + state_loss, "out": out_loss, "c": state[1].pow(2).sum()}[reads]
    (g,) = torch.autograd.grad(loss, args["x"], create_graph=True)
    targets = [head if w == "head" else args[w] for w in wrt]
    return torch.autograd.grad(g.pow(2).sum(), targets, allow_unused=True)


@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("wrt", [("x",), ("w_ih",), ("w_hh",), ("head",)], ids=str)
@pytest.mark.parametrize("path", FUSED)
def test_fused_second_derivatives(path, cell, wrt):
    """Every route of the second derivative through the fused backward: through the input (x,
    w_ih reach it through the projection), W_hh, and a downstream weight that reaches it only
    through the incoming gradient (out * head: the fused backward's grad_h). On the CPU they equal
    the reference's; on CUDA they raise."""
    if DEVICE == "cpu" and path.startswith("triton") and (wrt != ("x",) or cell != "lstm"):
        pytest.skip("one case is enough under the Triton interpreter")
    if DEVICE == "cuda":
        with pytest.raises(RuntimeError, match="first derivatives only.*backend='reference'"):
            _penalty_grads(path, cell, wrt, scale_out=wrt == ("head",))
        return
    got = _penalty_grads(path, cell, wrt, scale_out=wrt == ("head",))
    want = _penalty_grads("reference", cell, wrt, scale_out=wrt == ("head",))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert b.abs().sum() > 0


@pytest.mark.skipif(DEVICE != "cpu", reason="the fused CUDA kernels are first-order, as cuDNN's")
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("lengths", [[3, 1], [2, 0]], ids=str)
@needs_native
def test_cpu_second_derivatives_with_lengths(cell, lengths):
    """Packed rows (a row of no step too): the recomputed layer runs each row for its own steps."""
    got = _penalty_grads("cpu", cell, ("x", "w_hh", "h0"), lengths=lengths)
    want = _penalty_grads("reference", cell, ("x", "w_hh", "h0"), lengths=lengths)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(DEVICE != "cpu", reason="the fused CUDA kernels are first-order, as cuDNN's")
@pytest.mark.parametrize("cell", ["plstm_coupled", "plstm_separate"])
@needs_native
def test_cpu_second_derivatives_with_unit_dt(cell):
    """Δt = 1 (dt=None): the recomputed pLSTM step's other branch, through every pLSTM argument."""
    wrt = ("x", "w_hh", "h0", "c0", "a0", "p")
    got = _penalty_grads("cpu", cell, wrt, unit_dt=True)
    want = _penalty_grads("reference", cell, wrt, unit_dt=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert b.abs().sum() > 0


@pytest.mark.skipif(DEVICE != "cpu", reason="the fused CUDA kernels are first-order, as cuDNN's")
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("reads", ["out", "c"])
@needs_native
def test_cpu_second_derivatives_of_a_loss_on_part_of_the_results(cell, reads):
    """A loss on the outputs only (the op's backward gets grad_state_n None) or on the final cell
    state only (grad_h None): the recomputation differentiates the results that have a gradient."""
    wrt = ("x", "w_hh", "c0")
    got = _penalty_grads("cpu", cell, wrt, reads=reads)
    want = _penalty_grads("reference", cell, wrt, reads=reads)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert b.abs().sum() > 0


def _third_derivatives(path, cell):
    """d/d(x, W_hh) of |d/dW_hh |dL/dx|^2|^2: three backwards, each through the one before."""
    args = _layer_inputs(path, cell)
    for name in testing.differentiable(args):
        args[name] = args[name].clone().requires_grad_()
    out, state = testing.run_layer(cell, args, path)
    (g,) = torch.autograd.grad(testing.loss_of(out, state), args["x"], create_graph=True)
    (gg,) = torch.autograd.grad(g.pow(2).sum(), args["w_hh"], create_graph=True)
    return torch.autograd.grad(gg.pow(2).sum(), [args["x"], args["w_hh"]])


@pytest.mark.skipif(DEVICE != "cpu", reason="the fused CUDA kernels are first-order, as cuDNN's")
@pytest.mark.parametrize("cell", list(cells.CELLS))
@needs_native
def test_cpu_third_derivatives(cell):
    """The recomputed gradients carry a graph of torch ops: differentiable to any order."""
    for a, b in zip(_third_derivatives("cpu", cell), _third_derivatives("reference", cell)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        assert b.abs().sum() > 0


@pytest.mark.parametrize("products", ["tf32", "bf16"])
@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_the_recompute_rounds_the_products_as_the_call_did(cell, products):
    """A call whose recurrent products round W_hh and h (TF32, bf16: CUDA's; CPU calls are
    "ieee") is recomputed with them rounded, the rounding's derivative the identity's
    (precision.straight_through): its results and gradients move by a rounding from the ieee
    layer's, the gradients neither cut nor refused."""
    from tsrnn.ops.recurrence import recompute

    described = cells.get(cell)
    T, B, H = 3, 2, 4
    g = torch.Generator().manual_seed(5)
    xg = torch.randn(T, B, described.num_gates * H, generator=g)
    w_hh = torch.randn(described.num_gates * H, H, generator=g) / 2
    h0 = torch.randn(B, H, generator=g)
    state0 = torch.rand(described.num_states, B, H, generator=g)
    params = torch.rand(len(described.params), H, generator=g) if described.params != () else None
    steps = torch.rand(T, B, generator=g) + 0.5 if described.step_input is not None else None
    constants = list(described.defaults)
    grad_h = torch.randn(T, B, H, generator=g)
    results = {}
    for mode in ("ieee", products):
        inputs = [t.clone().requires_grad_() for t in (xg, w_hh, h0, state0)]
        h_all, _ = recompute.layer(cell, *inputs, params, steps, constants, None, mode)
        grads = recompute.gradients(cell, (True,) * 4 + (False,), grad_h, None, *inputs, params, steps, constants, None,
                                    mode)
        results[mode] = (h_all, *grads[:4])
    tol = {"tf32": 2e-3, "bf16": 2e-2}[products]
    assert not torch.equal(results["ieee"][0], results[products][0])  # the operands were rounded
    for a, b in zip(results[products], results["ieee"]):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
        assert a.abs().sum() > 0


@pytest.mark.skipif(DEVICE != "cpu", reason="the fused CUDA kernels are first-order, as cuDNN's")
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("lengths", [None, [3, 1]], ids=["padded", "lengths"])
@needs_native
def test_cpu_path_gradgradcheck(cell, lengths):
    assert testing.gradcheck("cpu", cell, SHAPE, lengths=lengths, second_order=True)


@pytest.mark.skipif(DEVICE != "cpu", reason="the fused CUDA kernels are first-order, as cuDNN's")
@pytest.mark.parametrize("make", [tsrnn.LSTM, tsrnn.PowerLawLSTM], ids=["lstm", "plstm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_gradient_penalty_through_auto_modules(make, dtype):
    """A gradient penalty through a two-layer module on "auto" (the "cpu" path where it wins the
    timing) equals the reference module's: the issue's case, which raised in float32."""
    torch.manual_seed(0)
    modules = [make(3, 5, 2, dtype=dtype, backend=b) for b in ("auto", "cpu", "reference")]
    for m in modules[1:]:
        m.load_state_dict(modules[0].state_dict())
    x = torch.randn(4, 2, 3, dtype=dtype)
    results = []
    for m in modules:
        xi = x.clone().requires_grad_()
        out, _ = m(xi)
        (g,) = torch.autograd.grad(out.square().sum(), xi, create_graph=True)
        results.append(torch.autograd.grad(g.square().sum(), list(m.parameters())))
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    for got in results[:2]:
        for a, b in zip(got, results[2]):
            torch.testing.assert_close(a, b, **tol)


def test_the_recompute_runs_only_when_a_graph_is_asked_for(monkeypatch):
    """A plain backward (and a forward without gradients) never recomputes the layer."""
    from tsrnn.ops.recurrence import recompute

    def refuse(*args):
        raise AssertionError("recomputed without create_graph")

    monkeypatch.setattr(recompute, "layer", refuse)
    args = _layer_inputs("cpu", "lstm")
    for name in testing.differentiable(args):
        args[name] = args[name].clone().requires_grad_()
    out, state = testing.run_layer("lstm", args, "cpu")
    testing.loss_of(out, state).backward()
    with pytest.raises(AssertionError, match="recomputed without create_graph"):
        out, state = testing.run_layer("lstm", args, "cpu")
        torch.autograd.grad(testing.loss_of(out, state), args["x"], create_graph=True)


@pytest.mark.parametrize("path", FUSED)
def test_create_graph_alone_is_not_an_error(path):
    """create_graph=True whose result is not differentiated again: the first derivatives, to
    rounding (float64: on "cpu" the projection's gradients then come from torch's GEMM)."""
    args = _layer_inputs(path, "lstm")
    names = testing.differentiable(args)
    for name in names:
        args[name] = args[name].clone().requires_grad_()
    out, state = testing.run_layer("lstm", args, path)
    loss = testing.loss_of(out, state)
    with_graph = torch.autograd.grad(loss, [args[k] for k in names], create_graph=True, retain_graph=True)
    plain = torch.autograd.grad(loss, [args[k] for k in names])
    for name, a, b in zip(names, with_graph, plain):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


def test_reference_second_derivative_matches_onednn():
    """The LSTM's gradient penalty on the two paths that support it agrees (float64)."""
    a = _penalty_grads("reference", "lstm", ("x", "w_hh"))
    b = _penalty_grads("onednn", "lstm", ("x", "w_hh"))
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v)
        assert u.abs().sum() > 0


@needs_native
def test_cpu_projection_gradgradcheck():
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in ((5, 3), (4, 3), (4,)))
    assert torch.autograd.gradgradcheck(torch.ops.tsrnn.cpu_projection, (x, w, b))


@pytest.mark.parametrize("path", ["reference", "cpu", "triton_scan"])
def test_linear_scan_second_derivative(path):
    g = torch.Generator().manual_seed(4)
    a, u = (torch.rand(5, 3, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_() for _ in range(2))
    reason = backend.why_not(path, backend.Call("linear_scan", a.device, a.dtype, (5, 3)))
    if reason:
        pytest.skip(reason)
    fast = DEVICE == "cpu" and path.startswith("triton")  # the interpreter: a random projection of the Jacobian
    assert torch.autograd.gradgradcheck(lambda a, u: functional.linear_scan(a, u, backend=path), (a, u), fast_mode=fast)
