"""Fused CPU kernels (backend="native") against the references, forward and backward, in float64,
float32 and bf16, on shapes that include T=1, B=1, odd sizes and long sequences."""
import pytest
import torch

from tsrnn import backend, functional, ops, reference
from conftest import GRAD_TOLERANCE, TOLERANCE, assert_close, cast, differentiable, layer_args, needs_native

pytestmark = needs_native

CELLS = ["lstm", "plstm_coupled", "plstm_separate"]
SHAPES = [  # (T, B, I, H)
    (1, 1, 1, 1),
    (1, 4, 3, 5),
    (7, 1, 5, 3),
    (13, 3, 7, 9),
    (5, 2, 33, 17),
    (3, 2, 5, 67),  # H >= 64: the time loop splits the units over threads (uneven last slice)
    (4, 3, 7, 130),
]


def random_shapes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(int(v) for v in torch.randint(1, 24, (4,), generator=g)) for _ in range(n)]


def run(cell, args, **kw):
    if cell == "lstm":
        out, state = functional.lstm(**args, **kw)
    else:
        out, state = functional.plstm(**args, **kw)
    return out, state


def run_reference(cell, args):
    fn = reference.lstm if cell == "lstm" else reference.plstm
    out, state, _ = fn(**args)
    return out, state


def loss_of(out, state):
    """A loss that reaches every output: all steps of h, and every final state."""
    weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    return (out.double() * weights).sum() + sum(s.double().square().sum() for s in state)


