"""The persistent Triton recurrence (kernels/persistent.py), the per-step one and the dispatch
between them, against the compiled ops. Without a GPU they run on CPU tensors through the Triton
interpreter (TRITON_INTERPRET=1, set in conftest.py); with one, on CUDA."""
import pytest
import torch
from conftest import GRAD_TOLERANCE, TOLERANCE, assert_close, op_inputs

from tsrnn import backend, ops

pytestmark = pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CELLS = list(ops.CELLS)
RUNS = ["w_on_chip", "w_streamed", "per_step"]
SHAPES = [(1, 1, 2, 3), (2, 16, 3, 16), (3, 17, 4, 40)]  # (T, B, I, H): T=1, B=1, odd H, B = / > BLOCK_B


def _drivers(run):
    """(forward, backward) with the signatures of torch.ops.tsrnn.recurrence_forward/backward."""
    from tsrnn.kernels import persistent, recurrence

    if run == "per_step":
        return (lambda *a: recurrence.recurrence_forward(*a, kernel="per_step"),
                lambda *a: recurrence.recurrence_backward(*a, kernel="per_step"))
    on_chip = run == "w_on_chip"
    return (lambda *a: persistent.recurrence_forward(*a, w_on_chip=on_chip),
            lambda *a: persistent.recurrence_backward(*a, w_on_chip=on_chip))


def _on_device(args):
    return tuple(a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args)


def _check_against_op(run, cell, shape, dtype):
    """h, states, saved and the five gradients (grad_h and grad_state each optional) as the op's."""
    forward, backward = _drivers(run)
    args = op_inputs(cell, *shape, dt=cell != "lstm" and shape[0] > 1, dtype=dtype)
    ref = torch.ops.tsrnn.recurrence_forward(*args, True)
    out = forward(*_on_device(args), True)
    for got, want, name in zip(out, ref, ("h", "state", "saved")):
        assert got.dtype == dtype
        assert_close(got.cpu(), want, TOLERANCE[dtype], name)
    g = torch.Generator().manual_seed(1)
    grad_h = torch.randn(ref[0].shape, generator=g).to(dtype)
    grad_state = torch.randn(ref[1].shape, generator=g).to(dtype)
    for gh, gs in ((grad_h, None), (grad_h, grad_state), (None, grad_state)):
        bwd_args = (cell, gh, gs, args[2], args[3], args[4], *ref, args[5], args[6], args[7])
        want = torch.ops.tsrnn.recurrence_backward(*bwd_args)
        got = backward(*_on_device(bwd_args))
        for a, b, name in zip(got, want, ("grad_xg", "grad_w_hh", "grad_h0", "grad_state0", "grad_p")):
            what = f"{name} (grad_h {gh is not None}, grad_state {gs is not None})"
            assert_close(a.cpu(), b, GRAD_TOLERANCE[dtype], what)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_kernels_are_the_compiled_op(run, cell, shape):
    _check_against_op(run, cell, shape, torch.float32)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("cell", CELLS)
def test_float64_math_in_float64(run, cell):
    _check_against_op(run, cell, (3, 5, 4, 9), torch.float64)


@pytest.mark.parametrize("run", RUNS[:2])
def test_persistent_forward_without_save(run):
    forward, _ = _drivers(run)
    args = op_inputs("plstm_coupled", 3, 2, 4, 5, dt=True)
    h, state, saved = forward(*_on_device(args), False)
    ref = torch.ops.tsrnn.recurrence_forward(*args, False)
    assert saved.numel() == 0
    assert_close(h.cpu(), ref[0], TOLERANCE[torch.float32], "h")
    assert_close(state.cpu(), ref[1], TOLERANCE[torch.float32], "state")


