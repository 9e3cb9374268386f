"""tsrnn.LSTM as a drop-in for torch.nn.LSTM, fixed multi-timescale biases, tsrnn.PowerLawLSTM."""
import pytest
import torch

import tsrnn
from tsrnn import backend, reference
from tsrnn.testing import TOLERANCE
from conftest import assert_close, needs_native

BACKENDS = ["reference", pytest.param("native", marks=needs_native)]


def pair(num_layers=2, batch_first=False, bias=True, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    ref = torch.nn.LSTM(5, 7, num_layers=num_layers, batch_first=batch_first, bias=bias, dtype=dtype)
    ours = tsrnn.LSTM(5, 7, num_layers=num_layers, batch_first=batch_first, bias=bias, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_is_a_drop_in_for_torch_lstm(backend, batch_first, bias):
    ref, ours = pair(batch_first=batch_first, bias=bias)
    ours.backend = backend
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    x = torch.randn(4, 6, 5, dtype=torch.float64)
    hx = (torch.randn(2, 4 if batch_first else 6, 7, dtype=torch.float64),
          torch.randn(2, 4 if batch_first else 6, 7, dtype=torch.float64))
    for state in (None, hx):
        out, (h, c) = ours(x, state)
        out_r, (h_r, c_r) = ref(x, state)
        for a, b in ((out, out_r), (h, h_r), (c, c_r)):
            assert_close(a, b, TOLERANCE[torch.float64])
    (out.sum() + c.sum()).backward()
    (out_r.sum() + c_r.sum()).backward()
    for (name, p), p_r in zip(ours.named_parameters(), ref.parameters()):
        assert_close(p.grad, p_r.grad, TOLERANCE[torch.float64], name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_unbatched_and_float32(backend):
    ref, ours = pair(num_layers=1, dtype=torch.float32)
    ours.backend = backend
    x = torch.randn(6, 5)
    out, (h, c) = ours(x)
    out_r, (h_r, c_r) = ref(x)
    assert out.shape == (6, 7) and h.shape == (1, 7)
    assert_close(out, out_r, TOLERANCE[torch.float32])
    assert_close(c, c_r, TOLERANCE[torch.float32])


def test_state_dict_round_trip_both_ways():
    ref, ours = pair()
    back = torch.nn.LSTM(5, 7, num_layers=2, dtype=torch.float64)
    back.load_state_dict(ours.state_dict())
    for (name, a), b in zip(back.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name


def test_dropout_between_layers_only():
    ours = tsrnn.LSTM(5, 7, num_layers=2, dropout=0.5, dtype=torch.float64)
    x = torch.randn(3, 2, 5, dtype=torch.float64)
    ours.eval()
    out_eval = ours(x)[0]
    torch.testing.assert_close(out_eval, ours(x)[0])  # eval: deterministic
    ours.train()
    assert not torch.allclose(ours(x)[0], out_eval)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        single = tsrnn.LSTM(5, 7, num_layers=1, dropout=0.5, dtype=torch.float64).train()
    torch.testing.assert_close(single(x)[0], single(x)[0])  # no dropout after the last layer


def mts_model(freeze="gates"):
    torch.manual_seed(1)
    timescales = [torch.tensor([1.5, 3.0, 3.0, 4.0, 40.0, 4e4]), tsrnn.memory.timescales.inverse_gamma_quantiles(6, 0.56), None]
    return tsrnn.LSTM(4, 6, num_layers=3, timescales=timescales, freeze=freeze), timescales


def test_mts_biases_follow_s3_s4():
    model, timescales = mts_model()
    for k in (0, 1):
        b = model.gate_biases(k).double()
        b_f = -torch.log(torch.expm1(1 / timescales[k].double()))
        torch.testing.assert_close(b[6:12], b_f.float().double())
        torch.testing.assert_close(b[:6], -b[6:12])
        torch.testing.assert_close(model.timescales(k), timescales[k].double(), rtol=1e-5, atol=0)
    # the fixed entries take no part in the learned ones: layer 2 is a plain layer
    torch.testing.assert_close(model.gate_biases(2), model.bias_ih_l2 + model.bias_hh_l2)
    assert model.timescales(2) is None


@pytest.mark.parametrize("freeze", ["gates", "all"])
@pytest.mark.parametrize("make_optimizer", [
    lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9, weight_decay=0.1),
    lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.1),
], ids=["sgd", "adam"])
def test_mts_biases_bit_identical_after_training(freeze, make_optimizer):
    model, _ = mts_model(freeze)
    fixed = 12 if freeze == "gates" else 24
    before = {k: model.gate_biases(k).detach().clone() for k in range(3)}
    params_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = make_optimizer(model.parameters())
    for _ in range(3):
        opt.zero_grad()
        out, (h, c) = model(torch.randn(5, 2, 4))
        (out.square().sum() + c.sum()).backward()
        opt.step()
    for k in (0, 1):
        after = model.gate_biases(k)
        assert torch.equal(after[:fixed], before[k][:fixed])
        if freeze == "gates":
            assert not torch.equal(after[fixed:], before[k][fixed:])  # g, o biases train
    assert not torch.equal(model.gate_biases(2), before[2])
    for name, p in model.named_parameters():
        assert not torch.equal(p, params_before[name]), f"{name} did not move"


def test_mts_state_dict_loads_into_torch_lstm_with_the_same_function():
    model, _ = mts_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.5)
    model(torch.randn(3, 2, 4))[0].sum().backward()
    opt.step()  # weight decay moves the raw bias entries; the saved ones must still be right
    plain = torch.nn.LSTM(4, 6, num_layers=3)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "fixed" not in k})
    x = torch.randn(5, 2, 4)
    assert_close(plain(x)[0], model(x)[0], TOLERANCE[torch.float32])
    # and back: a fresh MTS model loads a torch.nn.LSTM state_dict and keeps its fixed biases
    fresh, _ = mts_model()
    fresh.load_state_dict(plain.state_dict())
    assert_close(fresh(x)[0], model(x)[0], TOLERANCE[torch.float32])
    # its own state_dict carries the fixed biases
    restored, _ = mts_model()
    restored.load_state_dict(model.state_dict())
    assert torch.equal(restored.gate_biases(1), model.gate_biases(1))


