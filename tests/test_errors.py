"""docs/equations.md §8 through the public API: every bad argument raises the documented exception type
(ValueError for a bad value or shape, TypeError for a bad type or dtype) with a message that
names the argument; the compiled operators raise RuntimeError("tsrnn: ...") and never crash.

Error tests of tsrnn.timescales live in test_timescales.py.
"""
import faulthandler
import os
import signal
import time

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import tsrnn
from tsrnn import functional
from conftest import TOLERANCE, assert_close, layer_args, needs_native

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
def _packed():
    return pack_padded_sequence(torch.randn(T, B, I), torch.tensor([T, T - 1]))


FORWARD_CASES = {
    # id: (input, state builder(kind) or None, exception, match)
    "input-1d": (lambda: torch.randn(I), None, ValueError, r"input must have 2 or 3 dimensions"),
    "input-4d": (lambda: torch.randn(T, B, 1, I), None, ValueError, r"input must have 2 or 3 dimensions"),
    "input-features": (lambda: torch.randn(T, B, I + 1), None, ValueError,
                       r"input must have 3 features"),
    "input-int": (lambda: torch.ones(T, B, I, dtype=torch.int64), None, TypeError,
                  r"input must be a floating-point tensor"),
    "input-float64-vs-float32-weights": (lambda: torch.randn(T, B, I, dtype=torch.float64), None,
                                         TypeError, r"input has dtype torch.float64 but the module's parameters are torch.float32"),
    "input-packed": (_packed, None, TypeError, r"PackedSequence"),
    "input-no-steps": (lambda: torch.randn(0, B, I), None, ValueError, r"input must have at least one step"),
    "input-no-batch": (lambda: torch.randn(T, 0, I), None, ValueError, r"input must have at least one step"),
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
                        ValueError, r"h0 is on meta but input is on cpu"),
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
    with pytest.raises(ValueError, match=r"input must have 3 features"):
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
    "hidden_size-0": ({"hidden_size": 0}, ValueError, r"hidden_size must be >= 1, got 0"),
    "input_size-0": ({"input_size": 0}, ValueError, r"input_size must be >= 1, got 0"),
    "hidden_size-float": ({"hidden_size": 4.0}, TypeError, r"hidden_size must be an int"),
    "num_layers-neg": ({"num_layers": -1}, ValueError, r"num_layers must be >= 1, got -1"),
    "num_layers-0": ({"num_layers": 0}, ValueError, r"num_layers must be >= 1, got 0"),
    "num_layers-bool": ({"num_layers": True}, TypeError, r"num_layers must be an int, got bool"),
    "num_layers-float": ({"num_layers": 2.0}, TypeError, r"num_layers must be an int, got float"),
    "dropout-1.5": ({"dropout": 1.5}, ValueError, r"dropout must be in \[0, 1\], got 1.5"),
    "dropout-neg": ({"dropout": -0.1}, ValueError, r"dropout must be in \[0, 1\]"),
    "dropout-nan": ({"dropout": NAN}, ValueError, r"dropout must be in \[0, 1\]"),
    "dropout-str": ({"dropout": "0.5"}, TypeError, r"dropout must be a real number"),
    "backend": ({"backend": "cuda-magic"}, ValueError,
                r"backend must be one of \['auto', 'reference', 'native', 'triton', 'cpu', 'onednn'.*\], got 'cuda-magic'"),
    "lstm:freeze": ({"freeze": "x"}, ValueError, r"freeze must be one of \['gates', 'all'\], got 'x'"),
    "plstm:input_gate": ({"input_gate": "x"}, ValueError, r"input_gate must be one of \['coupled', 'separate'\]"),
    "plstm:eps-0": ({"eps": 0.0}, ValueError, r"eps must be > 0"),
    "plstm:eps-neg": ({"eps": -1e-3}, ValueError, r"eps must be > 0"),
    "plstm:eps-nan": ({"eps": NAN}, ValueError, r"eps must be finite"),
    "plstm:eps-inf": ({"eps": INF}, ValueError, r"eps must be finite"),
    "plstm:eps-str": ({"eps": "1e-3"}, TypeError, r"eps must be a real number"),
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


