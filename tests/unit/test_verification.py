""""auto" verifies before it trusts (tsrnn.backend, tsrnn.backend.verification): each candidate's outputs
and gradients on the call's own inputs against the trusted path in float64, once per call key; a
path that disagrees is never used. Wrong paths are planted by wrapping the cpu path's runner."""
import dataclasses
import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend, functional, testing
from tsrnn.testing import TOLERANCE, _error
from tsrnn.backend import cache, timing, trust
from conftest import cast, forget_verdicts, needs_native, wrap_layer_runs

pytestmark = [needs_native,  # the planted wrong path is the compiled cpu path
              pytest.mark.usefixtures("clean_backend_state")]


class ScaledGradient(torch.autograd.Function):
    """The identity forward, a gradient scaled by ``scale`` backward."""

    @staticmethod
    def forward(ctx, t, scale):
        ctx.scale = scale
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


@pytest.fixture
def runs(monkeypatch):
    """Records every layer run as (path, dtype of x); ``runs.plant(shift, grad_scale)`` makes the
    cpu path wrong: out + shift, and/or the gradient reaching out scaled."""
    class Runs(list):
        def plant(self, shift=0.0, grad_scale=1.0):
            wrong.update(shift=shift, grad_scale=grad_scale)

    record, wrong = Runs(), {"shift": 0.0, "grad_scale": 1.0}

    def wrap(runner):
        def spy(path, layer, inputs, traces):
            record.append((path.name, inputs.x.dtype))
            out, finals, traces = runner(path, layer, inputs, traces)
            if path.name == "cpu":
                out = ScaledGradient.apply(out, wrong["grad_scale"]) + wrong["shift"]
            return out, finals, traces
        return spy

    wrap_layer_runs(monkeypatch, wrap)
    return record


def recorded(fn):
    """Run fn with every warning recorded; returns (result, the RuntimeWarnings' messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def inputs(cell, shape=(5, 2, 3, 4), dtype=torch.float32, grad=True, dt=False, seed=0):
    """A layer's arguments in ``dtype`` (dt float64 data) and the float64 reference's result on
    the same values."""
    args = testing.layer_args(cell, *shape, seed=seed, dt=dt)
    ours = cast(args, dtype, requires_grad=grad)
    expected = testing.reference_layer(cell, cast(ours, torch.float64))
    return ours, expected


def run_auto(cell, args, **kw):
    return testing.run_layer(cell, {**args, **kw}, "auto")


def error_of(result, expected, dtype=torch.float32):
    """The worst (error, bound) of out and the final states against the reference's."""
    (out, state), (out_r, state_r) = result, expected
    return max((_error(a, b, TOLERANCE[dtype]) for a, b in zip((out, *state), (out_r, *state_r))),
               key=lambda e: e[0] / e[1])


def test_a_wrong_path_is_never_returned(runs, monkeypatch):
    """(a) The pLSTM on CPU has one candidate, cpu: verified all the same. Wrong, it is dropped
    with one warning naming it and the output, and auto runs the trusted reference loops."""
    runs.plant(shift=1e-3)
    args, expected = inputs("plstm_coupled")
    result, messages = recorded(lambda: run_auto("plstm_coupled", args))
    err, bound = error_of(result, expected)
    assert err <= bound
    assert len(messages) == 2, messages
    assert "the cpu path disagrees with reference" in messages[0] and "out: max error 0.001 > bound" in messages[0]
    assert "using reference" in messages[1]
    assert recorded(lambda: run_auto("plstm_coupled", args))[1] == []  # warned once
    monkeypatch.setenv("TSRNN_VERIFY", "0")
    backend.forget()  # the variable reaches keys seen before
    err, bound = error_of(run_auto("plstm_coupled", args), expected)
    assert err > bound  # unverified, the wrong path is used: the planted error is real


