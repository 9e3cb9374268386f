"""docs/equations.md §8 through the modules tsrnn.LSTM and tsrnn.PowerLawLSTM: every bad input,
initial state, constructor argument, timescale, layer index and dt raises the documented exception
type (ValueError for a bad value or shape, TypeError for a bad type or dtype) with a message that
names the argument.

The functional API's errors: test_errors_functional.py; the compiled operators':
test_errors_ops.py; tsrnn.memory.timescales': test_timescales.py.
"""
import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import tsrnn
from tsrnn.testing import TOLERANCE
from conftest import assert_close, needs_native

I, H, T, B, L = 3, 4, 5, 2, 2  # input size, hidden size, steps, batch, layers (T != B)
NAN, INF = float("nan"), float("inf")
MODULES = {"lstm": tsrnn.LSTM, "plstm": tsrnn.PowerLawLSTM}
STATE_NAMES = {"lstm": ("h0", "c0"), "plstm": ("h0", "c0", "a0")}


def make(kind, **kw):
    torch.manual_seed(0)
    return MODULES[kind](I, H, num_layers=L, **kw)


def states(kind, shape=(L, B, H), **override):
    """A valid initial-state tuple for `kind`, with some entries replaced."""
    return tuple(override.get(name, torch.zeros(shape)) for name in STATE_NAMES[kind])


# --------------------------------------------------------------------------------------------
# Modules: forward
# --------------------------------------------------------------------------------------------
def _packed_wrong_features():
    return pack_padded_sequence(torch.randn(T, B, I + 1), torch.tensor([T, T - 1]))


FORWARD_CASES = {
    # id: (input, state builder(kind) or None, exception, match)
    "input-1d": (lambda: torch.randn(I), None, ValueError, r"got 1D instead; input has shape \(3,\)"),
    "input-4d": (lambda: torch.randn(T, B, 1, I), None, ValueError, r"got 4D instead; input has shape \(5, 2, 1, 3\)"),
    "input-features": (lambda: torch.randn(T, B, I + 1), None, ValueError,
                       r"Expected 3, got 4; input has shape \(5, 2, 4\)"),
    "input-int": (lambda: torch.ones(T, B, I, dtype=torch.int64), None, TypeError,
                  r"RNN input dtype \(torch.int64\) .*; the input must be floating-point"),
    "input-float64-vs-float32-weights": (lambda: torch.randn(T, B, I, dtype=torch.float64), None,
                                         TypeError, r"RNN input dtype \(torch.float64\) does not match weight dtype \(torch.float32\)"),
    "input-packed-features": (_packed_wrong_features, None, ValueError, r"Expected 3, got 4; input has shape \(9, 4\)"),
    "input-no-steps": (lambda: torch.randn(0, B, I), None, ValueError, r"input has shape \(0, 2, 3\)"),
    "state-is-a-tensor": (lambda: torch.randn(T, B, I), lambda kind: torch.zeros(L, B, H), TypeError,
                          r"initial state must be a tuple \(h0, c0"),
    "state-too-short": (lambda: torch.randn(T, B, I), lambda kind: states(kind)[:-1], TypeError,
                        r"initial state must be a tuple \(h0, c0"),
    "state-too-long": (lambda: torch.randn(T, B, I), lambda kind: states(kind) + (torch.zeros(L, B, H),),
                       TypeError, r"initial state must be a tuple \(h0, c0"),
    "c0-not-a-tensor": (lambda: torch.randn(T, B, I), lambda kind: states(kind, c0=[[0.0] * H] * B),
                        TypeError, r"c0 must be a torch.Tensor"),
    "h0-int": (lambda: torch.randn(T, B, I), lambda kind: states(kind, h0=torch.zeros(L, B, H, dtype=torch.int64)),
               TypeError, r"h0 must be a floating-point tensor"),
    "h0-no-layer-dim": (lambda: torch.randn(T, B, I), lambda kind: states(kind, h0=torch.zeros(B, H)),
                        ValueError, r"h0 must have shape \(2, 2, 4\), got \(2, 4\)"),
    "c0-wrong-batch": (lambda: torch.randn(T, B, I), lambda kind: states(kind, c0=torch.zeros(L, B + 1, H)),
                       ValueError, r"c0 must have shape \(2, 2, 4\), got \(2, 3, 4\)"),
    "c0-wrong-hidden": (lambda: torch.randn(T, B, I), lambda kind: states(kind, c0=torch.zeros(L, B, H + 1)),
                        ValueError, r"c0 must have shape \(2, 2, 4\)"),
    "h0-wrong-layers": (lambda: torch.randn(T, B, I), lambda kind: states(kind, h0=torch.zeros(L + 1, B, H)),
                        ValueError, r"h0 must have shape \(2, 2, 4\)"),
    "h0-other-device": (lambda: torch.randn(T, B, I), lambda kind: states(kind, h0=torch.zeros(L, B, H, device="meta")),
                        ValueError, r"found input tensor at cpu and hidden tensor at meta; move h0 to cpu"),
    "unbatched-h0-batched": (lambda: torch.randn(T, I), lambda kind: states(kind, (L, H), h0=torch.zeros(L, 1, H)),
                             ValueError, r"h0 must have shape \(2, 4\), got \(2, 1, 4\)"),
    "unbatched-c0-no-layer-dim": (lambda: torch.randn(T, I), lambda kind: states(kind, (L, H), c0=torch.zeros(H)),
                                  ValueError, r"c0 must have shape \(2, 4\)"),
}