# --------------------------------------------------------------------------------------------
# functional.lstm / functional.plstm
# --------------------------------------------------------------------------------------------
FT, FB, FI, FH = 4, 3, 5, 6


def _replace(name, fn):
    return lambda args: {**args, name: fn(args[name])}


FUNCTIONAL_CASES = {
    # id: (cells, mutate(args) -> args, exception, match)
    "x-2d": (None, _replace("x", lambda v: v[0]), ValueError, r"x must have 3 dimensions"),
    "x-int": (None, _replace("x", lambda v: v.long()), TypeError, r"x must be a floating-point tensor"),
    "x-not-tensor": (None, _replace("x", lambda v: v.tolist()), TypeError, r"x must be a torch.Tensor"),
    "x-no-steps": (None, _replace("x", lambda v: v[:0]), ValueError, r"x must have at least one step"),
    "w_ih-columns": (None, _replace("w_ih", lambda v: v[:, :-1]), ValueError,
                     r"w_ih must have shape \(\d+, 5\), got \(\d+, 4\)"),
    "w_ih-rows": (None, _replace("w_ih", lambda v: v[:-1]), ValueError, r"w_ih must have shape"),
    "w_ih-1d": (None, _replace("w_ih", lambda v: v[0]), ValueError, r"w_ih must have 2 dimensions"),
    "w_hh-rows": (None, _replace("w_hh", lambda v: v[:-1]), ValueError, r"w_hh must have shape \(\d+, 6\)"),
    "w_hh-1d": (None, _replace("w_hh", lambda v: v.flatten()), ValueError, r"w_hh must have 2 dimensions"),
    "bias-length": (None, _replace("bias", lambda v: v[:-1]), ValueError, r"bias must have shape"),
    "bias-2d": (None, _replace("bias", lambda v: v[None]), ValueError, r"bias must have 1 dimensions"),
    "h0-batch": (None, _replace("h0", lambda v: v[:-1]), ValueError, r"h0 must have shape \(3, 6\), got \(2, 6\)"),
    "h0-3d": (None, _replace("h0", lambda v: v[None]), ValueError, r"h0 must have 2 dimensions"),
    "c0-hidden": (None, _replace("c0", lambda v: v[:, :-1]), ValueError, r"c0 must have shape \(3, 6\), got \(3, 5\)"),
    "w_ih-dtype": (None, _replace("w_ih", lambda v: v.float()), TypeError, r"w_ih has dtype torch.float32 but x"),
    "w_hh-dtype": (None, _replace("w_hh", lambda v: v.float()), TypeError, r"w_hh has dtype torch.float32 but x"),
    "bias-dtype": (None, _replace("bias", lambda v: v.float()), TypeError, r"bias has dtype torch.float32 but x"),
    "w_hh-device": (None, _replace("w_hh", lambda v: v.to("meta")), ValueError, r"w_hh is on meta but x is on cpu"),
    "c0-device": (None, _replace("c0", lambda v: v.to("meta")), ValueError, r"c0 is on meta but x is on cpu"),
    "backend": (None, lambda a: {**a, "backend": "cuda-magic"}, ValueError, r"backend must be one of"),
    "a0-shape": ("plstm", _replace("a0", lambda v: v[:, :-1]), ValueError, r"a0 must have shape \(3, 6\)"),
    "a0-device": ("plstm", _replace("a0", lambda v: v.to("meta")), ValueError, r"a0 is on meta"),
    "p-length": ("plstm", _replace("p", lambda v: v[:-1]), ValueError, r"p must have shape \(6,\), got \(5,\)"),
    "p-2d": ("plstm", _replace("p", lambda v: v[None]), ValueError, r"p must have 1 dimensions"),
    "p-device": ("plstm", _replace("p", lambda v: v.to("meta")), ValueError, r"p is on meta"),
    "dt-shape": ("plstm", lambda a: {**a, "dt": torch.ones(FT, FB + 1, dtype=torch.float64)}, ValueError,
                 r"dt must have shape \(4, 3\), got \(4, 4\)"),
    "dt-3d-shape": ("plstm", lambda a: {**a, "dt": torch.ones(FT, FB, 2, dtype=torch.float64)}, ValueError,
                    r"dt must have shape \(4, 3, 1\)"),
    "dt-negative": ("plstm", lambda a: {**a, "dt": -torch.ones(FT, FB, dtype=torch.float64)}, ValueError,
                    r"dt must be > 0"),
    "dt-nan": ("plstm", lambda a: {**a, "dt": torch.full((FT, FB), NAN, dtype=torch.float64)}, ValueError,
               r"dt must be finite"),
    "eps-zero": ("plstm", lambda a: {**a, "eps": 0.0}, ValueError, r"eps must be > 0"),
    "eps-negative": ("plstm", lambda a: {**a, "eps": -1.0}, ValueError, r"eps must be > 0"),
    "eps-nan": ("plstm", lambda a: {**a, "eps": NAN}, ValueError, r"eps"),
    "input_gate": ("plstm", lambda a: {**a, "input_gate": "x"}, ValueError, r"input_gate must be one of"),
    "gate-count": ("plstm", lambda a: {**a, "input_gate": "separate" if a["input_gate"] == "coupled" else "coupled"},
                   ValueError, r"w_hh must have shape"),
}


