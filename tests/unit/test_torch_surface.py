"""The rest of torch.nn.LSTM's surface on tsrnn.LSTM and tsrnn.PowerLawLSTM: bidirectional layers
and projections against torch.nn.LSTM and the reference loops, the attributes and methods code
reads (bidirectional, proj_size, mode, all_weights, _flat_weights, reset_parameters), a batch of
0 rows, multi-timescale models converted to and from torch.nn.LSTM, fixed biases that stay
float32 under a cast, and torch's exception types for the inputs torch refuses.

The paths are checked in float64, float32 and bf16 by tests/kernels/recurrence/test_module_paths.py."""
import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import tsrnn
from tsrnn import reference
from tsrnn.memory.timescales import timescale_from_bias
from tsrnn.testing import TOLERANCE
from conftest import assert_close, needs_native

EXACT = TOLERANCE[torch.float64]
# A timescale from a float32 forget bias: b_f = log(T) for large T, so T's relative error is
# |b_f| * 2^-24 ~ 1e-6 at T = 40,000 (8x margin below); bf16's (2^-9 * 10.6 = 2 %) breaks the row.
FLOAT32_BIAS = {"atol": 0.0, "rtol": 1e-5}

T, B, I, H, P = 6, 4, 5, 7, 3
LENGTHS = torch.tensor([6, 2, 5, 1])
CPU_PATHS = ["reference", "onednn", pytest.param("cpu", marks=needs_native), "auto"]


def pair(backend="auto", dtype=torch.float64, **kw):
    """A torch.nn.LSTM and a tsrnn.LSTM holding its state dict."""
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(I, H, 2, dtype=dtype, **kw)
    ours = tsrnn.LSTM(I, H, 2, dtype=dtype, backend=backend, **kw)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def outputs_and_grads(module, x, packed=False, hx=None):
    x = x.detach().clone().requires_grad_()
    inp = pack_padded_sequence(x, LENGTHS, enforce_sorted=False) if packed else x
    out, state = module(inp, hx)
    out = pad_packed_sequence(out)[0] if packed else out
    loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum()
    loss = loss + sum((s * s).sum() for s in state)
    grads = torch.autograd.grad(loss, [x, *module.parameters()])
    return (out, *state, *grads)


# -- bidirectional and proj_size --------------------------------------------------------------
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("proj_size", [0, P])
@pytest.mark.parametrize("backend", CPU_PATHS)
def test_bidirectional_and_projected_layers_match_torch(backend, proj_size, packed):
    if backend == "cpu" and proj_size:
        pytest.skip("the fused paths refuse a projection")
    theirs, ours = pair(backend, bidirectional=True, proj_size=proj_size)
    x = torch.randn(T, B, I, dtype=torch.float64)
    expected = outputs_and_grads(theirs, x, packed)
    got = outputs_and_grads(ours, x, packed)
    assert [t.shape for t in got] == [t.shape for t in expected]
    for a, b in zip(got, expected):
        assert_close(a, b, EXACT)


def test_bidirectional_layouts_match_torch():
    """batch_first, unbatched input and given initial states (L * 2, B, P) / (L * 2, B, H)."""
    for batch_first in (False, True):
        theirs, ours = pair(bidirectional=True, proj_size=P, batch_first=batch_first)
        x = torch.randn(B, T, I, dtype=torch.float64) if batch_first else torch.randn(T, B, I, dtype=torch.float64)
        hx = (torch.randn(4, B, P, dtype=torch.float64), torch.randn(4, B, H, dtype=torch.float64))
        for a, b in zip(outputs_and_grads(ours, x, hx=hx), outputs_and_grads(theirs, x, hx=hx)):
            assert_close(a, b, EXACT)
    theirs, ours = pair(bidirectional=True)
    x = torch.randn(T, I, dtype=torch.float64)
    (out, (h, c)), (out_t, (h_t, c_t)) = ours(x), theirs(x)
    assert out.shape == (T, 2 * H) and h.shape == (4, H)
    for a, b in zip((out, h, c), (out_t, h_t, c_t)):
        assert_close(a, b, EXACT)


