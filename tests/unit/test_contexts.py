"""The seed-004 contexts (docs/equations.md §5): Buffer by hand, TILT and TILT-Buffer against tsrnn.TILT,
resets, the receptive fields (kernels) against forward, the seed's numbers, and bad arguments."""
import warnings

import pytest
import torch

import tsrnn
from tsrnn.memory.contexts import BufferContext, TILTBufferContext, TILTContext
from tsrnn.testing import TOLERANCE
from conftest import assert_close

T, B, D = 40, 3, 2  # T != B != D
F64 = TOLERANCE["contexts float64"]
CONTEXTS = {
    "buffer": lambda **kw: BufferContext(4, **kw),
    "tilt": lambda **kw: TILTContext(4, **kw),
    "tilt-buffer": lambda **kw: TILTBufferContext(4, **kw),
}


def inputs(steps=T, batch=B, width=D, seed=0, reset_p=0.1):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(steps, batch, width, generator=g, dtype=torch.float64)
    reset = torch.rand(steps, batch, generator=g) < reset_p
    return u, reset


# --------------------------------------------------------------------------------------------
# Buffer
# --------------------------------------------------------------------------------------------
def test_buffer_by_hand_with_reset():
    """Two columns of 5 steps, u = 1..5 and 10..50; column 1 starts a document at step 2."""
    u = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [5.0, 50.0]])[:, :, None]
    reset = torch.tensor([[0, 0], [0, 0], [0, 1], [0, 0], [0, 0]])
    ctx = BufferContext(3)(u, reset)
    assert ctx.shape == (5, 2, 3, 1)
    col0 = torch.tensor([[1, 0, 0], [2, 1, 0], [3, 2, 1], [4, 3, 2], [5, 4, 3]], dtype=torch.float32)
    col1 = torch.tensor([[10, 0, 0], [20, 10, 0], [30, 0, 0], [40, 30, 0], [50, 40, 30]], dtype=torch.float32)
    assert torch.equal(ctx[:, 0, :, 0], col0)
    assert torch.equal(ctx[:, 1, :, 0], col1)


def test_buffer_longer_than_sequence():
    u = torch.arange(1.0, 4.0)[:, None, None]
    ctx = BufferContext(5)(u)
    want = torch.tensor([[1, 0, 0, 0, 0], [2, 1, 0, 0, 0], [3, 2, 1, 0, 0]], dtype=torch.float32)
    assert torch.equal(ctx[:, 0, :, 0], want)


# --------------------------------------------------------------------------------------------
# TILT and TILT-Buffer against tsrnn.TILT
# --------------------------------------------------------------------------------------------
def test_tilt_context_is_the_first_n_outputs_of_tilt():
    """every = 1: the context is literally TILT's first n τ*; a longer grid of the same growth c
    gives the same first outputs (τ*_i's kernel uses only the rates i .. i + 2k)."""
    u, reset = inputs(seed=1)
    ctx = TILTContext(5, tau_min=1.0, c=0.2, every=1, k=4)(u, reset)
    y, _ = tsrnn.TILT(n_taus=12, tau_min=1.0, tau_max=1.2**11, k=4)(u, reset=reset)
    assert ctx.shape == (T, B, 5, D)
    assert_close(ctx, y[:, :, :5], F64, "TILTContext every=1")


def test_tilt_context_default_takes_every_sixth_of_the_fine_grid():
    u, reset = inputs(seed=2)
    ctx = TILTContext(5)(u, reset)
    y, _ = tsrnn.TILT(n_taus=25, tau_min=1.0, tau_max=1.1**24, k=4)(u, reset=reset)
    assert_close(ctx, y[:, :, [0, 6, 12, 18, 24]], F64, "TILTContext default")