def _functional_params():
    for case, (cells, *_rest) in FUNCTIONAL_CASES.items():
        if cells is None:  # every cell shares these checks: run them on lstm and one pLSTM
            chosen = ("lstm", "plstm_separate")
        else:
            chosen = ("plstm_coupled", "plstm_separate") if case == "gate-count" else ("plstm_coupled",)
        for cell in chosen:
            yield pytest.param(cell, case, id=f"{cell}-{case}")


def call_layer(cell, args):
    fn = functional.lstm if cell == "lstm" else functional.plstm
    return fn(**args)


@pytest.mark.parametrize("cell, case", list(_functional_params()))
def test_functional_layer_errors(cell, case):
    _, mutate, exc, match = FUNCTIONAL_CASES[case]
    args = layer_args(cell, FT, FB, FI, FH)
    call_layer(cell, args)  # the unmodified arguments are fine
    with pytest.raises(exc, match=match):
        call_layer(cell, mutate(args))


@pytest.mark.parametrize("backend", [
    "reference",
    pytest.param("native", marks=needs_native),
])
def test_functional_plstm_requires_p(backend):
    args = layer_args("plstm_coupled", FT, FB, FI, FH)
    with pytest.raises((TypeError, ValueError, RuntimeError), match=r"\bp (must be a torch.Tensor|is required)"):
        functional.plstm(**{**args, "p": None, "backend": backend})


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=needs_native)])
@pytest.mark.parametrize("cell", ["lstm", "plstm_coupled"])
def test_functional_state_dtype_must_match_x(cell, backend):
    args = layer_args(cell, FT, FB, FI, FH)
    args["c0"] = args["c0"].float()
    with pytest.raises(TypeError, match=r"c0"):
        call_layer(cell, {**args, "backend": backend})


@pytest.mark.parametrize("eps", [INF, "1e-3"])
def test_functional_plstm_eps_checked_like_the_module(eps):
    args = layer_args("plstm_coupled", FT, FB, FI, FH)
    with pytest.raises((ValueError, TypeError), match=r"eps"):
        out, _ = functional.plstm(**{**args, "eps": eps})
        assert torch.isfinite(out).all()  # reached only without the check