def check_against_reference(cell, shape, dtype, dt=False, seed=0):
    args = layer_args(cell, *shape, seed=seed, dt=dt)
    fused_args = cast(args, dtype, requires_grad=True)
    ref_args = cast({k: (v.to(dtype) if isinstance(v, torch.Tensor) else v) for k, v in args.items()},
                    torch.float64, requires_grad=True)  # the same rounded values, in float64
    out, state = run(cell, fused_args, backend="native")
    out_r, state_r = run_reference(cell, ref_args)
    assert out.dtype == dtype
    assert_close(out, out_r, TOLERANCE[dtype], f"{cell} out")
    for name, s, s_r in zip(("h", "c", "a"), state, state_r):
        assert_close(s, s_r, TOLERANCE[dtype], f"{cell} {name}_n")
    grads = torch.autograd.grad(loss_of(out, state), list(differentiable(fused_args).values()))
    grads_r = torch.autograd.grad(loss_of(out_r, state_r), list(differentiable(ref_args).values()))
    for name, g, g_r in zip(differentiable(fused_args), grads, grads_r):
        assert g.dtype == dtype
        assert_close(g, g_r, GRAD_TOLERANCE[dtype], f"{cell} grad {name}")


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", SHAPES + random_shapes(4), ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_fused_matches_reference(cell, shape, dtype):
    check_against_reference(cell, shape, dtype, dt=cell != "lstm" and shape[0] % 2 == 1)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_unit_slices_over_any_thread_count(cell, threads):
    """Hidden units are sliced over the threads (32 or more per thread); any count is exact."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        check_against_reference(cell, (4, 3, 5, 97), torch.float64, dt=cell != "lstm", seed=threads)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cell", ["plstm_coupled", "plstm_separate"])
def test_fused_with_variable_dt(cell):
    check_against_reference(cell, (11, 3, 4, 6), torch.float64, dt=True, seed=5)
    check_against_reference(cell, (11, 3, 4, 6), torch.float32, dt=True, seed=5)


@pytest.mark.parametrize("cell", CELLS)
def test_bf16_runs_gate_math_in_float32(cell):
    check_against_reference(cell, (9, 3, 8, 16), torch.bfloat16)


@pytest.mark.parametrize("cell", ["plstm_coupled", "plstm_separate"])
def test_long_sequence_keeps_age_precision(cell):
    """T = 1000 with large steps: ages reach thousands; float32 stays near float64."""
    args = layer_args(cell, T=1000, B=2, I=3, H=8, seed=6, dt=True)
    args["dt"] = args["dt"] * 5
    check = cast(args, torch.float32)
    out, (h, c, a) = functional.plstm(**check, backend="native")
    out_r, (h_r, c_r, a_r), _ = reference.plstm(**args)
    assert_close(out, out_r, {"atol": 1e-4, "rtol": 0}, "out")
    assert_close(a, a_r, {"atol": 0, "rtol": 1e-5}, "age")


def test_long_lstm_sequence():
    check_against_reference("lstm", (1000, 2, 3, 8), torch.float64, seed=7)


@pytest.mark.parametrize("cell", CELLS)
def test_non_contiguous_inputs(cell):
    args = layer_args(cell, 6, 3, 5, 4, seed=8, dt=cell != "lstm")
    strided = {}
    for name, v in args.items():
        if isinstance(v, torch.Tensor) and v.dim() >= 2:
            v = v.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
            assert not v.is_contiguous()
        elif isinstance(v, torch.Tensor):
            v = torch.stack([v, v], -1)[..., 0]
            assert not v.is_contiguous()
        strided[name] = v
    out, state = run(cell, strided, backend="native")
    out_r, state_r = run_reference(cell, args)
    assert_close(out, out_r, TOLERANCE[torch.float64], "out")


@pytest.mark.parametrize("cell", CELLS)
def test_fused_gradcheck(cell):
    args = layer_args(cell, 4, 2, 3, 3, seed=9, dt=cell != "lstm")
    names = [k for k, v in args.items() if isinstance(v, torch.Tensor) and k != "dt"]
    fn = functional.lstm if cell == "lstm" else functional.plstm

    def f(*tensors):
        out, state = fn(**{**args, **dict(zip(names, tensors))}, backend="native")
        return out, *state

    inputs = tuple(args[k].clone().requires_grad_() for k in names)
    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("cell", CELLS)
def test_forget_gates_match_reference(cell):
    args = layer_args(cell, 5, 2, 3, 4, seed=10)
    fn = functional.lstm if cell == "lstm" else functional.plstm
    _, _, forget = fn(**args, backend="native", return_forget=True)
    _, _, forget_r = (reference.lstm if cell == "lstm" else reference.plstm)(**args)
    assert_close(forget, forget_r, TOLERANCE[torch.float64], "forget")


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (17, 2, 5), (300, 4099)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_linear_scan_matches_reference(shape, dtype):
    g = torch.Generator().manual_seed(11)
    a = torch.rand(shape, generator=g, dtype=torch.float64)
    u = torch.randn(shape, generator=g, dtype=torch.float64)
    x0 = torch.randn(shape[1:], generator=g, dtype=torch.float64)
    fa, fu, fx0 = (t.to(dtype).requires_grad_() for t in (a, u, x0))
    ra, ru, rx0 = (t.to(dtype).double().requires_grad_() for t in (a, u, x0))
    x = functional.linear_scan(fa, fu, fx0, backend="native")
    x_r = reference.linear_scan(ra, ru, rx0)
    assert_close(x, x_r, TOLERANCE[dtype], "x")
    w = torch.randn(shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((x.double() * w).sum(), (fa, fu, fx0))
    grads_r = torch.autograd.grad((x_r * w).sum(), (ra, ru, rx0))
    for name, gr, gr_r in zip("a u x0".split(), grads, grads_r):
        assert_close(gr, gr_r, GRAD_TOLERANCE[dtype], f"grad {name}")


def test_linear_scan_constant_decay_and_gradcheck():
    g = torch.Generator().manual_seed(12)
    a = torch.rand(3, dtype=torch.float64, generator=g, requires_grad=True)  # one decay per channel
    u = torch.randn(5, 2, 3, dtype=torch.float64, generator=g, requires_grad=True)
    x = functional.linear_scan(a, u, backend="native")
    assert_close(x, reference.linear_scan(a, u), TOLERANCE[torch.float64], "x")
    assert torch.autograd.gradcheck(lambda a, u: functional.linear_scan(a, u, backend="native"), (a, u))


@pytest.mark.parametrize("impl", ["native", pytest.param("triton", marks=pytest.mark.skipif(
    not backend.triton_available(), reason="triton is not installed"))])
def test_opcheck_registrations(impl):
    """Schema, fake (meta) shapes, autograd registration and AOT dispatch of every operator, in
    both namespaces (torch.ops.tsrnn compiled, torch.ops.tsrnn_triton through the interpreter)."""
    for cell in CELLS:
        args = layer_args(cell, 4, 2, 3, 3, seed=13, dt=cell != "lstm")
        G = 3 if cell == "plstm_coupled" else 4
        xg = torch.randn(4, 2, G * 3, dtype=torch.float64, requires_grad=True)
        states = [args["c0"]] + ([args["a0"]] if cell != "lstm" else [])
        state0 = torch.stack(states).requires_grad_()
        p = args.get("p")
        p = None if p is None else p.clone().requires_grad_()
        w_hh = args["w_hh"].clone().requires_grad_()
        h0 = args["h0"].clone().requires_grad_()
        torch.library.opcheck(ops.op(impl, "recurrence_forward"),
                              (cell, xg, w_hh, h0, state0, p, args.get("dt"), 1e-3, True))
    a, u, x0 = (torch.rand(5, 3, dtype=torch.float64, requires_grad=True),
                torch.randn(5, 3, dtype=torch.float64, requires_grad=True),
                torch.randn(3, dtype=torch.float64, requires_grad=True))
    torch.library.opcheck(ops.op(impl, "linear_scan_forward"), (a, u, x0))