def test_tilt_buffer_is_shifted_first_tau_star_with_resets():
    u, reset = inputs(seed=3, reset_p=0.15)
    reset[7, 1] = True
    n = 6
    ctx = TILTBufferContext(n)(u, reset)
    y0 = tsrnn.TILT(n_taus=10, tau_min=1.0, tau_max=1.1**9, k=4)(u, reset=reset)[0][:, :, 0]  # (T, B, D)
    want = torch.zeros(T, B, n, D, dtype=torch.float64)
    for b in range(B):
        start = 0
        for t in range(T):
            if reset[t, b]:
                start = t
            for i in range(n):
                if t - i >= start:
                    want[t, b, i] = y0[t - i, b]
    assert_close(ctx, want, F64, "TILTBufferContext")
    assert_close(ctx[:, :, 0], TILTContext(1)(u, reset)[:, :, 0], F64, "slot 0 is TILTContext slot 0")


# --------------------------------------------------------------------------------------------
# Properties shared by the three contexts
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(CONTEXTS))
def test_forward_is_the_convolution_with_kernels(kind):
    """An impulse at step 3 puts K[i, t - 3] in slot i at step t: kernels() and forward agree."""
    module = CONTEXTS[kind]()
    u = torch.zeros(T, 1, 1, dtype=torch.float64)
    u[3] = 1.0
    K = module.kernels(T - 3)
    assert K.shape == (4, T - 3) and K.dtype == torch.float64
    out = module(u)[:, 0, :, 0]  # (T, n)
    assert_close(out[3:].T, K, F64, f"{kind} impulse response")
    assert out[:3].abs().max() == 0


@pytest.mark.parametrize("kind", list(CONTEXTS))
def test_reset_equals_fresh_start(kind):
    """After a reset the context is what a fresh sequence starting there gives, and a reset at
    step 0 changes nothing."""
    u, _ = inputs(seed=4)
    module = CONTEXTS[kind]()
    reset = torch.zeros(T, B, dtype=torch.bool)
    reset[0] = True
    reset[15, 1] = True
    out = module(u, reset)
    assert_close(out[:, [0, 2]], module(u[:, [0, 2]]), F64, f"{kind} reset at step 0")
    assert_close(out[15:, 1], module(u[15:, 1:2])[:, 0], F64, f"{kind} after the reset")
    assert not torch.allclose(out[15:, 1], module(u[:, 1:2])[15:, 0])  # the reset did something


@pytest.mark.parametrize("kind", list(CONTEXTS))
def test_batch_first(kind):
    u, reset = inputs(seed=5)
    want = CONTEXTS[kind]()(u, reset)
    got = CONTEXTS[kind](batch_first=True)(u.transpose(0, 1), reset.T)
    assert got.shape == (B, T, 4, D)
    assert_close(got.transpose(0, 1), want, F64, f"{kind} batch_first")


@pytest.mark.parametrize("kind", list(CONTEXTS))
def test_float32_gradients_and_no_parameters(kind):
    u, reset = inputs(seed=6)
    module = CONTEXTS[kind]()
    assert list(module.parameters()) == []
    x = u.float().requires_grad_()
    out = module(x, reset)
    assert out.dtype == torch.float32
    assert_close(out, module(u, reset), TOLERANCE[torch.float32], f"{kind} float32")
    weight = torch.randn(out.shape, dtype=torch.float64)
    (grad,) = torch.autograd.grad((out * weight.float()).sum(), x)
    u64 = u.clone().requires_grad_()
    (grad64,) = torch.autograd.grad((module(u64, reset) * weight).sum(), u64)
    assert grad.abs().max() > 0
    assert_close(grad, grad64, TOLERANCE[torch.float32], f"{kind} grad")