# --------------------------------------------------------------------------------------------
# functional.linear_scan
# --------------------------------------------------------------------------------------------
SCAN_CASES = {
    # id: (a, u, x0, exception, match)
    "a-not-broadcastable": (lambda: torch.rand(4, 3), lambda: torch.randn(4, 2), None, ValueError,
                            r"a of shape \(4, 3\) does not broadcast to u \(4, 2\)"),
    "a-more-dims": (lambda: torch.rand(2, 4, 2), lambda: torch.randn(4, 2), None, ValueError,
                    r"a of shape \(2, 4, 2\) does not broadcast"),
    "a-float": (lambda: 0.5, lambda: torch.randn(4, 2), None, TypeError, r"a must be a torch.Tensor"),
    "a-int": (lambda: torch.ones(4, 2, dtype=torch.int64), lambda: torch.randn(4, 2), None, TypeError,
              r"a must be a floating-point tensor"),
    "u-int": (lambda: torch.rand(4, 2), lambda: torch.ones(4, 2, dtype=torch.int32), None, TypeError,
              r"u must be a floating-point tensor"),
    "u-no-steps": (lambda: torch.rand(0, 2), lambda: torch.randn(0, 2), None, ValueError, r"u must be \(T, \.\.\.\) with T >= 1"),
    "u-0d": (lambda: torch.rand(()), lambda: torch.randn(()), None, ValueError, r"u must be \(T, \.\.\.\)"),
    "x0-shape": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(3), ValueError,
                 r"x0 must have shape \(2,\), got \(3,\)"),
    "x0-with-time": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(4, 2), ValueError,
                     r"x0 must have shape \(2,\), got \(4, 2\)"),
    "x0-broadcastable": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(1), ValueError,
                         r"x0 must have shape \(2,\)"),
    "x0-int": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(2, dtype=torch.int64),
               TypeError, r"x0 must be a floating-point tensor"),
    "a-dtype": (lambda: torch.rand(4, 2, dtype=torch.float64), lambda: torch.randn(4, 2), None, TypeError,
                r"a has dtype torch.float64 but u has torch.float32"),
    "x0-dtype": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(2, dtype=torch.float64),
                 TypeError, r"x0 has dtype torch.float64 but u has torch.float32"),
    "a-device": (lambda: torch.rand(4, 2, device="meta"), lambda: torch.randn(4, 2), None, ValueError,
                 r"a is on meta but u is on cpu"),
    "x0-device": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(2, device="meta"),
                  ValueError, r"x0 is on meta but u is on cpu"),
}


@pytest.mark.parametrize("case", SCAN_CASES)
def test_linear_scan_errors(case):
    make_a, make_u, make_x0, exc, match = SCAN_CASES[case]
    x0 = None if make_x0 is None else make_x0()
    backend = "reference" if case.startswith("x0") else "auto"  # checks run before either path
    with pytest.raises(exc, match=match):
        functional.linear_scan(make_a(), make_u(), x0, backend=backend)


def test_linear_scan_bad_backend():
    a, u = torch.rand(4, 2), torch.randn(4, 2)
    functional.linear_scan(a, u)
    with pytest.raises(ValueError, match=r"backend must be one of"):
        functional.linear_scan(a, u, backend="cuda-magic")


# --------------------------------------------------------------------------------------------
# The compiled operators, called directly: RuntimeError("tsrnn: ..."), never a crash
# --------------------------------------------------------------------------------------------
OT, OB, OH = 3, 2, 4
F64 = torch.float64


def op_args(cell="lstm"):
    """Valid (cell, xg, w_hh, h0, state0, p, dt, eps, save) for recurrence_forward."""
    g = torch.Generator().manual_seed(0)
    G, S = tsrnn.cells.get(cell).num_gates, tsrnn.cells.get(cell).num_states
    power = cell != "lstm"
    return {
        "cell": cell,
        "xg": torch.randn(OT, OB, G * OH, generator=g, dtype=F64),
        "w_hh": torch.randn(G * OH, OH, generator=g, dtype=F64),
        "h0": torch.randn(OB, OH, generator=g, dtype=F64),
        "state0": torch.rand(S, OB, OH, generator=g, dtype=F64),
        "p": torch.rand(OH, generator=g, dtype=F64) if power else None,
        "dt": torch.rand(OT, OB, generator=g, dtype=F64) + 0.5 if power else None,
        "eps": 1e-3 if power else 0.0,
        "save": True,
    }


def forward(args):
    return torch.ops.tsrnn.recurrence_forward(*args.values())


def backward_args(cell="lstm", save=True):
    args = op_args(cell)
    args["save"] = save
    h_all, state_n, state_all, saved = forward(args)
    return {
        "cell": cell, "grad_h": torch.ones_like(h_all), "grad_state_n": torch.ones_like(state_n),
        "w_hh": args["w_hh"], "h0": args["h0"], "state0": args["state0"], "h_all": h_all,
        "state_all": state_all, "saved": saved, "p": args["p"], "dt": args["dt"], "eps": args["eps"],
    }