def test_a_path_wrong_only_in_its_gradient_is_dropped_when_gradients_are_needed(runs):
    """(b) The forward is right: a call without gradients keeps the path, one with them drops it."""
    runs.plant(grad_scale=1.01)
    args, _ = inputs("plstm_separate", grad=False)
    assert recorded(lambda: run_auto("plstm_separate", args))[1] == []
    assert runs[-1] == ("cpu", torch.float32)  # verified, then used
    args, _ = inputs("plstm_separate", grad=True)
    _, messages = recorded(lambda: run_auto("plstm_separate", args))
    assert len(messages) == 2 and "cpu path disagrees" in messages[0] and ": grad " in messages[0], messages
    runs.clear()
    run_auto("plstm_separate", args)
    assert runs == [("reference", torch.float32)]


def test_a_wrong_lstm_path_is_not_used_even_if_fastest(runs, monkeypatch):
    """(c) The LSTM on CPU: cpu is verified against onednn in float64; timing would pick cpu, but
    a wrong cpu never reaches the timing, and auto returns onednn's result."""
    timed = []
    monkeypatch.setattr(timing, "fastest", lambda paths, call, run: timed.append(paths) or paths[-1])
    runs.plant(shift=1e-3)
    args, expected = inputs("lstm")
    (out, state), messages = recorded(lambda: run_auto("lstm", args))
    assert len(messages) == 1 and "the cpu path disagrees with onednn" in messages[0]
    assert timed == []  # only onednn is left: nothing to time
    want, want_state = testing.run_layer("lstm", args, "onednn")
    assert torch.equal(out, want) and all(torch.equal(a, b) for a, b in zip(state, want_state))
    monkeypatch.setenv("TSRNN_VERIFY", "0")
    backend.forget()  # the variable reaches keys seen before
    err, bound = error_of(run_auto("lstm", args), expected)
    assert timed == [["onednn", "cpu"]] and err > bound  # unverified, the timed-fastest wrong path runs


def test_verified_once_per_regime(runs):
    """(d) The trusted float64 run and the candidate's extra run happen at the first call of a
    regime only (the cpu path has one): other sizes are not verified again, other gradients,
    cells or dtypes are."""
    args, _ = inputs("plstm_coupled")
    for _ in range(3):
        run_auto("plstm_coupled", args)
    assert runs.count(("reference", torch.float64)) == 1
    assert runs.count(("cpu", torch.float32)) == 1 + 3  # verified once, then the three calls
    for shape in ((9, 2, 3, 4), (5, 3, 3, 4), (5, 2, 6, 8)):  # other sizes: the same regime
        run_auto("plstm_coupled", inputs("plstm_coupled", shape=shape)[0])
    assert runs.count(("reference", torch.float64)) == 1
    with torch.no_grad():  # inference: another regime
        run_auto("plstm_coupled", args)
    assert runs.count(("reference", torch.float64)) == 2
    run_auto("plstm_coupled", inputs("plstm_coupled", dtype=torch.float64)[0])
    assert runs.count(("reference", torch.float64)) == 3  # another dtype: another regime
    lstm_args, _ = inputs("lstm")
    for _ in range(3):
        run_auto("lstm", lstm_args)
    assert runs.count(("onednn", torch.float64)) == 1


def test_verify_always_verifies_every_shape(runs, monkeypatch):
    """TSRNN_VERIFY=always verifies each new shape, even of a known regime, and writes nothing to
    the disk cache; a planted error at the second shape is caught there."""
    monkeypatch.setenv("TSRNN_VERIFY", "always")
    run_auto("plstm_coupled", inputs("plstm_coupled")[0])
    run_auto("plstm_coupled", inputs("plstm_coupled", shape=(5, 3, 3, 4))[0])
    assert runs.count(("reference", torch.float64)) == 2
    runs.plant(shift=1e-3)
    _, messages = recorded(lambda: run_auto("plstm_coupled", inputs("plstm_coupled", shape=(9, 2, 3, 4))[0]))
    assert "the cpu path disagrees" in messages[0]
    assert list(cache.directory().iterdir()) == []