@pytest.mark.parametrize("kind", MODULES)
@pytest.mark.parametrize("case", FORWARD_CASES)
def test_module_forward_errors(kind, case):
    make_input, make_state, exc, match = FORWARD_CASES[case]
    m = make(kind)
    state = None if make_state is None else make_state(kind)
    with pytest.raises(exc, match=match):
        m(make_input(), state)


def test_module_a0_shape():
    m = make("plstm")
    with pytest.raises(ValueError, match=r"a0 must have shape \(2, 2, 4\), got \(2, 2, 5\)"):
        m(torch.randn(T, B, I), states("plstm", a0=torch.zeros(L, B, H + 1)))
    with pytest.raises(ValueError, match=r"a0 must have shape \(2, 4\), got \(2, 1, 4\)"):
        m(torch.randn(T, I), states("plstm", (L, H), a0=torch.zeros(L, 1, H)))


@pytest.mark.parametrize("kind", MODULES)
def test_batch_first_states_stay_layer_batch_hidden(kind):
    """As in torch.nn.LSTM, batch_first changes the input layout only: h0 stays (L, B, H)."""
    m = make(kind, batch_first=True)
    x = torch.randn(B, T, I)
    out = m(x, states(kind))[0]  # (L, B, H): fine
    assert out.shape == (B, T, H)
    with pytest.raises(ValueError, match=r"h0 must have shape \(2, 2, 4\), got \(2, 5, 4\)"):
        m(x, states(kind, h0=torch.zeros(L, T, H)))  # batch-first states are wrong
    with pytest.raises(ValueError, match=r"Expected 3, got 4; input has shape \(2, 5, 4\)"):
        m(torch.randn(B, T, I + 1))


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=needs_native)])
def test_module_state_dtype_must_match_input(backend):
    m = tsrnn.LSTM(I, H, num_layers=L, dtype=torch.float64, backend=backend)
    x = torch.randn(T, B, I, dtype=torch.float64)
    h0 = torch.zeros(L, B, H, dtype=torch.float32)
    c0 = torch.zeros(L, B, H, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"h0"):
        m(x, (h0, c0))


