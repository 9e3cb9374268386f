"""Every recurrence path against the float64 reference, through one table (tsrnn.testing):
cells x shapes x dtypes, forward and backward, contiguous and strided inputs.

Paths that cannot run a case here are skipped with the dispatcher's reason (e.g. onednn runs
the LSTM only; cuda_cluster and cuda_grid need a GPU). The Triton path runs on CUDA, or on CPU tensors through the Triton interpreter (TRITON_INTERPRET=1, conftest.py),
where a step costs milliseconds: there they take the shapes up to H = 67.
"""
import pytest
import torch

import tsrnn
from tsrnn import testing
from tsrnn.ops.recurrence import cells
from tsrnn.testing import TOLERANCE
from conftest import assert_close, wrap_layer_runs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _check(path, cell, shape, dtype, **kw):
    reason = testing.why_not(path, cell, shape, dtype, DEVICE)
    if reason:
        pytest.skip(reason)
    if DEVICE == "cpu" and path.startswith("triton") and shape not in testing.INTERPRETED_SHAPES:
        pytest.skip("too slow for the Triton interpreter")
    result = testing.compare(path, cell, shape, dtype, DEVICE, **kw)
    assert result.ok, f"{path} {cell} {shape} {dtype}: {result.failures()}"


@pytest.mark.parametrize("dtype", testing.DTYPES, ids=str)
@pytest.mark.parametrize("shape", testing.SHAPES, ids=str)
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_path_matches_the_reference(path, cell, shape, dtype):
    _check(path, cell, shape, dtype, dt=True and shape[0] % 2 == 1, seed=shape[0] * 31 + shape[3])


@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_strided_inputs(path, cell):
    _check(path, cell, (6, 3, 5, 4), torch.float64, dt=True, contiguous=False, seed=8)


@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_without_autograd(path, cell):
    """No input needs a gradient: the kernels run without saving activations."""
    _check(path, cell, (5, 2, 3, 6), torch.float32, dt=True, grads=False, seed=9)


@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_gradcheck(path):
    """torch.autograd.gradcheck through functional.lstm / plstm on each path (float64); under the
    Triton interpreter in fast mode (a random projection of the Jacobian: a few evaluations)."""
    fast = DEVICE == "cpu" and path.startswith("triton")
    runs = [cell for cell in cells.CELLS if not testing.why_not(path, cell, (3, 2, 2, 3), torch.float64, DEVICE)]
    if not runs:
        pytest.skip(testing.why_not(path, "lstm", (3, 2, 2, 3), torch.float64, DEVICE))
    for cell in runs:
        assert testing.gradcheck(path, cell, (3, 2, 2, 3), DEVICE, seed=10, fast=fast), (path, cell)


def test_reference_gradcheck():
    for cell in cells.CELLS:
        args = testing.layer_args(cell, 3, 2, 2, 3, seed=11, dt=True)
        names = testing.differentiable(args)

        def f(*tensors):
            out, state = testing.reference_layer(cell, {**args, **dict(zip(names, tensors))})
            return out, *state

        assert torch.autograd.gradcheck(f, tuple(args[k].clone().requires_grad_() for k in names)), cell


def test_harness_catches_a_wrong_kernel(monkeypatch):
    """The table can fail: a fused path whose output is off by a relative 1e-6 is reported."""

    def wrap(original):
        def skewed(*args, **kwargs):
            out, finals, forget = original(*args, **kwargs)
            return out * (1 + 1e-6), finals, forget
        return skewed

    wrap_layer_runs(monkeypatch, wrap, kinds=("operator",))
    path = next(p for p in ("cpu", "triton_step") if not testing.why_not(p, "lstm", (4, 2, 3, 5), torch.float64, DEVICE))
    result = testing.compare(path, "lstm", (4, 2, 3, 5), torch.float64, DEVICE)
    assert not result.ok and "out" in result.failures()


@pytest.mark.parametrize("input_gate", ["coupled", "separate"])
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_plstm_trace_matches_the_reference(path, input_gate):
    """PowerLawLSTM.trace on a fused path (r and f read from its saved activations, a from the
    operator's every-step states) equals the reference's step loop, per layer, with Δt given and a carried state."""
    cell = f"plstm_{input_gate}"
    reason = testing.why_not(path, cell, (5, 3, 4, 6), torch.float64, DEVICE)
    if reason:
        pytest.skip(reason)
    torch.manual_seed(4)
    m = tsrnn.PowerLawLSTM(4, 6, num_layers=2, input_gate=input_gate, dtype=torch.float64, backend="reference")
    x = torch.randn(5, 3, 4, dtype=torch.float64, device=DEVICE)
    dt = torch.rand(5, 3, dtype=torch.float64, device=DEVICE) + 0.25
    m = m.to(DEVICE)
    _, state = m(x, dt=dt)
    expected = m.trace(x, state, dt=dt)
    m.backend = path
    actual = m.trace(x, state, dt=dt)
    _, (_, _, a_n) = m(x, state, dt=dt)
    for k, (got, want) in enumerate(zip(actual, expected)):
        assert set(got) == {"r", "a", "f", "p"}
        for name in ("r", "a", "f"):
            assert got[name].shape == (5, 3, 6), name
            assert_close(got[name], want[name], TOLERANCE["float64 reordered"], f"layer {k} {name}")
        assert torch.equal(got["p"], m.p(k).detach())
        assert_close(got["a"][-1], a_n[k], TOLERANCE["float64 reordered"], f"layer {k} final age")
        assert (got["r"] > 0).all() and (got["r"] < 1).all() and (got["a"] >= 0).all()