CASES = [("lstm", False, False), ("lstm", False, True), ("plstm_coupled", False, False),
         ("plstm_coupled", True, False), ("plstm_separate", False, False), ("plstm_separate", True, False)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("cell, dt, forget", CASES, ids=lambda v: str(v))
def test_a_correct_path_passes_verification(monkeypatch, cell, dt, forget, dtype):
    """(e) The cpu path, right, passes at every test shape and dtype, with and without dt (the
    LSTM also with forget gates, verified against the reference loops instead of onednn)."""
    monkeypatch.setenv("TSRNN_AUTOTUNE", "0")  # verification only
    monkeypatch.setenv("TSRNN_VERIFY", "always")  # at every shape
    extra = {"return_forget": True} if forget else {}
    for shape in testing.SHAPES:
        args, _ = inputs(cell, shape, dtype, dt=dt, seed=shape[0] * 31 + shape[3])
        _, messages = recorded(lambda: run_auto(cell, args, **extra))
        assert messages == [], (shape, messages)
    assert len(trust._verdicts) == len(testing.SHAPES) and set(trust._verdicts.values()) == {None}


def frequency_task_like(grad):
    """float32 pLSTM arguments of the frequency task's kind (ε = 1e-5, exponential sample gaps, the
    sample time as x's second input) that ask more of float32 than its row: the float32 reference
    loops are 1.1e-4 from float64, three times the row. And float64 reference's result."""
    args = testing.layer_args("plstm_coupled", 40, 4, 2, 8, seed=9, dt=True)
    g = torch.Generator().manual_seed(9)
    args["dt"] = -torch.rand(40, 4, generator=g, dtype=torch.float64).log() + 1e-3
    args["x"][..., 1] = args["dt"].cumsum(0)
    ours = cast({**args, "eps": 1e-5}, torch.float32, requires_grad=grad)
    return ours, testing.reference_layer("plstm_coupled", cast(ours, torch.float64))


@pytest.mark.parametrize("grad", [False, True])
def test_the_trusted_paths_own_error_in_the_calls_dtype_is_allowed(runs, grad):
    """Where the trusted path in the call's dtype is beyond the row, a path as close as SLACK times
    its error is kept (the cpu path is 1e-7 from it), a path further away still dropped."""
    args, expected = frequency_task_like(grad)
    err, bound = error_of(testing.run_layer("plstm_coupled", args, "reference"), expected)
    assert err > bound  # the premise: float32 itself is beyond the float32 row here
    assert recorded(lambda: run_auto("plstm_coupled", args))[1] == []
    assert set(trust._verdicts.values()) == {None}
    forget_verdicts()
    backend.forget()
    runs.plant(shift=10 * err)
    _, messages = recorded(lambda: run_auto("plstm_coupled", args))
    assert "the cpu path disagrees" in messages[0]


def test_nan_where_the_trusted_path_has_nan_agrees(runs):
    """A NaN in x (a diverged model) gives NaN where the trusted path has NaN too: that agrees,
    and the finite values are still compared."""
    def with_nan(shape):
        args, _ = inputs("plstm_coupled", shape)
        x = args["x"].detach().clone()
        x[2, 1, 0] = float("nan")
        return {**args, "x": x.requires_grad_()}

    (out, _), messages = recorded(lambda: run_auto("plstm_coupled", with_nan((5, 2, 3, 4))))
    assert messages == [] and set(trust._verdicts.values()) == {None}
    assert out[2:, 1].isnan().all() and not out[:, 0].isnan().any()
    forget_verdicts()
    runs.plant(shift=1e-3)
    _, messages = recorded(lambda: run_auto("plstm_coupled", with_nan((5, 3, 3, 4))))
    assert "cpu path disagrees" in messages[0] and "out: max error 0.001" in messages[0]


def test_only_auto_verifies_and_only_where_it_can_measure(runs, monkeypatch):
    """A named path or family ("native", also through TSRNN_BACKEND) is not verified; where
    nothing can be measured (tracing, capture) the decided choice is used, else the first."""
    runs.plant(shift=1e-3)
    args, expected = inputs("plstm_coupled")
    assert error_of(testing.run_layer("plstm_coupled", args, "native"), expected)[0] > 1e-4
    monkeypatch.setenv("TSRNN_BACKEND", "native")
    backend.forget()  # the variable reaches keys seen before
    assert error_of(run_auto("plstm_coupled", args), expected)[0] > 1e-4
    monkeypatch.delenv("TSRNN_BACKEND")
    backend.forget()  # the variable reaches keys seen before
    assert ("reference", torch.float64) not in runs
    measurable = timing.can_measure
    monkeypatch.setattr(timing, "can_measure", lambda device, paths: False)
    assert error_of(run_auto("plstm_coupled", args), expected)[0] > 1e-4  # not verified yet: the first candidate
    assert ("reference", torch.float64) not in runs
    monkeypatch.setattr(timing, "can_measure", measurable)
    assert "cpu path disagrees" in recorded(lambda: run_auto("plstm_coupled", args))[1][0]  # verified: dropped
    monkeypatch.setattr(timing, "can_measure", lambda device, paths: False)
    runs.clear()
    err, bound = error_of(run_auto("plstm_coupled", args), expected)
    assert err <= bound and runs == [("reference", torch.float32)]  # the decided choice


def test_invalid_verify_value_is_a_clear_error(monkeypatch):
    """(f) TSRNN_VERIFY is "0", "1" or "always", empty meaning unset; read by "auto" at call time,
    like TSRNN_BACKEND."""
    model = tsrnn.PowerLawLSTM(3, 4)
    for bad in ("2", "true", "Always"):
        monkeypatch.setenv("TSRNN_VERIFY", bad)
        backend.forget()  # the variable reaches keys seen before
        with pytest.raises(ValueError) as error:
            model(torch.randn(5, 2, 3))
        assert str(error.value) == (f"the environment variable TSRNN_VERIFY must be one of ['0', '1', 'always'], "
                                    f"got {bad!r} (unset or empty: '1')")
    monkeypatch.setenv("TSRNN_VERIFY", "")
    backend.forget()
    model(torch.randn(5, 2, 3))
    model.backend = "cpu"  # a named path reads no variable
    model(torch.randn(5, 2, 3))


def test_the_trusted_path_is_torch_lstm_where_it_serves_else_the_reference():
    call = backend.Call("recurrence", torch.device("cpu"), torch.float32, (5, 2, 3, 4), "lstm")
    assert backend.trusted_path(call) == "onednn"
    assert backend.trusted_path(dataclasses.replace(call, traces=True)) == "reference"
    assert backend.trusted_path(dataclasses.replace(call, cell="plstm_coupled")) == "reference"


def test_verdicts_are_recorded(monkeypatch):
    """What bench/gpu_report.py records: each verified (key, path) with "agrees" or the reason."""
    monkeypatch.setattr(trust, "_verdicts", {})
    functional.plstm(**{k: v.float() if isinstance(v, torch.Tensor) and k != "dt" else v
                        for k, v in testing.layer_args("plstm_coupled", 3, 2, 4, 5).items()})
    ((key, verdict),) = backend.verdicts().items()
    assert "'cpu'" in key and verdict == "agrees"


@pytest.mark.parametrize("products", ["ieee", "tf32"])
def test_the_row_is_that_of_the_calls_products(runs, monkeypatch, products):
    """Verification reads the call's precision (tsrnn.precision.products: "tf32" on CUDA where
    torch.backends.cudnn.allow_tf32 allows it) once and judges with its row (tolerance.rows): an
    error of 1e-3 is TF32's rounding, not float32's; 5e-2 is neither's."""
    from tsrnn import precision

    monkeypatch.setattr(precision, "products", lambda dtype, device: products)
    args, _ = inputs("plstm_coupled")
    runs.plant(shift=1e-3)
    _, messages = recorded(lambda: run_auto("plstm_coupled", args))
    assert (messages == []) == (products == "tf32"), messages
    forget_verdicts()
    backend.forget()
    runs.plant(shift=5e-2)
    _, messages = recorded(lambda: run_auto("plstm_coupled", args))
    assert "the cpu path disagrees" in messages[0]