# --------------------------------------------------------------------------------------------
# Modules: constructors
# --------------------------------------------------------------------------------------------
CTOR_CASES = {
    # id: (kwargs, exception, match); applied to both modules unless the key says otherwise
    "hidden_size-0": ({"hidden_size": 0}, ValueError, r"hidden_size must be greater than zero; got 0"),
    "input_size-0": ({"input_size": 0}, ValueError, r"input_size must be greater than zero; got 0"),
    "hidden_size-float": ({"hidden_size": 4.0}, TypeError, r"hidden_size should be of type int, got: float"),
    "num_layers-neg": ({"num_layers": -1}, ValueError, r"num_layers must be greater than zero; got -1"),
    "num_layers-0": ({"num_layers": 0}, ValueError, r"num_layers must be greater than zero; got 0"),
    "num_layers-bool": ({"num_layers": True}, TypeError, r"num_layers should be of type int, got: bool"),
    "num_layers-float": ({"num_layers": 2.0}, TypeError, r"num_layers should be of type int, got: float"),
    "dropout-1.5": ({"dropout": 1.5}, ValueError, r"dropout should be a number in range \[0, 1\] .*; got 1.5"),
    "dropout-neg": ({"dropout": -0.1}, ValueError, r"dropout should be a number in range \[0, 1\]"),
    "dropout-nan": ({"dropout": NAN}, ValueError, r"dropout should be a number in range \[0, 1\]"),
    "dropout-str": ({"dropout": "0.5"}, ValueError, r"dropout should be a number in range \[0, 1\] .*; got '0.5'"),
    "dropout-inf": ({"dropout": INF}, ValueError, r"dropout should be a number in range \[0, 1\] .*; got inf"),
    "dropout-bool": ({"dropout": True}, ValueError, r"dropout should be a number in range \[0, 1\] .*; got True"),
    "backend": ({"backend": "cuda-magic"}, ValueError,
                r"backend must be one of \['auto', 'reference', 'native', 'triton', 'cpu', 'onednn'.*\], got 'cuda-magic'"),
    "lstm:freeze": ({"freeze": "x"}, ValueError, r"freeze must be one of \['gates', 'all'\], got 'x'"),
    "plstm:input_gate": ({"input_gate": "x"}, ValueError, r"input_gate must be one of \['coupled', 'separate'\]"),
    "plstm:eps-0": ({"eps": 0.0}, ValueError, r"eps must be > 0"),
    "plstm:eps-neg": ({"eps": -1e-3}, ValueError, r"eps must be > 0"),
    "plstm:eps-nan": ({"eps": NAN}, ValueError, r"eps must be finite"),
    "plstm:eps-inf": ({"eps": INF}, ValueError, r"eps must be finite"),
    "plstm:eps-str": ({"eps": "1e-3"}, TypeError, r"eps must be a real number"),
    "plstm:learn_p-and-fixed_p": ({"learn_p": True, "fixed_p": 0.5}, ValueError,
                                  r"^learn_p=True and fixed_p=0.5 contradict each other: a fixed p is not learned$"),
    "plstm:learn_p-str": ({"learn_p": "no"}, ValueError, r"learn_p must be one of \[None, True, False\], got 'no'"),
}


def _ctor_params():
    for case, (kw, exc, match) in CTOR_CASES.items():
        kinds = [case.split(":")[0]] if ":" in case else list(MODULES)
        for kind in kinds:
            yield pytest.param(kind, kw, exc, match, id=f"{kind}-{case.split(':')[-1]}")


@pytest.mark.parametrize("kind, kw, exc, match", list(_ctor_params()))
def test_constructor_errors(kind, kw, exc, match):
    args = {"input_size": I, "hidden_size": H, **kw}
    with pytest.raises(exc, match=match):
        MODULES[kind](**args)


@pytest.mark.parametrize("kind", list(MODULES))
def test_dropout_with_one_layer_warns_as_torch_does(kind):
    """dropout > 0 with num_layers == 1 warns with torch.nn.LSTM's own text, once, at construction."""
    for dropout, layers in ((0.3, 1), (1, 1)):
        with pytest.warns(UserWarning) as torch_warned:
            torch.nn.LSTM(I, H, layers, dropout=dropout)
        with pytest.warns(UserWarning) as ours:
            module = MODULES[kind](I, H, layers, dropout=dropout)
        assert [str(w.message) for w in ours] == [str(w.message) for w in torch_warned]
        assert ours[0].filename == __file__  # points at the caller's line
    assert str(ours[0].message) == ("dropout option adds dropout after all but last recurrent layer, so non-zero "
                                    "dropout expects num_layers greater than 1, but got dropout=1 and num_layers=1")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="dropout option")
        MODULES[kind](I, H, 2, dropout=0.3)
        MODULES[kind](I, H, 1, dropout=0.0)
        module(torch.randn(T, B, I))  # nothing per call


def test_plstm_learns_p_unless_it_is_fixed():
    """learn_p=None (the default) learns p unless fixed_p is given; learn_p=False with fixed_p agrees."""
    assert tsrnn.PowerLawLSTM(I, H).learn_p and "p_logit_l0" in dict(tsrnn.PowerLawLSTM(I, H).named_parameters())
    for kw in ({"fixed_p": 0.5}, {"fixed_p": 0.5, "learn_p": False}):
        m = tsrnn.PowerLawLSTM(I, H, **kw)
        assert not m.learn_p and not any("p_" in name for name, _ in m.named_parameters())
    frozen = tsrnn.PowerLawLSTM(I, H, learn_p=False)
    assert not frozen.learn_p and "p_logit_l0" in dict(frozen.named_buffers())


