"""Mixed precision: every cell under torch.autocast (on the CPU here, on CUDA where a GPU is
visible: bf16, fp16) behaves as torch.nn.LSTM does, on every path of the device, before and after the tuner saw the float32 shape: outputs in the autocast
dtype (the pLSTM's age in float32), values and gradients within the tolerance table's rows against
the float64 layer on the same rounded values, equal to a layer of the autocast dtype, and
torch.compile under autocast equal to eager."""
import pytest
import torch

import tsrnn
from tsrnn import backend, functional, testing
from tsrnn.testing import GRAD_TOLERANCE, TOLERANCE
from conftest import assert_close

pytestmark = pytest.mark.usefixtures("clean_backend_state")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KINDS = ["lstm", "mts", "plstm_coupled", "plstm_separate"]
PATHS = ["auto", "reference", *backend.paths_on(DEVICE, "recurrence")]
TORCH_LSTM = next(p for p in PATHS if backend.REGISTRY.get(p) and backend.REGISTRY[p].kind == "torch_lstm")
FUSED = next(p for p in backend.paths_on(DEVICE, "recurrence") if backend.REGISTRY[p].kind == "operator")


def _module(kind, path, dtype=torch.float32, sizes=(4, 6)):
    torch.manual_seed(1)
    inputs, hidden = sizes
    if kind in ("lstm", "mts"):
        timescales = [torch.linspace(1, 40, hidden), None] if kind == "mts" else None
        return tsrnn.LSTM(inputs, hidden, num_layers=2, timescales=timescales, backend=path, dtype=dtype).to(DEVICE)
    return tsrnn.PowerLawLSTM(inputs, hidden, num_layers=2, input_gate=kind.split("_")[1], backend=path,
                              dtype=dtype).to(DEVICE)


def _skip_unless_runs(kind, path):
    cell = "lstm" if kind in ("lstm", "mts") else kind
    reason = path not in ("auto", "reference") and testing.why_not(path, cell, (7, 3, 4, 6), torch.bfloat16, DEVICE)
    if reason:
        pytest.skip(reason)


def _rounded_float64(module, dtype):
    """A float64 copy of ``module`` whose parameters autocast would cast are rounded to ``dtype``
    (p_logit stays: the pLSTM's p enters the gate math in float32)."""
    copy = _module("lstm" if isinstance(module, tsrnn.LSTM) and not module.timescale_layers else
                   "mts" if isinstance(module, tsrnn.LSTM) else f"plstm_{module.input_gate}", "reference",
                   torch.float64, (module.input_size, module.hidden_size))
    with torch.no_grad():
        for (name, mine), (_, theirs) in zip(module.named_parameters(), copy.named_parameters()):
            theirs.copy_(mine if name.startswith("p_logit") else mine.to(dtype))
    return copy