def test_lengths_run_the_reverse_direction_within_each_rows_length():
    """lengths= gives what torch gives a PackedSequence: each row's reverse direction starts at its
    own last step, not at T."""
    theirs, ours = pair(bidirectional=True)
    x = torch.randn(T, B, I, dtype=torch.float64)
    out_t, (h_t, c_t) = theirs(pack_padded_sequence(x, LENGTHS, enforce_sorted=False))
    out, (h, c) = ours(x, lengths=LENGTHS)
    assert_close(out, pad_packed_sequence(out_t, total_length=T)[0], EXACT)
    assert_close(h, h_t, EXACT)
    assert_close(c, c_t, EXACT)


def _row_by_row_plstm(module, x, dt):
    """The oracle of a bidirectional one-layer pLSTM: each row alone through the reference loop,
    forward, and backward on its own steps read in reverse with its Δt read in reverse."""
    outs = torch.zeros(T, B, 2 * H, dtype=torch.float64)
    for b, length in enumerate(LENGTHS.tolist()):
        for d, suffix in enumerate(("", "_reverse")):
            xs, ds = x[:length, b:b + 1], dt[:length, b:b + 1]
            if d:
                xs, ds = xs.flip(0), ds.flip(0)
            zeros = torch.zeros(1, H, dtype=torch.float64)
            out, _, _ = reference.plstm(xs, zeros, zeros, zeros, getattr(module, f"weight_ih_l0{suffix}"),
                                        getattr(module, f"weight_hh_l0{suffix}"), module.raw_bias(0, suffix),
                                        module.p(0, bool(d)), ds, module.eps)
            outs[:length, b, d * H:(d + 1) * H] = (out.flip(0) if d else out)[:, 0]
    return outs


@pytest.mark.parametrize("backend", ["reference", pytest.param("cpu", marks=needs_native)])
@pytest.mark.parametrize("packed", [False, True], ids=["lengths", "packed"])
def test_a_bidirectional_plstm_reads_each_row_and_its_dt_backwards(backend, packed):
    torch.manual_seed(1)
    m = tsrnn.PowerLawLSTM(I, H, bidirectional=True, backend=backend, dtype=torch.float64)
    x = torch.randn(T, B, I, dtype=torch.float64)
    dt = torch.rand(T, B, dtype=torch.float64) + 0.2
    with torch.no_grad():
        if packed:
            out, state = m(pack_padded_sequence(x, LENGTHS, enforce_sorted=False),
                           dt=pack_padded_sequence(dt, LENGTHS, enforce_sorted=False))
            out = pad_packed_sequence(out, total_length=T)[0]
        else:
            out, state = m(x, dt=dt, lengths=LENGTHS)
        expected = _row_by_row_plstm(m, x, dt)
    assert_close(out, expected, EXACT)
    assert [s.shape for s in state] == [(2, B, H)] * 3
    assert_close(state[0][1], expected[0, :, H:], EXACT)  # the reverse direction ends at step 0


def test_bidirectional_traces_are_in_the_inputs_time_order():
    torch.manual_seed(2)
    m = tsrnn.PowerLawLSTM(I, H, 2, bidirectional=True, dtype=torch.float64)
    x, dt = torch.randn(T, B, I, dtype=torch.float64), torch.rand(T, B, dtype=torch.float64) + 0.2
    traces = m.trace(x, dt=dt)
    assert len(traces) == 4 and all(t["f"].shape == (T, B, H) for t in traces)
    assert torch.equal(traces[1]["p"], m.p(0, reverse=True).detach())
    # the reverse direction of layer 0 on x is the forward direction of a one-layer copy on x reversed
    single = tsrnn.PowerLawLSTM(I, H, dtype=torch.float64)
    single.load_state_dict({k.replace("_reverse", ""): v for k, v in m.state_dict().items()
                            if k.endswith("l0_reverse")})
    flipped = single.trace(x.flip(0), dt=dt.flip(0))[0]
    for name in ("f", "r", "a"):
        assert_close(traces[1][name], flipped[name].flip(0), EXACT)


def test_projection_is_refused_by_the_fused_paths_and_auto_skips_them():
    with pytest.raises(ValueError, match=r"'cpu' cannot run this call: its kernels recur on h of hidden_size"):
        tsrnn.LSTM(I, H, proj_size=P, backend="cpu")(torch.randn(T, B, I))
    assert tsrnn.LSTM(I, H, proj_size=P)(torch.randn(T, B, I))[0].shape == (T, B, P)
    with pytest.raises(ValueError, match=r"proj_size=3 is not supported: tsrnn.PowerLawLSTM has no projection"):
        tsrnn.PowerLawLSTM(I, H, proj_size=P)