def test_persistent_bf16_storage_float32_math():
    from tsrnn.kernels import persistent

    args = op_inputs("plstm_separate", 5, 3, 4, 20, dt=True, dtype=torch.bfloat16)
    h, _, _ = persistent.recurrence_forward(*_on_device(args), True)
    assert h.dtype == torch.bfloat16
    exact = torch.ops.tsrnn.recurrence_forward(*(t.float() if isinstance(t, torch.Tensor) else t for t in args), True)
    assert_close(h.cpu(), exact[0], TOLERANCE[torch.bfloat16], "bf16 h")


@pytest.mark.parametrize("cell", CELLS)
def test_fits_and_w_fits_on_chip_rules(cell):
    from tsrnn.kernels import persistent

    assert [persistent.padded(H) for H in (1, 16, 17, 40, 64, 65)] == [16, 16, 32, 64, 64, 128]
    f32, bf16, f64 = torch.float32, torch.bfloat16, torch.float64
    for H, dtype, fits, on_chip in [(1, f32, True, True), (64, f32, True, True), (65, f32, True, False),
                                    (128, f32, True, False), (129, f32, False, False), (64, bf16, True, True),
                                    (32, f64, True, True), (33, f64, False, False)]:
        assert persistent.fits(cell, 8, H, dtype) == fits, (H, dtype)
        assert persistent.w_fits_on_chip(cell, H, dtype) == on_chip, (H, dtype)


@pytest.mark.parametrize("H, kernel, env, expected", [
    (40, None, None, "persistent"), (129, None, None, "per_step"), (40, "auto", "per_step", "persistent"),
    (40, "per_step", None, "per_step"), (129, "persistent", None, "persistent"),
    (40, None, "per_step", "per_step"), (129, None, "persistent", "persistent")])
def test_dispatch(monkeypatch, H, kernel, env, expected):
    """auto: persistent where persistent.fits (H <= 128 here); kernel= forces, else $TSRNN_TRITON_KERNEL."""
    from tsrnn.kernels import persistent, recurrence

    if env is None:
        monkeypatch.delenv("TSRNN_TRITON_KERNEL", raising=False)
    else:
        monkeypatch.setenv("TSRNN_TRITON_KERNEL", env)
    for module, name, tag in ((persistent, "recurrence_forward", "persistent"),
                              (persistent, "recurrence_backward", "persistent"),
                              (recurrence, "_per_step_forward", "per_step"),
                              (recurrence, "_per_step_backward", "per_step")):
        monkeypatch.setattr(module, name, lambda *args, tag=tag: tag)
    xg, w_hh, h_all = torch.empty(2, 3, 4 * H), torch.empty(4 * H, H), torch.empty(2, 3, H)
    assert recurrence.recurrence_forward("lstm", xg, w_hh, None, None, None, None, 0.0, True, kernel=kernel) == expected
    assert recurrence.recurrence_backward("lstm", None, None, w_hh, None, None, h_all, None, None, None, None, 0.0,
                                          kernel=kernel) == expected


def test_unknown_kernel_is_refused(monkeypatch):
    from tsrnn.kernels import recurrence

    args = op_inputs("lstm", 1, 1, 2, 3, dt=False)
    match = "Triton recurrence kernel must be one of"
    with pytest.raises(ValueError, match=match):
        recurrence.recurrence_forward(*args, True, kernel="persistant")
    with pytest.raises(ValueError, match=match):
        recurrence.recurrence_backward("lstm", None, None, args[2], args[3], args[4], torch.empty(1, 1, 3), None,
                                       None, None, None, 1e-3, kernel="fused")
    monkeypatch.setenv("TSRNN_TRITON_KERNEL", "cuda")
    with pytest.raises(ValueError, match=match):
        recurrence.recurrence_forward(*args, True)


def test_zero_steps_are_refused():
    from tsrnn.kernels import recurrence

    args = list(op_inputs("lstm", 1, 2, 3, 4, dt=False))
    args[1] = args[1][:0]  # xg with T = 0
    with pytest.raises(ValueError, match=r"at least one step, got T=0"):
        recurrence.recurrence_forward(*args, True)