def backward(args):
    return torch.ops.tsrnn.recurrence_backward(*args.values())


def _all_float(args, dtype):
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def _set(**changes):
    return lambda a: {**a, **{k: (fn(a[k]) if callable(fn) else fn) for k, fn in changes.items()}}


FORWARD_OP_CASES = {
    # id: (cell, mutate, match after "tsrnn: ")
    "unknown-cell": ("lstm", _set(cell="gru"), r"unknown cell 'gru'"),
    "empty-cell": ("lstm", _set(cell=""), r"unknown cell ''"),
    "int": ("lstm", lambda a: _all_float(a, torch.int64), r"the CPU kernels take float32 or float64, got Long"),
    "half": ("lstm", lambda a: _all_float(a, torch.float16), r"the CPU kernels take float32 or float64, got Half"),
    "bf16-plstm": ("plstm_coupled", lambda a: _all_float(a, torch.bfloat16), r"the CPU kernels take float32 or float64, got BFloat16"),
    "xg-2d": ("lstm", _set(xg=lambda v: v[0]), r"xg must have 3 dimensions"),
    "xg-columns": ("lstm", _set(xg=lambda v: v[..., :-1]), r"xg must be \[T, B, 16\]"),
    "xg-empty": ("lstm", _set(xg=lambda v: v[:0]), r"empty input"),
    "w_hh-rows": ("lstm", _set(w_hh=lambda v: v[:-1]), r"w_hh must be \[16, 4\]"),
    "w_hh-3d": ("lstm", _set(w_hh=lambda v: v[None]), r"w_hh must have 2 dimensions"),
    "w_hh-dtype": ("lstm", _set(w_hh=lambda v: v.float()), r"w_hh has dtype Float, expected Double"),
    "h0-batch": ("lstm", _set(h0=lambda v: v[:1]), r"h0 must be \[2, 4\]"),
    "h0-dtype": ("lstm", _set(h0=lambda v: v.float()), r"h0 has dtype Float"),
    "state0-count": ("lstm", _set(state0=lambda v: torch.cat([v, v])), r"state0 must be \[1, 2, 4\]"),
    "state0-2d": ("lstm", _set(state0=lambda v: v[0]), r"state0 must have 3 dimensions"),
    "state0-dtype": ("plstm_separate", _set(state0=lambda v: v.float()), r"state0 has dtype Float"),
    "p-for-lstm": ("lstm", _set(p=torch.rand(OH, dtype=F64)), r"p is not used for this cell"),
    "dt-for-lstm": ("lstm", _set(dt=torch.ones(OT, OB, dtype=F64)), r"dt is only used by the pLSTM cells"),
    "p-missing": ("plstm_coupled", _set(p=None), r"p is required for this cell"),
    "p-length": ("plstm_coupled", _set(p=lambda v: v[:-1]), r"p must be \[4\]"),
    "p-dtype": ("plstm_coupled", _set(p=lambda v: v.float()), r"p has dtype Float"),
    "dt-transposed": ("plstm_coupled", _set(dt=lambda v: v.t()), r"dt must be \[3, 2\], got \[2, 3\]"),
    "dt-3d": ("plstm_coupled", _set(dt=lambda v: v[..., None]), r"dt must have 2 dimensions"),
    "dt-dtype": ("plstm_separate", _set(dt=lambda v: v.float()), r"dt has dtype Float"),
    "gates-coupled-as-separate": ("plstm_coupled", _set(cell="plstm_separate"), r"w_hh must be \[16, 4\]"),
}


@needs_native
@pytest.mark.parametrize("case", FORWARD_OP_CASES)
def test_recurrence_forward_op_errors(case):
    cell, mutate, match = FORWARD_OP_CASES[case]
    args = op_args(cell)
    forward(args)  # valid as built
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        forward(mutate(args))