def test_functional_lstm_takes_a_projection():
    theirs, _ = pair(proj_size=P)
    x = torch.randn(T, B, I, dtype=torch.float64)
    h0, c0 = torch.randn(B, P, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    single = torch.nn.LSTM(I, H, proj_size=P, dtype=torch.float64)
    w = dict(single.named_parameters())
    out, (h, c) = tsrnn.functional.lstm(x, h0, c0, w["weight_ih_l0"], w["weight_hh_l0"],
                                        w["bias_ih_l0"] + w["bias_hh_l0"], w_hr=w["weight_hr_l0"])
    out_t, (h_t, c_t) = single(x, (h0[None], c0[None]))
    assert_close(out, out_t, EXACT)
    assert_close(c, c_t[0], EXACT)
    with pytest.raises(ValueError, match=r"w_hr must be \(P, H\) with 1 <= P < H"):
        tsrnn.functional.lstm(x, h0, c0, w["weight_ih_l0"], w["weight_hh_l0"], w_hr=w["weight_hr_l0"].t())


# -- attributes and methods --------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"bidirectional": True}, {"proj_size": P}, {"bias": False}],
                         ids=["plain", "bidirectional", "proj", "no-bias"])
def test_torch_attributes_name_the_same_weights(options):
    theirs, ours = pair(**options)
    assert ours.mode == theirs.mode == "LSTM"
    assert (ours.bidirectional, ours.proj_size) == (theirs.bidirectional, theirs.proj_size)
    assert ours._flat_weights_names == theirs._flat_weights_names
    assert ours._all_weights == theirs._all_weights
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [t.shape for t in ours._flat_weights] == [t.shape for t in theirs._flat_weights]
    assert all(a is b for row, names in zip(ours.all_weights, ours._all_weights)
               for a, b in zip(row, (getattr(ours, n) for n in names)))
    if not options.get("proj_size"):
        plstm = tsrnn.PowerLawLSTM(I, H, 2, **options)
        assert plstm.mode == "PLSTM" and plstm._all_weights == theirs._all_weights  # p is not among them


def test_reset_parameters_draws_torchs_init_and_keeps_fixed_biases():
    ts = torch.linspace(2.0, 5000.0, H)
    m = tsrnn.LSTM(I, H, 2, timescales=[ts, None], bidirectional=True)
    fixed = {n: b.clone() for n, b in m.named_buffers()}
    before = {n: p.clone() for n, p in m.named_parameters()}
    m.reset_parameters()
    bound = 1 / H ** 0.5
    for name, p in m.named_parameters():
        assert not torch.equal(p, before[name]) and p.abs().max() <= bound, name
    for name, b in m.named_buffers():
        assert torch.equal(b, fixed[name]), name
    assert torch.equal(m.gate_biases(0)[:2 * H], fixed["bias_fixed_l0"])
    p = tsrnn.PowerLawLSTM(I, H)
    p_before = p.p(0).clone()
    p.reset_parameters()
    assert not torch.equal(p.p(0), p_before)
    fixed_p = tsrnn.PowerLawLSTM(I, H, fixed_p=2.0)
    fixed_p.reset_parameters()
    assert torch.equal(fixed_p.p(0), torch.full((H,), 2.0))