@pytest.mark.parametrize("tuned_first", [False, True], ids=["first-call", "after-float32-tuning"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", KINDS)
def test_autocast_runs_the_layer_in_the_autocast_dtype(kind, path, dtype, tuned_first):
    _skip_unless_runs(kind, path)
    _check_autocast(kind, path, dtype, tuned_first, (7, 3, 4, 6))


@pytest.mark.parametrize("shape", testing.SHAPES, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_autocast_on_every_shape_of_the_table(kind, shape):
    """``auto`` under bf16 autocast on each (T, B, I, H) of tsrnn.testing.SHAPES, after the float32 tuning."""
    _check_autocast(kind, "auto", torch.bfloat16, True, shape)


def _check_autocast(kind, path, dtype, tuned_first, shape):
    T, B, I, H = shape
    module = _module(kind, path, sizes=(I, H))
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    if tuned_first:
        module(x)[0].sum().backward()
        module.zero_grad()
    with torch.autocast(DEVICE, dtype=dtype):
        out, state = module(x)
        loss = testing.loss_of(out, state)
    grads = torch.autograd.grad(loss, list(module.parameters()))
    assert out.dtype == dtype
    for name, s in zip(module.cell.initial_states, state):
        assert s.dtype == (torch.float32 if name == "a0" else dtype), name
    assert all(g.dtype == torch.float32 for g in grads)

    expected_module = _rounded_float64(module, dtype)
    x64 = x.to(dtype).double()
    out_e, state_e = expected_module(x64)
    grads_e = torch.autograd.grad(testing.loss_of(out_e, state_e), list(expected_module.parameters()))
    assert_close(out, out_e, TOLERANCE[dtype], "out")
    for name, s, s_e in zip(module.cell.initial_states, state, state_e):
        assert_close(s, s_e, TOLERANCE[dtype], name)
    for (name, _), g, g_e in zip(module.named_parameters(), grads, grads_e):
        assert_close(g, g_e, GRAD_TOLERANCE[dtype], f"grad {name}")


@pytest.mark.parametrize("path", ["auto", "reference", FUSED, TORCH_LSTM])
def test_autocast_equals_a_layer_of_the_autocast_dtype(path):
    """Under autocast, tsrnn.LSTM computes what the same module cast to bf16 computes, up to the
    effective bias: autocast sums b_ih + b_hh in float32 before its one rounding to bf16."""
    _skip_unless_runs("lstm", path)
    module = _module("lstm", path)
    x = torch.randn(6, 2, 4, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out, (h, c) = module(x)
    low = _module("lstm", path).to(torch.bfloat16)
    out_b, (h_b, c_b) = low(x.bfloat16())
    assert out.dtype == out_b.dtype == torch.bfloat16
    for name, a, b in (("out", out, out_b), ("h_n", h, h_b), ("c_n", c, c_b)):
        assert_close(a, b, TOLERANCE[torch.bfloat16], name)


@pytest.mark.parametrize("path", ["auto", "reference", FUSED, TORCH_LSTM])
def test_autocast_matches_torch_lstm_under_autocast(path):
    """In float16 on CUDA, where torch's cuDNN LSTM runs float16 under autocast whatever its dtype
    (aten/src/ATen/cudnn/AutocastRNN.cpp casts to half), in bf16 on the CPU."""
    _skip_unless_runs("lstm", path)
    dtype = torch.float16 if DEVICE == "cuda" else torch.bfloat16
    module = _module("lstm", path)
    theirs = torch.nn.LSTM(4, 6, num_layers=2).to(DEVICE)
    theirs.load_state_dict(module.state_dict())
    x = torch.randn(9, 3, 4, device=DEVICE)
    with torch.autocast(DEVICE, dtype=dtype):
        try:
            out_t, (h_t, c_t) = theirs(x)
        except RuntimeError as exc:  # oneDNN has no bf16 LSTM on a CPU without AVX-512 BF16
            if DEVICE != "cpu" or "could not create a primitive" not in str(exc):
                raise
            pytest.skip(f"torch.nn.LSTM cannot run under {dtype} autocast on this {DEVICE}: "
                        f"{str(exc).splitlines()[0]}")
        out, (h, c) = module(x)
    assert (out.dtype, h.dtype, c.dtype) == (out_t.dtype, h_t.dtype, c_t.dtype) == (dtype,) * 3
    for name, a, b in (("out", out, out_t), ("h_n", h, h_t), ("c_n", c, c_t)):
        assert_close(a, b, TOLERANCE[dtype], name)


def test_autocast_takes_a_low_precision_input_and_lengths():
    module = _module("plstm_coupled", "auto")
    x = torch.randn(5, 3, 4, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out, (h, c, a) = module(x.bfloat16(), lengths=[5, 2, 3])
        out_f, _ = module(x, lengths=[5, 2, 3])
    assert out.dtype == torch.bfloat16 and a.dtype == torch.float32
    assert torch.equal(out, out_f) and (out[2:, 1] == 0).all()


def test_functional_under_autocast():
    args = {k: (v.to(DEVICE, torch.float32) if isinstance(v, torch.Tensor) else v)
            for k, v in testing.layer_args("lstm", 5, 2, 3, 4).items()}
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out, (h, c) = functional.lstm(**args)
    assert out.dtype == h.dtype == c.dtype == torch.bfloat16
    expected, _ = functional.lstm(**{k: v.bfloat16() for k, v in args.items()})
    assert torch.equal(out, expected)


def test_float64_is_left_alone_by_autocast():
    module = _module("lstm", "auto", torch.float64)
    x = torch.randn(4, 2, 4, dtype=torch.float64, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out, _ = module(x)
    assert out.dtype == torch.float64
    assert torch.equal(out, module(x)[0])


@pytest.mark.parametrize("compile_backend", ["aot_eager", "inductor"])
def test_torch_compile_under_autocast_matches_eager(compile_backend):
    lstm = _module("mts", FUSED)
    plstm = tsrnn.PowerLawLSTM(6, 3, backend=FUSED).to(DEVICE)

    def step(x):
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out, _ = lstm(x)
            out, (h, c, a) = plstm(out)
        return out.float().square().mean() + a.mean()

    x = torch.randn(5, 2, 4, device=DEVICE)
    params = list(lstm.parameters()) + list(plstm.parameters())
    loss = step(x)
    grads = torch.autograd.grad(loss, params)
    compiled = torch.compile(step, fullgraph=True, backend=compile_backend)
    loss_c = compiled(x)
    grads_c = torch.autograd.grad(loss_c, params)
    assert_close(loss_c, loss, TOLERANCE[torch.bfloat16], "loss")
    for g, g_c in zip(grads, grads_c):
        assert_close(g_c, g, GRAD_TOLERANCE[torch.bfloat16], "grad")


@pytest.mark.parametrize("path", ["reference", FUSED])
@pytest.mark.parametrize("cell", ["lstm", "plstm_coupled", "plstm_separate"])
def test_float16_layers_without_autocast(path, cell):
    result = testing.compare(path, cell, (6, 3, 5, 7), torch.float16, DEVICE, dt=cell != "lstm", seed=3)
    assert result.ok, result.failures()