# --------------------------------------------------------------------------------------------
# tsrnn.LSTM timescales and gate_biases
# --------------------------------------------------------------------------------------------
def ts(*values):
    return torch.tensor(values, dtype=torch.float64)


GOOD_TS = ts(1.5, 3.0, 10.0, 100.0)

TIMESCALE_CASES = {
    "too-few-layers": ([GOOD_TS], ValueError, r"timescales must be None or a list of 2 entries"),
    "too-many-layers": ([GOOD_TS, None, None], ValueError, r"timescales must be None or a list of 2 entries"),
    "bare-tensor": (torch.stack([GOOD_TS, GOOD_TS]), ValueError, r"timescales must be None or a list"),
    "layer0-too-long": ([ts(1, 2, 3, 4, 5), None], ValueError, r"timescales\[0\] must have shape \(4,\), got \(5,\)"),
    "layer1-too-short": ([None, ts(1, 2, 3)], ValueError, r"timescales\[1\] must have shape \(4,\), got \(3,\)"),
    "layer0-2d": ([GOOD_TS[None], None], ValueError, r"timescales\[0\] must have 1 dimensions"),
    "negative": ([ts(1, 2, -3, 4), None], ValueError, r"timescales\[0\] must be > 0, got minimum -3"),
    "zero": ([None, ts(1, 0, 3, 4)], ValueError, r"timescales\[1\] must be > 0, got minimum 0"),
    "nan": ([ts(1, NAN, 3, 4), None], ValueError, r"timescales\[0\] must be finite"),
    "inf": ([ts(1, 2, INF, 4), None], ValueError, r"timescales\[0\] must be finite"),
    "python-list-negative": ([[1.0, 2.0, 3.0, -4.0], None], ValueError, r"timescales\[0\] must be > 0"),
}


@pytest.mark.parametrize("case", TIMESCALE_CASES)
def test_timescale_errors(case):
    value, exc, match = TIMESCALE_CASES[case]
    freeze = "all" if case in ("negative", "nan") else "gates"
    with pytest.raises(exc, match=match):
        tsrnn.LSTM(I, H, num_layers=L, timescales=value, freeze=freeze)


def test_timescales_need_bias():
    tsrnn.LSTM(I, H, num_layers=L, timescales=[GOOD_TS, None])  # fine with biases
    with pytest.raises(ValueError, match=r"timescales need bias=True"):
        tsrnn.LSTM(I, H, num_layers=L, bias=False, timescales=[GOOD_TS, None])
    tsrnn.LSTM(I, H, num_layers=L, bias=False, timescales=[None, None])  # all learned: fine


def test_non_numeric_timescales_name_the_argument():
    with pytest.raises((TypeError, ValueError), match=r"timescales\[0\]"):
        tsrnn.LSTM(I, H, timescales=[["a", "b", "c", "d"]])


@pytest.mark.parametrize("layer", [L, L + 3, -1])
def test_gate_biases_layer_out_of_range(layer):
    m = tsrnn.LSTM(I, H, num_layers=L, timescales=[GOOD_TS, None])
    assert m.gate_biases(L - 1).shape == (4 * H,)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\), got " + str(layer)):
        m.gate_biases(layer)


@pytest.mark.parametrize("method, layer", [("timescales", 7), ("gate_biases", 1.5), ("p", 5)])
def test_layer_accessors_check_layer(method, layer):
    m = tsrnn.PowerLawLSTM(I, H, num_layers=L) if method == "p" else \
        tsrnn.LSTM(I, H, num_layers=L, timescales=[GOOD_TS, None])
    with pytest.raises((ValueError, TypeError), match=r"layer"):
        getattr(m, method)(layer)


# --------------------------------------------------------------------------------------------
# tsrnn.PowerLawLSTM dt
# --------------------------------------------------------------------------------------------
def _dt(*shape, fill=1.0, **kw):
    return torch.full(shape, fill, **kw)