@pytest.mark.parametrize("kind", ["lstm", "plstm"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_a_batch_of_no_rows_gives_empty_outputs_as_torch(kind, batch_first):
    make = tsrnn.LSTM if kind == "lstm" else tsrnn.PowerLawLSTM
    m = make(I, H, 2, bidirectional=True, batch_first=batch_first)
    theirs = torch.nn.LSTM(I, H, 2, bidirectional=True, batch_first=batch_first)
    x = torch.randn(0, T, I) if batch_first else torch.randn(T, 0, I)
    out, state = m(x)
    out_t, state_t = theirs(x)
    assert out.shape == out_t.shape and state[0].shape == state_t[0].shape == (4, 0, H)
    out.sum().backward()
    with pytest.raises(ValueError, match="Expected sequence length to be larger than 0"):
        m(torch.randn(B, 0, I) if batch_first else torch.randn(0, B, I))


# -- multi-timescale models and torch.nn.LSTM ------------------------------------------------------
TIMESCALES = [torch.linspace(1.5, 40000.0, H), None]


@pytest.mark.parametrize("options", [{}, {"bidirectional": True}, {"proj_size": P}], ids=["plain", "bidi", "proj"])
@pytest.mark.parametrize("freeze", ["gates", "all"])
def test_to_torch_computes_the_same_function_and_from_torch_gives_it_back(options, freeze):
    torch.manual_seed(3)
    m = tsrnn.LSTM(I, H, 2, timescales=TIMESCALES, freeze=freeze, dtype=torch.float64, **options)
    x = torch.randn(T, B, I, dtype=torch.float64)
    lstm = m.to_torch()
    assert type(lstm) is torch.nn.LSTM and lstm.training == m.training
    for a, b in zip(outputs_and_grads(m, x)[:3], outputs_and_grads(lstm, x)[:3]):
        assert_close(a, b, EXACT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn: the fixed rows are the ones it was given
        back = tsrnn.LSTM.from_torch(lstm, TIMESCALES, freeze=freeze)
    assert torch.equal(back.timescales(0), m.timescales(0))
    for a, b in zip(outputs_and_grads(back, x)[:3], outputs_and_grads(m, x)[:3]):
        assert_close(a, b, EXACT)
    plain = tsrnn.LSTM.from_torch(lstm)
    assert plain.timescale_layers == () and torch.equal(plain.weight_hh_l1, lstm.weight_hh_l1)


def test_a_torch_state_dict_loads_with_strict_false_and_computes_the_same_function():
    m = tsrnn.LSTM(I, H, 2, timescales=TIMESCALES, dtype=torch.float64)
    lstm = torch.nn.LSTM(I, H, 2, dtype=torch.float64)
    result = lstm.load_state_dict(m.state_dict(), strict=False)
    assert result.unexpected_keys == ["bias_fixed_l0"] and not result.missing_keys
    x = torch.randn(T, B, I, dtype=torch.float64)
    assert_close(lstm(x)[0], m(x)[0], EXACT)


def test_loading_a_torch_state_dict_into_fixed_timescales_warns_once():
    trained = torch.nn.LSTM(I, H, 2, bidirectional=True)
    m = tsrnn.LSTM(I, H, 2, timescales=TIMESCALES, bidirectional=True)
    with pytest.warns(UserWarning, match=r"fixed ones in the i and f rows of layer\(s\) 0, 0_reverse; the fixed "
                                         r"biases \(from timescales\) were kept") as caught:
        m.load_state_dict(trained.state_dict())
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.load_state_dict(m.state_dict())  # its own, and its torch copy's: nothing changes
        m.load_state_dict(m.to_torch().state_dict())


# -- fixed biases never round --------------------------------------------------------------------
@pytest.mark.parametrize("cast", ["to", "half", "bfloat16", "constructor"])
def test_fixed_biases_stay_float32_in_a_16_bit_module(cast):
    ts = [torch.tensor([5000.0, 40000.0, 2.0, 10.0]), None]
    if cast == "constructor":
        m = tsrnn.LSTM(3, 4, 2, timescales=ts, dtype=torch.bfloat16)
    else:
        m = tsrnn.LSTM(3, 4, 2, timescales=ts)
        m = {"to": lambda: m.to(torch.bfloat16), "half": m.half, "bfloat16": m.bfloat16}[cast]()
    assert m.bias_fixed_l0.dtype == torch.float32 and m.weight_ih_l0.dtype != torch.float32
    assert_close(m.timescales(0), ts[0].double(), FLOAT32_BIAS)  # float32's rounding of b_f, not bf16's (3 %)
    bias = m.gate_biases(0)
    assert bias.dtype == torch.float32 and torch.equal(bias[:8], m.bias_fixed_l0)
    x = torch.randn(5, 2, 3).to(m.weight_ih_l0.dtype)
    for backend in ("reference", "auto"):
        m.backend = backend
        out, _ = m(x)
        assert out.dtype == x.dtype and torch.isfinite(out.float()).all()
    back = m.float()
    assert back.bias_fixed_l0.dtype == torch.float32 and torch.equal(back.bias_fixed_l0[4:5],
                                                                       torch.tensor([-1.0]) * back.bias_fixed_l0[:1])


def test_a_bf16_layers_effective_bias_keeps_the_timescale():
    """The forget gate of a 40,000-step unit is σ(b_f) = 1 - 1/40000 in float32; in bf16 the
    bias rounds to a timescale of 41,151."""
    m = tsrnn.LSTM(3, 2, timescales=[torch.tensor([40000.0, 5000.0])], dtype=torch.bfloat16)
    b_f = m.gate_biases(0)[2:4]
    assert_close(timescale_from_bias(b_f.double()), torch.tensor([40000.0, 5000.0], dtype=torch.float64), FLOAT32_BIAS)
    p = tsrnn.PowerLawLSTM(3, 2, fixed_p=0.3).bfloat16()
    assert p.p_l0.dtype == torch.float32 and p.p(0)[0].item() == pytest.approx(0.3, rel=1e-7)


# -- torch's exception types ---------------------------------------------------------------------
def _forward_cases():
    x = torch.randn(T, B, I)
    return {
        "features": (lambda m: m(torch.randn(T, B, I + 1))),
        "packed-features": (lambda m: m(pack_padded_sequence(torch.randn(T, B, I + 1), LENGTHS, enforce_sorted=False))),
        "rank-4": (lambda m: m(torch.randn(T, B, 1, I))),
        "no-steps": (lambda m: m(torch.randn(0, B, I))),
        "float64-input": (lambda m: m(x.double())),
        "h0-size": (lambda m: m(x, (torch.zeros(2, B + 1, H), torch.zeros(2, B, H)))),
        "c0-size": (lambda m: m(x, (torch.zeros(2, B, H), torch.zeros(2, B, H + 1)))),
        "h0-rank": (lambda m: m(x, (torch.zeros(B, H), torch.zeros(2, B, H)))),
        "unbatched-h0-rank": (lambda m: m(x[:, 0], (torch.zeros(2, 1, H), torch.zeros(2, 1, H)))),
        "h0-dtype": (lambda m: m(x, (torch.zeros(2, B, H, dtype=torch.float64), torch.zeros(2, B, H)))),
        "h0-device": (lambda m: m(x, (torch.zeros(2, B, H, device="meta"), torch.zeros(2, B, H)))),
        "h0-int": (lambda m: m(x, (torch.zeros(2, B, H, dtype=torch.int64), torch.zeros(2, B, H)))),
        "state-a-tensor": (lambda m: m(x, torch.zeros(2, B, H))),
        "state-three-entries": (lambda m: m(x, (torch.zeros(2, B, H),) * 3)),
        "input-int": (lambda m: m(torch.ones(T, B, I, dtype=torch.int64))),
        "input-1d": (lambda m: m(torch.randn(I))),
        "packed-3d": (lambda m: m(torch.nn.utils.rnn.PackedSequence(torch.randn(T, B, I), torch.tensor([3, 3])))),
    }


FORWARD_CASES = _forward_cases()


def _error_of(call):
    try:
        call()
    except Exception as err:  # noqa: BLE001 (the type is what is compared)
        return err
    return None


@pytest.mark.parametrize("case", FORWARD_CASES)
def test_forward_refusals_are_instances_of_torchs_exception_types(case):
    torch.manual_seed(0)
    theirs = _error_of(lambda: FORWARD_CASES[case](torch.nn.LSTM(I, H, 2)))
    ours = _error_of(lambda: FORWARD_CASES[case](tsrnn.LSTM(I, H, 2, backend="reference")))
    assert theirs is not None and ours is not None, (theirs, ours)
    assert isinstance(ours, type(theirs)), f"torch raises {type(theirs).__name__}, tsrnn {type(ours).__mro__}: {ours}"


CONSTRUCTOR_CASES = {
    "bias-str": {"bias": "False"}, "batch_first-str": {"batch_first": "False"},
    "bidirectional-int": {"bidirectional": 1}, "bias-int": {"bias": 0},
    "dropout-str": {"dropout": "0.5"}, "dropout-2": {"dropout": 2.0}, "hidden-0": {"hidden_size": 0},
    "hidden-float": {"hidden_size": 7.0}, "layers-0": {"num_layers": 0}, "input-0": {"input_size": 0},
    "proj-negative": {"proj_size": -1}, "proj-too-large": {"proj_size": H},
}


@pytest.mark.parametrize("case", CONSTRUCTOR_CASES)
@pytest.mark.parametrize("make", [tsrnn.LSTM, tsrnn.PowerLawLSTM], ids=["lstm", "plstm"])
def test_constructor_refusals_are_instances_of_torchs_exception_types(make, case):
    kwargs = {"input_size": I, "hidden_size": H, **CONSTRUCTOR_CASES[case]}
    theirs = _error_of(lambda: torch.nn.LSTM(**kwargs))
    ours = _error_of(lambda: make(**kwargs))
    if case.startswith("bidirectional"):
        assert theirs is None  # torch does not check this flag's type: tsrnn does, as its others
        assert isinstance(ours, TypeError) and "bidirectional should be of type bool" in str(ours)
        return
    if make is tsrnn.PowerLawLSTM and case.startswith("proj-too"):
        assert isinstance(ours, ValueError)
        return
    assert theirs is not None and isinstance(ours, type(theirs)), (theirs, ours)
    name = case.split("-")[0]
    assert name.replace("layers", "num_layers").replace("hidden", "hidden_size").replace("input", "input_size") \
        .replace("proj", "proj_size") in str(ours)


def test_flags_given_as_strings_are_refused_not_read_as_truthy():
    """bias="False" or batch_first="False" would be True by truthiness: batch_first would read the
    input as batch-first."""
    for flag in ("bias", "batch_first", "bidirectional"):
        with pytest.raises(TypeError, match=rf"{flag} should be of type bool, got: str; {flag} must be True or False, "
                                            r"got 'False'"):
            tsrnn.LSTM(I, H, **{flag: "False"})


# -- AWD-LSTM's weight drop --------------------------------------------------------------------
class WeightDrop(torch.nn.Module):
    """salesforce/awd-lstm-lm's WeightDrop on layer 0 (without its variational mask): the Parameter
    weight_hh_l0 becomes weight_hh_l0_raw, and before each call a dropped copy is set in its place,
    as a plain tensor or, as the original does, as a new Parameter (``as_parameter``)."""

    def __init__(self, module, p, as_parameter):
        super().__init__()
        self.module, self.p, self.as_parameter = module, p, as_parameter
        raw = module.weight_hh_l0
        del module._parameters["weight_hh_l0"]
        module.register_parameter("weight_hh_l0_raw", torch.nn.Parameter(raw.data))

    def forward(self, *args):
        dropped = torch.nn.functional.dropout(self.module.weight_hh_l0_raw, self.p, self.training)
        self.module.weight_hh_l0 = torch.nn.Parameter(dropped) if self.as_parameter else dropped
        return self.module.forward(*args)


@pytest.mark.parametrize("as_parameter", [False, True], ids=["tensor", "parameter"])
def test_awd_lstms_weight_drop_gives_torchs_outputs_and_gradients(as_parameter):
    """docs/migrating.md: a dropped tensor set as a plain attribute trains the raw weight as on
    torch.nn.LSTM; the original's new Parameter cuts its gradient on both."""
    x = torch.randn(T, B, I, dtype=torch.float64)
    results = []
    for module in pair():
        wrapped = WeightDrop(module, 0.5, as_parameter)
        torch.manual_seed(1)  # the same mask for both
        out, (_, c_n) = wrapped(x)
        (out * out).sum().add(c_n.sum()).backward()
        results.append((out, c_n, module.weight_hh_l0 == 0, module.weight_hh_l0_raw.grad))
    (out_t, c_t, dropped_t, grad_t), (out, c_n, dropped, grad) = results
    assert torch.equal(dropped, dropped_t) and 0.3 < dropped.double().mean() < 0.7
    assert_close(out, out_t, EXACT)
    assert_close(c_n, c_t, EXACT)
    if as_parameter:
        assert grad is None and grad_t is None
    else:
        assert_close(grad, grad_t, EXACT)
        assert torch.equal(grad == 0, dropped)
