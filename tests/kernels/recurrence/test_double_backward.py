"""Second derivatives (create_graph=True: gradient penalties, Hessian-vector products).

The reference loops and torch's own LSTM kernel on CPU (onednn) are differentiable to any order
(gradgradcheck); the fused kernels compute first derivatives only, and differentiating their
backward raises an error that names the way out, whichever input the second derivative is taken
for, instead of returning a second derivative that silently misses their terms. The "cpu" path's
input projection is differentiable twice (its backward runs torch's ops under create_graph).
"""
import pytest
import torch

from tsrnn import backend, functional, testing
from tsrnn.ops.recurrence import cells
from conftest import needs_native

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FUSED = [p for p in testing.LAYER_PATHS if p not in ("onednn", "cudnn")]
SHAPE = (3, 2, 2, 3)


def _layer_inputs(path, cell, seed=0):
    reason = testing.why_not(path, cell, SHAPE, torch.float64, DEVICE)
    if reason:
        pytest.skip(reason)
    args = testing.layer_args(cell, *SHAPE, seed=seed, dt=cells.get(cell).has_p)
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


def _penalty_grads(path, cell, wrt, scale_out=False):
    """d/d(wrt) of |dL/dx|^2 with L the layer's loss, the way a gradient penalty computes it."""
    args = _layer_inputs(path, cell)
    for name in testing.differentiable(args):
        args[name] = args[name].clone().requires_grad_()
    head = torch.linspace(-1, 1, SHAPE[3], dtype=torch.float64, device=DEVICE).requires_grad_()
    out, _ = testing.run_layer(cell, args, path)
    loss = (out * head).sum() if scale_out else out.pow(2).sum()
    (g,) = torch.autograd.grad(loss, args["x"], create_graph=True)
    targets = [head if w == "head" else args[w] for w in wrt]
    return torch.autograd.grad(g.pow(2).sum(), targets, allow_unused=True)


@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("wrt", [("x",), ("w_ih",), ("w_hh",), ("head",)], ids=str)
@pytest.mark.parametrize("path", FUSED)
def test_fused_double_backward_raises(path, cell, wrt):
    """Every route of the second derivative through the fused backward raises: through the input
    (x, w_ih reach it through the projection), W_hh, and a downstream weight that reaches it
    only through the incoming gradient (out * head: the fused backward's grad_h)."""
    if DEVICE == "cpu" and path.startswith("triton") and (wrt != ("x",) or cell != "lstm"):
        pytest.skip("one case is enough under the Triton interpreter")
    with pytest.raises(RuntimeError, match="first derivatives only.*backend='reference'"):
        _penalty_grads(path, cell, wrt, scale_out=wrt == ("head",))


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
    if path == "reference":
        assert torch.autograd.gradgradcheck(lambda a, u: functional.linear_scan(a, u, backend=path), (a, u))
        return
    reason = backend.why_not(path, backend.Call("linear_scan", a.device, a.dtype, (5, 3)))
    if reason:
        pytest.skip(reason)
    x = functional.linear_scan(a, u, backend=path)
    (gu,) = torch.autograd.grad(x.pow(2).sum(), u, create_graph=True)
    with pytest.raises(RuntimeError, match="linear scan kernels compute first derivatives only"):
        torch.autograd.grad(gu.pow(2).sum(), a)