BACKWARD_OP_CASES = {
    "unknown-cell": ("lstm", _set(cell="gru"), r"unknown cell 'gru'"),
    "saved-without-save": ("lstm", None, r"saved must be \[T, B, 16\], got \[0\] \(was the forward run with save=false\?\)"),
    "saved-shape": ("plstm_coupled", _set(saved=lambda v: v[:-1]), r"saved must be"),
    "h_all-2d": ("lstm", _set(h_all=lambda v: v[0]), r"h_all must be \[T, B, H\]"),
    "h_all-empty": ("lstm", _set(h_all=lambda v: v[:0]), r"empty input"),
    "state_all-shape": ("lstm", _set(state_all=lambda v: v[:-1]), r"state_all must be \[T, S, B, H\]"),
    "state_all-dtype": ("lstm", _set(state_all=lambda v: v.float()), r"state_all has dtype Float"),
    "grad_h-shape": ("lstm", _set(grad_h=lambda v: v[:-1]), r"grad_h must be \[3, 2, 4\], got \[2, 2, 4\]"),
    "grad_h-dtype": ("lstm", _set(grad_h=lambda v: v.float()), r"grad_h has dtype Float"),
    "grad_state_n-shape": ("plstm_coupled", _set(grad_state_n=lambda v: v[:, :1]),
                           r"grad_state_n must be \[2, 2, 4\], got \[2, 1, 4\]"),
    "grad_state_n-every-step": ("plstm_coupled", _set(grad_state_n=lambda v: v.expand(OT, *v.shape)),
                                r"grad_state_n must have 3 dimensions"),
    "w_hh-dtype": ("lstm", _set(w_hh=lambda v: v.float()), r"w_hh has dtype Float"),
    "p-missing": ("plstm_separate", _set(p=None), r"p is required for this cell"),
    "dt-shape": ("plstm_separate", _set(dt=lambda v: v[:-1]), r"dt must be \[3, 2\]"),
    "half": ("lstm", lambda a: _all_float(a, torch.float16), r"the CPU kernels take float32 or float64, got Half"),
}


@needs_native
@pytest.mark.parametrize("case", BACKWARD_OP_CASES)
def test_recurrence_backward_op_errors(case):
    cell, mutate, match = BACKWARD_OP_CASES[case]
    if mutate is None:  # the forward ran with save=False
        args = backward_args(cell, save=False)
    else:
        args = backward_args(cell)
        backward(args)  # valid as built
        args = mutate(args)
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        backward(args)


@needs_native
def test_backward_through_autograd_after_save_false():
    args = op_args("plstm_coupled")
    args["save"] = False
    args["xg"].requires_grad_(True)
    h_all, _, _, saved = forward(args)
    assert saved.numel() == 0
    with pytest.raises(RuntimeError, match=r"tsrnn: saved must be .*save=false"):
        h_all.sum().backward()


@needs_native
def test_recurrence_backward_saved_dtype():
    args = backward_args("lstm")
    args["saved"] = args["saved"].float()
    with pytest.raises(RuntimeError, match=r"^tsrnn: saved"):
        backward(args)


SCAN_OP_CASES = {
    # id: (mutate (a, u, x0) -> (a, u, x0), match after "tsrnn: linear_scan ")
    "u-3d": (lambda a, u, x0: (a[None], u[None], x0), r"u must be \[T, N\]"),
    "u-1d": (lambda a, u, x0: (a[:, 0], u[:, 0], x0), r"u must be \[T, N\]"),
    "a-shape": (lambda a, u, x0: (a[:, :1], u, x0), r"a must match u"),
    "x0-shape": (lambda a, u, x0: (a, u, x0[:-1]), r"x0 must be \[5\], got \[4\]"),
    "x0-2d": (lambda a, u, x0: (a, u, x0[None]), r"x0 must be \[5\]"),
    "a-dtype": (lambda a, u, x0: (a.float(), u, x0), r"dtypes differ"),
    "x0-dtype": (lambda a, u, x0: (a, u, x0.float()), r"dtypes differ"),
    "int": (lambda a, u, x0: (a.long(), u.long(), x0.long()), r"takes float32 or float64, got Long"),
    "half": (lambda a, u, x0: (a.half(), u.half(), x0.half()), r"takes float32 or float64, got Half"),
}