# --------------------------------------------------------------------------------------------
# The seed's numbers
# --------------------------------------------------------------------------------------------
def test_tilt_context_matches_seed_004():
    """τ* 1, 1.77, 3.14, 5.56, ...: "τ* 4 is centered around 5.56 words into the past" and peaks
    there; the first τ* holds "mostly the words 1 to 3 words into the past"; every slot peaks
    within 1 + 5% of its τ*, and later slots peak lower (g = 0)."""
    module = TILTContext(8)
    tau = module.tau_star
    torch.testing.assert_close(tau[:4], torch.tensor([1.0, 1.7716, 3.1384, 5.5599], dtype=torch.float64),
                               atol=1e-4, rtol=0)
    K = module.kernels(120)
    peak = K.argmax(dim=1).double()
    assert peak[3] == 5
    assert ((peak - tau).abs() <= 1 + 0.05 * tau).all(), (peak, tau)
    assert K[0, :3].sum() > 0.95 * K[0].sum()
    height = K.max(dim=1).values
    assert (height[1:] < height[:-1]).all()


# --------------------------------------------------------------------------------------------
# Bad arguments (docs/equations.md §8)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [BufferContext, TILTContext, TILTBufferContext])
@pytest.mark.parametrize("n,exception,match", [(0, ValueError, r"n must be >= 1"), (-2, ValueError, r"n must be >= 1"),
                                               (2.0, TypeError, r"n must be an int"),
                                               (True, TypeError, r"n must be an int")])
def test_bad_n(cls, n, exception, match):
    with pytest.raises(exception, match=match):
        cls(n)


@pytest.mark.parametrize("kwargs,exception,match", [
    ({"every": 0}, ValueError, r"every must be >= 1"),
    ({"c": 0.0}, ValueError, r"c must be > 0"),
    ({"c": float("nan")}, ValueError, r"c must be finite"),
    ({"tau_min": -1.0}, ValueError, r"tau_min must be > 0"),
    ({"k": 0}, ValueError, r"k must be >= 1"),
    ({"integrate": "euler"}, ValueError, r"integrate must be one of"),
    ({"c": 1e-9}, ValueError,
     r"cannot use k=4 on the τ\* grid .* \(growth c=1e-09 per τ\*\): float64 rounding swamps"),
])
def test_bad_tilt_arguments(kwargs, exception, match):
    with pytest.raises(exception, match=match):
        TILTContext(3, **kwargs)
    if "every" not in kwargs:
        with pytest.raises(exception, match=match):
            TILTBufferContext(3, **kwargs)


@pytest.mark.parametrize("context", [TILTContext, TILTBufferContext])
def test_k_too_large_for_the_papers_grid_warns(context):
    """On seed 004's grid (c = 0.1) k <= 9 keeps the receptive fields' mass in [0.5, 2]."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        context(3, k=9)
    with pytest.warns(UserWarning, match=r"k=10 on the τ\* grid .*growth c=0.1 per τ\*.*; k <= 9 keeps every mass"):
        context(3, k=10)


BAD_INPUTS = {
    # id: (u, reset, exception, match)
    "u-2d": (lambda: torch.randn(T, D), None, ValueError, r"u must have 3 dimensions"),
    "u-4d": (lambda: torch.randn(T, B, 1, D), None, ValueError, r"u must have 3 dimensions"),
    "u-int": (lambda: torch.ones(T, B, D, dtype=torch.long), None, TypeError, r"u must be a floating-point"),
    "u-no-steps": (lambda: torch.randn(0, B, D), None, ValueError, r"u must have at least one step"),
    "u-nan": (lambda: torch.full((T, B, D), float("nan")), None, ValueError, r"u must be finite"),
    "reset-shape": (lambda: torch.randn(T, B, D), lambda: torch.zeros(B, T, dtype=torch.bool), ValueError,
                    r"reset must have shape \(40, 3\)"),
    "reset-values": (lambda: torch.randn(T, B, D), lambda: torch.full((T, B), 3), ValueError,
                     r"reset must hold only 0 and 1"),
    "reset-list": (lambda: torch.randn(T, B, D), lambda: [[0] * B] * T, TypeError, r"reset must be a torch.Tensor"),
}


@pytest.mark.parametrize("kind", list(CONTEXTS))
@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_inputs(kind, case):
    make_u, make_reset, exception, match = BAD_INPUTS[case]
    with pytest.raises(exception, match=match):
        CONTEXTS[kind]()(make_u(), None if make_reset is None else make_reset())