DT_CASES = {
    "negative": (_dt(T, B, fill=-0.5), ValueError, r"dt must be > 0, got minimum -0.5"),
    "zero": (_dt(T, B, fill=0.0), ValueError, r"dt must be > 0, got minimum 0"),
    "one-zero": (torch.ones(T, B).index_fill_(0, torch.tensor([3]), 0.0), ValueError, r"dt must be > 0"),
    "nan": (torch.ones(T, B).index_fill_(0, torch.tensor([1]), NAN), ValueError, r"dt must be finite"),
    "inf": (torch.ones(T, B).index_fill_(0, torch.tensor([2]), INF), ValueError, r"dt must be finite"),
    "wrong-batch": (_dt(T, B + 1), ValueError, r"dt must have shape \(5, 2\) or \(5, 2, 1\), got \(5, 3\)"),
    "wrong-steps": (_dt(T - 1, B), ValueError, r"dt must have shape \(5, 2\) or \(5, 2, 1\), got \(4, 2\)"),
    "transposed": (_dt(B, T), ValueError, r"dt must have shape \(5, 2\) or \(5, 2, 1\), got \(2, 5\)"),
    "last-dim-2": (_dt(T, B, 2), ValueError, r"dt must have shape \(5, 2\) or \(5, 2, 1\), got \(5, 2, 2\)"),
    "1d": (_dt(T), ValueError, r"dt must have shape \(5, 2\) or \(5, 2, 1\)"),
    "4d": (_dt(T, B, 1, 1), ValueError, r"dt must have shape \(5, 2\) or \(5, 2, 1\)"),
    "int": (torch.ones(T, B, dtype=torch.int64), TypeError, r"dt must be a floating-point tensor"),
    "python-float": (1.0, TypeError, r"dt must be a torch.Tensor"),
    "other-device": (_dt(T, B, device="meta"), ValueError, r"dt is on meta but input is on cpu"),
}


@pytest.mark.parametrize("case", DT_CASES)
def test_plstm_dt_errors(case):
    dt, exc, match = DT_CASES[case]
    m = make("plstm", input_gate="separate" if case in ("zero", "nan") else "coupled")
    with pytest.raises(exc, match=match):
        m(torch.randn(T, B, I), dt=dt)


def test_plstm_dt_layouts():
    """dt follows the input layout: (T, B) time-major, (B, T) batch_first, (T,) unbatched."""
    tm = make("plstm", backend="reference")
    bf = make("plstm", batch_first=True, backend="reference")
    bf.load_state_dict(tm.state_dict())
    x = torch.randn(T, B, I)
    dt = torch.rand(T, B) + 0.5
    ref_out, ref_state = tm(x, dt=dt)
    for dt_bf in (dt.t(), dt.t()[..., None]):
        out, state = bf(x.transpose(0, 1), dt=dt_bf)
        assert torch.equal(out.transpose(0, 1), ref_out)
        assert all(torch.equal(s, r) for s, r in zip(state, ref_state))
    # Unit dt differs from this dt, so the layout is really used.
    assert not torch.allclose(tm(x)[0], ref_out)
    # The time-major layout with T != B is wrong for a batch_first module.
    with pytest.raises(ValueError, match=r"dt must have shape"):
        bf(x.transpose(0, 1), dt=dt)
    # Unbatched: (T,) or (T, 1); a batch of one row rounds differently from a batch of B rows.
    out_u, _ = tm(x[:, 0], dt=dt[:, 0])
    assert_close(out_u, ref_out[:, 0], TOLERANCE[torch.float32], "unbatched dt (T,)")
    assert torch.equal(tm(x[:, 0], dt=dt[:, :1])[0], out_u)
    with pytest.raises(ValueError, match=r"dt must have shape \(5,\) or \(5, 1\)"):
        tm(x[:, 0], dt=dt[..., None])


@pytest.mark.parametrize("layout", ["batch_first", "unbatched"])
def test_plstm_dt_error_reports_callers_layout(layout):
    if layout == "batch_first":
        m, x, dt = make("plstm", batch_first=True), torch.randn(B, T, I), torch.ones(T, B)
        expected, given = r"\(2, 5\)", r"\(5, 2\)"
    else:
        m, x, dt = make("plstm"), torch.randn(T, I), torch.ones(T, 2)
        expected, given = r"\(5,\)", r"\(5, 2\)"
    with pytest.raises(ValueError, match=rf"dt.*{expected}.*got {given}"):
        m(x, dt=dt)


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=needs_native)])
def test_plstm_negative_age_is_rejected(backend):
    m = make("plstm", backend=backend)
    state = states("plstm", c0=torch.zeros(L, B, H), a0=torch.full((L, B, H), -2.0))
    with pytest.raises(ValueError, match=r"a0"):
        out, _ = m(torch.randn(T, B, I), state)
        assert torch.isfinite(out).all()  # reached only without the check