def scan_args():
    g = torch.Generator().manual_seed(0)
    return (torch.rand(OT, 5, generator=g, dtype=F64), torch.randn(OT, 5, generator=g, dtype=F64),
            torch.randn(5, generator=g, dtype=F64))


@needs_native
@pytest.mark.parametrize("case", SCAN_OP_CASES)
def test_linear_scan_op_errors(case):
    mutate, match = SCAN_OP_CASES[case]
    a, u, x0 = scan_args()
    x = torch.ops.tsrnn.linear_scan_forward(a, u, x0)
    torch.ops.tsrnn.linear_scan_backward(torch.ones_like(x), a, x, x0)  # valid as built
    with pytest.raises(RuntimeError, match=r"^tsrnn: linear_scan " + match):
        torch.ops.tsrnn.linear_scan_forward(*mutate(a, u, x0))
    with pytest.raises(RuntimeError, match=r"^tsrnn: linear_scan " + match):
        torch.ops.tsrnn.linear_scan_backward(torch.ones_like(x), *mutate(a, x, x0))


@needs_native
@pytest.mark.parametrize("bad", ["shape", "dtype"])
def test_linear_scan_backward_grad_mismatch(bad):
    a, u, x0 = scan_args()
    x = torch.ops.tsrnn.linear_scan_forward(a, u, x0)
    grad = torch.ones_like(x)[:-1] if bad == "shape" else torch.ones_like(x, dtype=torch.float32)
    with pytest.raises(RuntimeError, match=r"^tsrnn: linear_scan grad_x must match x"):
        torch.ops.tsrnn.linear_scan_backward(grad, a, x, x0)


def outcome_in_child(fn, timeout=60.0):
    """Run fn() in a forked child (no new interpreter, so no second torch import) and return
    ("returned", text) / ("raised", "Type: message") / ("died", "signal N") / ("timeout", "")."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        try:
            faulthandler.disable()  # a crash is the expected outcome here, not worth a dump
            os.close(read_end)
            try:
                text = "returned\0" + str(fn())
            except BaseException as exc:  # noqa: BLE001
                text = f"raised\0{type(exc).__name__}: {exc}"
            os.write(write_end, text.encode()[:4000])
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            return "timeout", ""
        time.sleep(0.005)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read().decode()
    if os.WIFSIGNALED(status):
        return "died", f"signal {os.WTERMSIG(status)}"
    kind, _, text = data.partition("\0")
    return (kind or "died"), text


def _scan_zero_steps_backward():
    # N below the kernel's grain: the child runs no OpenMP region (safe after fork).
    n = 8
    a = torch.rand(0, n, dtype=F64, requires_grad=True)
    u = torch.randn(0, n, dtype=F64, requires_grad=True)
    x0 = torch.randn(n, dtype=F64, requires_grad=True)
    x = torch.ops.tsrnn.linear_scan_forward(a, u, x0)
    x.sum().backward()
    return "zero grad" if bool((x0.grad == 0).all()) else f"grad_x0 = {x0.grad.tolist()}"


@needs_native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_linear_scan_op_zero_steps_does_not_crash():
    kind, text = outcome_in_child(_scan_zero_steps_backward)
    assert kind != "died" and kind != "timeout", f"the process {kind}: {text}"
    # Either the op refuses T=0, or the gradient of x0 through zero steps is zero.
    assert (kind == "raised" and text.startswith("RuntimeError: tsrnn:")) or text == "zero grad", (kind, text)


@needs_native
@pytest.mark.parametrize("op", ["linear_scan_forward", "recurrence_forward"])
def test_op_device_mismatch_raises(op):
    if op == "linear_scan_forward":
        a, u, x0 = scan_args()
        call = lambda: torch.ops.tsrnn.linear_scan_forward(a.to("meta"), u, x0)  # noqa: E731
    else:
        args = op_args("lstm")
        args["w_hh"] = args["w_hh"].to("meta")
        call = lambda: forward(args)  # noqa: E731
    with pytest.raises(RuntimeError):
        call()