def test_forget_gates_recover_fixed_timescales():
    """With zero weights, an MTS unit's forget gate is σ(b_f(T)); S6 gives T back."""
    timescales = torch.tensor([2.0, 5.0, 30.0, 400.0])
    model = tsrnn.LSTM(3, 4, timescales=[timescales], dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    (forget,) = model.forget_gates(torch.randn(20, 2, 3, dtype=torch.float64))
    assert forget.shape == (20, 2, 4)
    torch.testing.assert_close(tsrnn.memory.timescales.estimate_timescales(forget), timescales.double(), rtol=1e-9, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("input_gate", ["coupled", "separate"])
def test_power_law_lstm_matches_layerwise_reference(backend, input_gate):
    torch.manual_seed(2)
    m = tsrnn.PowerLawLSTM(3, 5, num_layers=2, input_gate=input_gate, backend=backend, dtype=torch.float64)
    G = 3 if input_gate == "coupled" else 4  # the rows of (S7): r, g, o or i, r, g, o
    assert m.weight_ih_l0.shape == (G * 5, 3) and m.p_logit_l1.shape == (5,)
    assert 0 < m.p(0).min() and m.p(0).max() < 1
    x = torch.randn(6, 2, 3, dtype=torch.float64)
    dt = torch.rand(6, 2, dtype=torch.float64) + 0.5
    out, (h, c, a) = m(x, dt=dt)
    layer_in, zeros = x, torch.zeros(2, 5, dtype=torch.float64)
    for k in range(2):
        bias = getattr(m, f"bias_ih_l{k}") + getattr(m, f"bias_hh_l{k}")
        layer_in, (h_k, c_k, a_k), _ = reference.plstm(layer_in, zeros, zeros, zeros, *m.weights(k), bias,
                                                       m.p(k), dt, m.eps, input_gate)
        assert_close(a[k], a_k, TOLERANCE[torch.float64])
    assert_close(out, layer_in, TOLERANCE[torch.float64])


@pytest.mark.parametrize("backend", BACKENDS)
def test_power_law_state_carries_across_calls(backend):
    """Truncated BPTT: two calls with the carried (h, c, a) equal one call over the whole sequence."""
    torch.manual_seed(3)
    m = tsrnn.PowerLawLSTM(3, 4, num_layers=2, batch_first=True, backend=backend, dtype=torch.float64)
    x = torch.randn(2, 10, 3, dtype=torch.float64)
    dt = torch.rand(2, 10, 1, dtype=torch.float64) + 0.5
    out, state = m(x, dt=dt)
    first, mid = m(x[:, :4], dt=dt[:, :4])
    second, end = m(x[:, 4:], mid, dt=dt[:, 4:])
    assert_close(torch.cat([first, second], 1), out, TOLERANCE[torch.float64])
    for s, s_full in zip(end, state):
        assert_close(s, s_full, TOLERANCE[torch.float64])


def test_power_law_frozen_p_is_a_buffer():
    m = tsrnn.PowerLawLSTM(3, 4, learn_p=False)
    assert "p_logit_l0" not in dict(m.named_parameters())
    assert "p_logit_l0" in m.state_dict()
    m2 = tsrnn.PowerLawLSTM(3, 4, learn_p=True)
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2.p(0), m.p(0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_power_law_fixed_p_any_positive_value(backend):
    """fixed_p holds p for every unit, p >= 1 included (seed 002 §5.1): buffers, no p_logit, the
    same outputs as the reference with that p."""
    torch.manual_seed(6)
    m = tsrnn.PowerLawLSTM(3, 4, num_layers=2, fixed_p=1.5, backend=backend, dtype=torch.float64)
    assert not any("p_" in name for name, _ in m.named_parameters())
    assert {"p_l0", "p_l1"} <= set(m.state_dict()) and "fixed_p=1.5" in repr(m)
    assert torch.equal(m.p(1), torch.full((4,), 1.5, dtype=torch.float64))
    x = torch.randn(6, 2, 3, dtype=torch.float64)
    out, _ = m(x)
    zeros = torch.zeros(2, 4, dtype=torch.float64)
    layer_in = x
    for k in range(2):
        bias = getattr(m, f"bias_ih_l{k}") + getattr(m, f"bias_hh_l{k}")
        layer_in, _, _ = reference.plstm(layer_in, zeros, zeros, zeros, *m.weights(k), bias, m.p(k), None, m.eps)
    assert_close(out, layer_in, TOLERANCE[torch.float64])
    with pytest.raises(ValueError, match="fixed"):
        m.reset_p()
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="fixed_p"):
            tsrnn.PowerLawLSTM(3, 4, fixed_p=bad)


@needs_native
def test_backends_agree_through_the_modules():
    torch.manual_seed(4)
    m = tsrnn.PowerLawLSTM(4, 6, num_layers=2, input_gate="separate")
    x = torch.randn(8, 3, 4)
    m.backend = "native"
    out_n, state_n = m(x)
    m.backend = "reference"
    out_r, state_r = m(x)
    assert_close(out_n, out_r, TOLERANCE[torch.float32])


@needs_native
@pytest.mark.parametrize("kernels, compile_backend", [
    ("native", "aot_eager"), ("native", "inductor"),
    pytest.param("triton", "aot_eager", marks=pytest.mark.skipif(not backend.triton_available(),
                                                                 reason="triton is not installed"))])
def test_torch_compile_full_graph_matches_eager(kernels, compile_backend):
    torch.manual_seed(5)
    model = tsrnn.LSTM(4, 6, num_layers=2, timescales=[torch.full((6,), 5.0), None], backend=kernels)
    plstm = tsrnn.PowerLawLSTM(6, 3, backend=kernels)

    def step(x):
        out, _ = model(x)
        out, (h, c, a) = plstm(out)
        return out.square().mean() + a.mean()

    compiled = torch.compile(step, fullgraph=True, backend=compile_backend)
    x = torch.randn(5, 2, 4)
    loss = step(x)
    grads = torch.autograd.grad(loss, list(model.parameters()) + list(plstm.parameters()))
    loss_c = compiled(x)
    grads_c = torch.autograd.grad(loss_c, list(model.parameters()) + list(plstm.parameters()))
    assert_close(loss_c, loss, TOLERANCE["compiled"], "loss")
    for g, g_c in zip(grads, grads_c):
        assert_close(g_c, g, TOLERANCE["compiled"], "grad")


# --------------------------------------------------------------------------------------------
# torch.nn.LSTM's constructor arguments
# --------------------------------------------------------------------------------------------
TORCH_DEFAULTS = {"bidirectional": False, "proj_size": 0, "device": None, "dtype": None}
MODULES = {"lstm": tsrnn.LSTM, "plstm": tsrnn.PowerLawLSTM}


def _build(make, seed=0, *args, **kwargs):
    torch.manual_seed(seed)
    return make(*args, **kwargs)


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("keyword", [*TORCH_DEFAULTS, "all"])
def test_torch_lstm_keywords_at_their_defaults_change_nothing(module, keyword):
    make = MODULES[module]
    extra = TORCH_DEFAULTS if keyword == "all" else {keyword: TORCH_DEFAULTS[keyword]}
    plain = _build(make, 0, 4, 8, num_layers=2)
    given = _build(make, 0, 4, 8, num_layers=2, **extra)
    assert [(n, p.shape) for n, p in given.named_parameters()] == [(n, p.shape) for n, p in plain.named_parameters()]
    for (name, a), b in zip(given.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name
    x = torch.randn(5, 3, 4)
    (out, state), (out_plain, state_plain) = given(x), plain(x)
    for a, b in zip((out, *state), (out_plain, *state_plain)):
        assert torch.equal(a, b)


def test_lstm_takes_torch_lstm_arguments_positionally():
    """torch.nn.LSTM's full positional signature builds the same module, with the same weights."""
    args = (4, 8, 2, True, True, 0.0, False, 0, "cpu", torch.float64)
    ref = _build(torch.nn.LSTM, 0, *args)
    ours = _build(tsrnn.LSTM, 0, *args)
    assert ours.batch_first and ours.weight_ih_l0.dtype == torch.float64
    for (name, a), (name_r, b) in zip(ours.named_parameters(), ref.named_parameters()):
        assert name == name_r and torch.equal(a, b), name
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    assert_close(ours(x)[0], ref(x)[0], TOLERANCE[torch.float64])
    with pytest.raises(TypeError):  # the tsrnn arguments are keyword-only
        tsrnn.LSTM(4, 8, 1, True, False, 0.0, False, 0, None, None, None)


def test_the_plstm_refuses_a_projection_naming_the_argument():
    """proj_size is torch.nn.LSTM's projection of h: tsrnn.LSTM has it, the pLSTM does not."""
    with pytest.raises(ValueError, match=r"proj_size=3 is not supported: tsrnn.PowerLawLSTM has no projection"):
        tsrnn.PowerLawLSTM(4, 8, proj_size=3)
    with pytest.raises(ValueError,
                       match=r"^proj_size has to be smaller than hidden_size; got proj_size=8 and hidden_size=8$"):
        tsrnn.LSTM(4, 8, proj_size=8)


@pytest.mark.parametrize("module", MODULES)
def test_proj_size_must_be_an_int_and_unknown_keywords_are_type_errors(module):
    with pytest.raises(TypeError, match=r"proj_size should be of type int, got: float"):
        MODULES[module](4, 8, proj_size=0.5)
    with pytest.raises(TypeError, match=r"bidirectionnal"):
        MODULES[module](4, 8, bidirectionnal=False)


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "meta",
                                    pytest.param("cuda", marks=pytest.mark.skipif(
                                        not torch.cuda.is_available(), reason="no CUDA device"))])
def test_device_and_dtype_place_every_parameter_and_buffer(module, device):
    extra = {"timescales": [torch.linspace(1, 40, 8), None]} if module == "lstm" else {"learn_p": False}
    m = MODULES[module](4, 8, num_layers=2, device=device, dtype=torch.float64, **extra)
    tensors = dict(m.named_parameters()) | dict(m.named_buffers())
    assert {"bias_fixed_l0", "p_logit_l0"} & set(tensors)
    for name, t in tensors.items():
        assert t.device.type == torch.device(device).type and t.dtype == torch.float64, name
    if device == "meta":
        return
    ref = MODULES[module](4, 8, num_layers=2, dtype=torch.float64, **extra).to(device)
    ref.load_state_dict(m.state_dict())
    x = torch.randn(5, 2, 4, dtype=torch.float64, device=device)
    out, state = m(x)
    assert out.dtype == torch.float64 and out.device.type == torch.device(device).type
    assert_close(out, ref(x)[0], TOLERANCE[torch.float64])
    if module == "lstm":
        torch.testing.assert_close(m.timescales(0).cpu(), torch.linspace(1, 40, 8, dtype=torch.float64))


def test_power_law_trace_age_is_the_papers_reference_time():
    """trace()'s age a_t is t - k_t of the paper's form (S7/S8, reference.plstm_literal), its f the
    forget gates, and an unbatched input gives (T, 1, H)."""
    torch.manual_seed(5)
    m = tsrnn.PowerLawLSTM(3, 4, dtype=torch.float64)
    x = torch.randn(9, 2, 3, dtype=torch.float64)
    dt = torch.rand(9, 2, dtype=torch.float64) + 0.5
    (tr,) = m.trace(x, dt=dt)
    zeros = torch.zeros(2, 4, dtype=torch.float64)
    bias = m.bias_ih_l0 + m.bias_hh_l0
    for steps in (1, 5, 9):
        _, (_, _, k, t), _ = reference.plstm_literal(x[:steps], zeros, zeros, m.weight_ih_l0, m.weight_hh_l0, bias,
                                                     m.p(0), dt[:steps], m.eps)
        assert_close(tr["a"][steps - 1], t - k, TOLERANCE[torch.float64])
    assert_close(tr["f"], m.forget_gates(x, dt=dt)[0], TOLERANCE[torch.float64])
    (single,) = m.trace(x[:, 0], dt=dt[:, 0])
    assert single["r"].shape == (9, 1, 4)
    assert_close(single["r"][:, 0], tr["r"][:, 0], TOLERANCE[torch.float64])
