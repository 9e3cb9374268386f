"""The dispatcher (tsrnn.backend): requested backends and named paths, the TSRNN_BACKEND variable,
the fallback to the reference loops with one warning when the compiled extension is missing,
devices without a kernel, value checks without host syncs, and the measured choice among paths."""
import dataclasses
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend, functional, reference, testing
from tsrnn.ops.linear_scan import reference as scan_reference
from tsrnn.ops.recurrence import cells
from tsrnn.ops.recurrence import reference as recurrence_reference
from tsrnn.ops.recurrence import tensor_core_plans
from tsrnn.testing import TOLERANCE
from tsrnn.backend import cache, choice, registry, timing
from conftest import assert_close, cast, needs_native

CPU = torch.device("cpu")
META = torch.device("meta")
FAKE_CAUSE = "ImportError: libfake.so: undefined symbol _ZN5tsrnn4fakeE"
pytestmark = pytest.mark.usefixtures("clean_backend_state")


@pytest.fixture
def spies(monkeypatch):
    """Counts the reference loops' layers (by cell: "lstm", "plstm" for both pLSTM cells) and
    linear scans run through tsrnn.functional and the modules."""
    calls = {"lstm": 0, "plstm": 0, "linear_scan": 0}
    layer, scan = recurrence_reference.layer, scan_reference.linear_scan

    def layer_spy(cell, *args, **kwargs):
        calls[cell.name.split("_")[0]] += 1
        return layer(cell, *args, **kwargs)

    def scan_spy(*args, **kwargs):
        calls["linear_scan"] += 1
        return scan(*args, **kwargs)

    monkeypatch.setattr(recurrence_reference, "layer", layer_spy)
    monkeypatch.setattr(scan_reference, "linear_scan", scan_spy)
    return calls


@pytest.fixture
def missing_extension(monkeypatch):
    """Pretend tsrnn._C failed to load with FAKE_CAUSE."""
    monkeypatch.setattr(registry, "LOAD_ERROR", FAKE_CAUSE)


def recorded(fn):
    """Run fn with every warning recorded (none hidden by the default once-per-location rule)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def models():
    torch.manual_seed(0)
    return tsrnn.LSTM(3, 4, num_layers=2), tsrnn.PowerLawLSTM(3, 4, num_layers=2, input_gate="separate")


# --------------------------------------------------------------------------------------------
# TSRNN_BACKEND and requested backends
# --------------------------------------------------------------------------------------------
def lstm_call(device=CPU, forget=False, grad=False, H=4, dtype=torch.float32, cell="lstm", T=5):
    return backend.Call("recurrence", device, dtype, (T, 2, 3, H), cell, True, grad, forget)


SCAN = backend.Call("linear_scan", CPU, torch.float32, (5, 2))


@needs_native
def test_auto_on_cpu_offers_onednn_and_the_compiled_kernel():
    assert backend.candidates("auto", lstm_call()) == ["onednn", "cpu"]
    assert backend.candidates("auto", lstm_call(cell="plstm_coupled")) == ["cpu"]  # torch has no pLSTM
    assert backend.candidates("auto", lstm_call(forget=True)) == ["cpu"]  # oneDNN returns no forget gates
    assert backend.candidates("auto", SCAN) == ["cpu"]


def test_env_reference_forces_reference(monkeypatch):
    monkeypatch.setenv("TSRNN_BACKEND", "reference")
    backend.forget()  # the variable reaches keys seen before
    assert backend.choose("auto", lstm_call()) == "reference"


@needs_native
def test_env_native_selects_the_compiled_kernel(monkeypatch):
    monkeypatch.setenv("TSRNN_BACKEND", "native")
    backend.forget()  # the variable reaches keys seen before
    assert backend.choose("auto", lstm_call()) == "cpu"


@needs_native
@pytest.mark.parametrize("env, explicit, path", [("reference", "native", "cpu"), ("native", "reference", "reference"),
                                                 ("native", "onednn", "onednn")])
def test_explicit_backend_beats_the_variable(monkeypatch, env, explicit, path):
    monkeypatch.setenv("TSRNN_BACKEND", env)
    backend.forget()  # the variable reaches keys seen before
    assert backend.choose(explicit, lstm_call()) == path


@pytest.mark.parametrize("env", ["reference", pytest.param(None, marks=needs_native)])
def test_env_reference_runs_the_reference_loops(monkeypatch, spies, env):
    """The variable is read at call time, by modules and functional alike."""
    if env is not None:
        monkeypatch.setenv("TSRNN_BACKEND", env)
        backend.forget()  # the variable reaches keys seen before
    lstm, plstm = models()
    x = torch.randn(5, 2, 3)
    lstm(x)
    plstm(x)
    functional.linear_scan(torch.rand(5, 2), torch.randn(5, 2))
    if env == "reference":  # one call per layer on the reference path
        assert spies == {"lstm": 2, "plstm": 2, "linear_scan": 1}
    else:  # auto: the pLSTM's cpu path is verified against the reference in float64, once for both
        assert spies == {"lstm": 0, "plstm": 1, "linear_scan": 0}  # layers (one regime; I differs)


@pytest.mark.parametrize("name", ["TSRNN_AUTOTUNE", pytest.param("TSRNN_CPU_PROFILE", marks=needs_native)])
def test_a_switch_takes_0_or_1_only(monkeypatch, name):
    """Every on/off variable is "0" or "1", empty meaning unset: anything else is a one-line
    ValueError naming it, the value and the accepted values, on the first call that reads it."""
    model = tsrnn.PowerLawLSTM(3, 4)  # one candidate on CPU: "auto" still reads every switch
    x = torch.randn(5, 2, 3)
    for bad in ("maybe", "true", "yes", " 1"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError) as error:
            model(x)
        assert str(error.value) == (f"the environment variable {name} must be one of ['0', '1'], "
                                    f"got {bad!r} (unset or empty: {'0' if name == 'TSRNN_CPU_PROFILE' else '1'!r})")
    for good in ("0", ""):  # not "1": TSRNN_CPU_PROFILE=1 would turn the loops' clock on for this process
        monkeypatch.setenv(name, good)
        model(x)


def test_an_empty_backend_variable_is_unset(monkeypatch):
    monkeypatch.setenv("TSRNN_BACKEND", "")
    backend.forget()  # the variable reaches keys seen before
    assert choice._effective("auto") == "auto"


@pytest.mark.parametrize("value", ["cuda-magic", "fast", "onednn"])
def test_invalid_env_value_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("TSRNN_BACKEND", value)
    backend.forget()  # the variable reaches keys seen before
    with pytest.raises(ValueError, match=rf"TSRNN_BACKEND must be one of .*got '{value}'"):
        backend.choose("auto", lstm_call())
    lstm, _ = models()  # constructing reads no environment ...
    with pytest.raises(ValueError, match=r"TSRNN_BACKEND"):  # ... the forward does
        lstm(torch.randn(5, 2, 3))
    with pytest.raises(ValueError, match=r"TSRNN_BACKEND"):
        functional.linear_scan(torch.rand(5, 2), torch.randn(5, 2))
    # An explicit backend does not consult the variable.
    assert backend.choose("reference", lstm_call()) == "reference"


def test_invalid_backend_argument():
    with pytest.raises(ValueError, match=r"backend must be one of \['auto', 'reference', 'native', 'triton', 'cpu'"):
        backend.choose("cuda-magic", lstm_call())
    with pytest.raises(ValueError, match=r"backend must be one of"):
        tsrnn.LSTM(3, 4, backend="fastest")


def test_a_path_that_cannot_serve_the_call_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"backend='onednn' cannot run this call: .*LSTM cell only"):
        backend.choose("onednn", lstm_call(cell="plstm_separate"))
    with pytest.raises(ValueError, match=r"backend='onednn' cannot run this call: .*no forget-gate traces"):
        tsrnn.LSTM(3, 4, backend="onednn").forget_gates(torch.randn(5, 2, 3))
    with pytest.raises(ValueError, match=r"backend='cuda_grid' cannot run this call: it runs on CUDA tensors"):
        backend.choose("cuda_grid", lstm_call())


@needs_native
def test_modules_run_a_named_path():
    torch.manual_seed(0)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    outs = {}
    for path in ("reference", "cpu", "onednn"):
        torch.manual_seed(1)
        outs[path] = tsrnn.LSTM(3, 4, backend=path, dtype=torch.float64)(x)[0]
    assert_close(outs["cpu"], outs["reference"], TOLERANCE["float64 reordered"], "cpu")
    assert_close(outs["onednn"], outs["reference"], TOLERANCE["float64 reordered"], "onednn")


# --------------------------------------------------------------------------------------------
# Missing extension: "auto" falls back with one warning, "native" raises
# --------------------------------------------------------------------------------------------
def test_missing_extension_auto_falls_back_with_one_warning(missing_extension, spies):
    """The LSTM still runs on oneDNN (no extension needed); the pLSTM and the scan fall back to
    the reference loops, with one warning naming the cause."""
    assert not backend.native_available()
    lstm, plstm = models()
    x = torch.randn(5, 2, 3)
    a, u = torch.rand(5, 2), torch.randn(5, 2)

    def run_all():
        return [lstm(x), plstm(x), functional.linear_scan(a, u), lstm(x), plstm(x)]

    results, caught = recorded(run_all)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "tsrnn._C" in message and FAKE_CAUSE in message and "reference" in message
    assert spies == {"lstm": 0, "plstm": 4, "linear_scan": 1}
    # The results are the reference results.
    for m in (lstm, plstm):
        m.backend = "reference"
    expected, none = recorded(lambda: [lstm(x), plstm(x), reference.linear_scan(a, u)])
    assert none == []  # backend="reference" never warns
    for got, want in zip(results, expected):
        got, want = flatten(got), flatten(want)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, TOLERANCE["float32 same inputs"])
    # Later "auto" calls stay quiet.
    plstm.backend = "auto"
    assert recorded(lambda: plstm(x))[1] == []


def flatten(result):
    """(out, (h, c, ...)) or a tensor -> a flat list of tensors."""
    return [result] if isinstance(result, torch.Tensor) else [result[0], *result[1]]


def test_missing_extension_warning_points_at_the_cause_once_per_cause(missing_extension, monkeypatch):
    result, caught = recorded(lambda: [backend.choose("auto", SCAN) for _ in range(3)])
    assert result == ["reference"] * 3
    assert len(caught) == 1
    monkeypatch.setattr(registry, "LOAD_ERROR", "OSError: another cause")
    _, caught = recorded(lambda: backend.choose("auto", SCAN))
    assert len(caught) == 1 and "another cause" in str(caught[0].message)


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_missing_extension_native_raises(missing_extension, monkeypatch, how):
    kw = {}
    if how == "argument":
        kw["backend"] = "native"
    else:
        monkeypatch.setenv("TSRNN_BACKEND", "native")
        backend.forget()  # the variable reaches keys seen before
    lstm = tsrnn.LSTM(3, 4, **kw)
    pattern = r"tsrnn\._C.*" + FAKE_CAUSE.replace(".", r"\.")
    with pytest.raises(RuntimeError, match=pattern):
        backend.choose(kw.get("backend", "auto"), lstm_call())
    with pytest.raises(RuntimeError, match=pattern):
        lstm(torch.randn(5, 2, 3))
    with pytest.raises(RuntimeError, match=pattern):
        functional.linear_scan(torch.rand(5, 2), torch.randn(5, 2), **kw)


def test_package_imports_and_runs_without_the_extension(tmp_path):
    """A real interpreter in which `import tsrnn._C` fails, as for a broken or missing build."""
    code = textwrap.dedent("""
        import importlib.abc, sys, warnings

        class BlockExtension(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "tsrnn._C":
                    raise ImportError("simulated: tsrnn/_C.so: undefined symbol _ZN3c10fake")
                return None

        sys.meta_path.insert(0, BlockExtension())
        warnings.simplefilter("always")  # a second warning must not be hidden by Python's dedup
        import torch
        import tsrnn
        assert not tsrnn.backend.native_available(), tsrnn.backend.LOAD_ERROR
        for _ in range(3):
            out, (h, c) = tsrnn.LSTM(3, 4)(torch.randn(2, 1, 3))
            assert out.shape == (2, 1, 4) and torch.isfinite(out).all()
            out, state = tsrnn.PowerLawLSTM(3, 4)(torch.randn(2, 1, 3))
            assert out.shape == (2, 1, 4)
        assert tsrnn.functional.linear_scan(torch.ones(3, 2), torch.ones(3, 2))[-1].tolist() == [3.0, 3.0]
        try:
            tsrnn.LSTM(3, 4, backend="native")(torch.randn(2, 1, 3))
        except RuntimeError as exc:
            print("NATIVE-RAISED:", exc)
        print("native_available:", tsrnn.backend.native_available())
    """)
    env = {k: v for k, v in os.environ.items() if k != "TSRNN_BACKEND"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "native_available: False" in run.stdout
    assert "NATIVE-RAISED:" in run.stdout and "simulated" in run.stdout
    warning_lines = [line for line in run.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warning_lines) == 1, run.stderr
    assert "tsrnn._C" in warning_lines[0] and "simulated" in warning_lines[0]


# --------------------------------------------------------------------------------------------
# Devices without a kernel
# --------------------------------------------------------------------------------------------
def test_native_on_a_device_without_kernel_raises():
    with pytest.raises(RuntimeError, match=r"backend='native' has no kernel for meta tensors"):
        backend.choose("native", lstm_call(META))


@needs_native
def test_native_refusing_a_call_says_why_not_that_the_extension_did_not_load():
    """tsrnn._C loaded, but its kernel has no projection: the refusal gives the path's own reason."""
    with pytest.raises(ValueError) as refused:
        tsrnn.LSTM(3, 4, proj_size=2, backend="native")(torch.randn(5, 2, 3))
    message = str(refused.value)
    assert message.startswith("backend='native' cannot run this call: cpu: ") and "proj_size" in message, message
    assert "did not load" not in message and "None" not in message, message


@needs_native
def test_auto_falling_back_to_the_reference_on_cpu_says_why():
    """A projected LSTM asked for its forget-gate traces: torch's kernel returns no traces and
    tsrnn's has no projection, so "auto" falls back to the reference loop, naming both reasons."""
    call = dataclasses.replace(lstm_call(forget=True), projected=True)
    result, caught = recorded(lambda: backend.candidates("auto", call))
    assert result == ["reference"]
    assert len(caught) == 1, caught
    message = str(caught[0].message)
    assert "onednn: torch's LSTM kernel returns no forget-gate traces" in message and "cpu: its kernels" in message
    assert "did not load" not in message, message


def test_auto_on_a_device_without_kernel_warns_once():
    result, caught = recorded(lambda: [backend.choose("auto", lstm_call(META)) for _ in range(3)])
    assert result == ["reference"] * 3
    assert len(caught) == 1 and "meta" in str(caught[0].message)
    # "reference" is a choice, not a fallback: no warning.
    assert recorded(lambda: backend.choose("reference", lstm_call(META))) == ("reference", [])


def test_functional_on_meta_tensors_uses_the_reference_path(monkeypatch):
    # A stub instead of the real reference loop: running ops on meta tensors costs a second.
    out, h_n, c_n = torch.empty(5, 2, 4, device=META), torch.empty(2, 4, device=META), torch.empty(2, 4, device=META)
    monkeypatch.setattr(recurrence_reference, "layer", lambda *args, **kwargs: (out, (h_n, c_n), {}))
    x = torch.empty(5, 2, 3, device=META)
    h = torch.empty(2, 4, device=META)
    w_ih, w_hh = torch.empty(16, 3, device=META), torch.empty(16, 4, device=META)
    result, caught = recorded(lambda: functional.lstm(x, h, h, w_ih, w_hh))
    assert result[0] is out and result[1][0]._base is h_n and result[1][1]._base is c_n  # (views of) the loop's
    assert len(caught) == 1 and "meta" in str(caught[0].message)
    with pytest.raises(RuntimeError, match=r"no kernel for meta"):
        functional.lstm(x, h, h, w_ih, w_hh, backend="native")


def test_triton_backend_runs_through_the_modules():
    """backend="triton" gives the reference results: on a GPU, or on CPU tensors through the
    Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 only where there is no CUDA).
    On a GPU its products are TF32 where torch.backends.cudnn.allow_tf32 is true (torch's
    default), judged by the TF32 rows (the H200 measured 4.1e-5 on the output, beyond float32's
    1e-5); on the CPU exact, judged by float32's."""
    if not backend.triton_available():
        pytest.skip("triton is not installed")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    products = tsrnn.precision.products(torch.float32, torch.device(device))
    rows = ((TOLERANCE["float32 same inputs"],) * 2 if products == "ieee"
            else backend.tolerance.rows(torch.float32, products))
    x = torch.randn(4, 2, 3, device=device)
    for make in (lambda b: tsrnn.LSTM(3, 5, num_layers=2, backend=b).to(device),
                 lambda b: tsrnn.PowerLawLSTM(3, 5, input_gate="separate", backend=b).to(device)):
        results = {}
        for name in ("triton", "reference"):
            torch.manual_seed(0)
            model = make(name)
            out = model(x)[0]
            out.square().sum().backward()
            results[name] = (out, model.weight_hh_l0.grad)
        for got, want, row, what in zip(results["triton"], results["reference"], rows, ("out", "grad w_hh")):
            assert_close(got, want, row, what)


def test_triton_is_refused_where_it_cannot_run(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(registry, "triton_available", lambda: True)
    with pytest.raises(RuntimeError, match=r"backend='triton' cannot run this call: .*CUDA tensors"):
        backend.choose("triton", lstm_call())
    monkeypatch.setattr(registry, "triton_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"needs the triton package"):
        backend.choose("triton", SCAN)


# --------------------------------------------------------------------------------------------
# Value checks: no host sync on CUDA, skipped under graph capture
# --------------------------------------------------------------------------------------------
class FakeCudaTensor:
    device = torch.device("cuda")
    is_cuda = True


def test_value_checks_on_cuda_assert_on_the_device(monkeypatch):
    from tsrnn import _validation

    asserted = []
    monkeypatch.setattr(torch, "_assert_async", lambda ok, message: asserted.append((ok, message)))
    ok = torch.tensor(False)
    ok.__bool__ = None  # reading it on the host would be a sync
    _validation._require(FakeCudaTensor(), ok, "a0 must be >= 0")
    assert asserted == [(ok, "a0 must be >= 0")]
    with pytest.raises(ValueError, match="a0 must be >= 0"):
        _validation.nonnegative("a0", torch.tensor([1.0, -1.0]))  # on CPU: a host check, with the value
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert _validation._values_unreadable(FakeCudaTensor())


# --------------------------------------------------------------------------------------------
# The choice among several paths: measured once per (shape, candidates), what the call does
# (tested by device type with fake paths, so without a GPU)
# --------------------------------------------------------------------------------------------
CUDA = torch.device("cuda")


class FakeClock:
    """The tuner's clock in these tests: it moves only when a fake path sleeps, so a path measures
    exactly its stated cost, however busy the machine is (real sleeps overshoot by milliseconds
    under load, which once flipped a 2% margin test on CI)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


@pytest.fixture
def fake_cuda(monkeypatch):
    """A CUDA build without a GPU (fake plans): the cluster-resident kernel takes H <= 64, the
    grid-resident one H <= 256; Triton imports, and the tuner reads a
    FakeClock."""
    monkeypatch.setattr(timing, "time", FakeClock())
    monkeypatch.setattr(registry, "CUDA_LOAD_ERROR", None)
    monkeypatch.setattr(registry, "triton_available", lambda: True)
    limits = {"tsrnn_cluster": 64, "tsrnn_grid": 256}
    monkeypatch.setattr(tensor_core_plans, "blocks",
                        lambda namespace, device, cell, hidden, batch, products: int(hidden <= limits[namespace]))
    monkeypatch.setattr(timing, "_sync", lambda device: None)
    monkeypatch.setattr(cache, "device_name", lambda device: f"{device.type}:fake")
    for name in ("cuda_cluster", "cuda_grid"):  # one regime each: no plan to describe
        monkeypatch.setitem(backend.REGISTRY, name, dataclasses.replace(backend.REGISTRY[name], regime=None))


def test_auto_on_cuda_candidates_in_order(fake_cuda, monkeypatch):
    """cuDNN (LSTM) and the tensor-core kernels; the older paths only where none of those serves."""
    assert backend.candidates("auto", lstm_call(CUDA)) == ["cudnn", "cuda_cluster", "cuda_grid"]
    assert backend.candidates("auto", lstm_call(CUDA, H=100)) == ["cudnn", "cuda_grid"]
    assert backend.candidates("auto", lstm_call(CUDA, H=300)) == ["cudnn"]
    assert backend.candidates("auto", lstm_call(CUDA, cell="plstm_coupled", H=100)) == ["cuda_grid"]
    # past the tensor-core kernels (the plans refuse) the older paths serve the pLSTM
    assert backend.candidates("auto", lstm_call(CUDA, cell="plstm_coupled", H=300)) == ["triton_step"]
    assert backend.candidates("auto", lstm_call(CUDA, H=200, forget=True)) == ["cuda_grid"]
    # float64 math: no CUDA kernel (float32 only): the per-step Triton kernel, any H
    assert backend.candidates("auto", lstm_call(CUDA, dtype=torch.float64, H=40)) == ["cudnn"]
    assert backend.candidates("auto", lstm_call(CUDA, cell="plstm_coupled", dtype=torch.float64, H=16)) == [
        "triton_step"]
    assert backend.candidates("native", lstm_call(CUDA)) == ["cuda_cluster", "cuda_grid"]
    assert backend.candidates("triton", lstm_call(CUDA)) == ["triton_step"]
    assert backend.candidates("auto", backend.Call("linear_scan", CUDA, torch.float32, (5, 2))) == ["triton_scan"]


class FakePaths:
    """run(path, dtype) for the measured choice: a forward that sleeps a path's cost on the tuner's
    clock (the fake_cuda fixture's FakeClock) and returns a tensor whose backward sleeps the path's
    backward cost (every path computes the same numbers, so all pass verification); records the
    calls as (path, dtype), may fail."""

    def __init__(self, forward, backward=None, failing=()):
        self.forward, self.backward, self.failing, self.calls = forward, backward or {}, failing, []

    def __call__(self, path, dtype=None):
        self.calls.append((path, dtype))
        if path in self.failing:
            raise RuntimeError(f"{path} exploded")
        timing.time.sleep(self.forward.get(path, 0.0))
        w = torch.ones(1, dtype=dtype or torch.float32, requires_grad=True)
        seconds = self.backward.get(path, 0.0)

        class Slow(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t * 1

            @staticmethod
            def backward(ctx, g):
                timing.time.sleep(seconds)
                return g

        return {"out": Slow.apply(w)}, {"w": w}


def test_measures_the_candidates_once_per_shape(fake_cuda):
    run = FakePaths({"cudnn": 0.03, "cuda_cluster": 0.001, "cuda_grid": 0.015})
    pick = lambda call: backend.choose("auto", call, run)  # noqa: E731
    verified = 1 + 2  # first the trusted cudnn in float64, then each other candidate once
    timed = 3 * (1 + backend.TUNE_REPEATS)  # one warm-up each, then the timed calls
    assert pick(lstm_call(CUDA)) == "cuda_cluster"
    assert run.calls[:verified] == [("cudnn", torch.float64), ("cuda_cluster", None), ("cuda_grid", None)]
    assert len(run.calls) == verified + timed
    assert [pick(lstm_call(CUDA)) for _ in range(3)] == ["cuda_cluster"] * 3
    assert len(run.calls) == verified + timed  # cached: verified and measured once per shape
    assert pick(lstm_call(CUDA, T=6)) == "cuda_cluster" and len(run.calls) == verified + timed  # same bucket
    run.forward["cuda_cluster"] = 0.05
    assert pick(lstm_call(CUDA, T=9)) == "cuda_grid"  # another T bucket is measured on its own


def test_a_cached_choice_never_serves_a_call_it_cannot(fake_cuda):
    """The defect: an inference call measured cuDNN fastest; forget_gates of the same shape got
    "cudnn" back from the cache and its forget traces came back None. The cache key now holds the
    candidates, and cuDNN is no candidate of a call that wants forget traces."""
    run = FakePaths({"cudnn": 0.0, "cuda_cluster": 0.02, "cuda_grid": 0.02})
    assert backend.choose("auto", lstm_call(CUDA), run) == "cudnn"
    assert backend.choose("auto", lstm_call(CUDA, forget=True), run) != "cudnn"


def test_a_training_call_is_timed_forward_and_backward(fake_cuda):
    """The defect: the tuner timed the forward under no_grad, so a training call got the path
    fastest for inference. A call that needs gradients is timed forward + backward."""
    forward = {"cudnn": 0.001, "cuda_cluster": 0.01, "cuda_grid": 0.02}
    backward = {"cudnn": 0.05}
    assert backend.choose("auto", lstm_call(CUDA), FakePaths(forward, backward)) == "cudnn"
    assert backend.choose("auto", lstm_call(CUDA, grad=True), FakePaths(forward, backward)) == "cuda_cluster"


def test_the_first_candidate_stays_within_the_margin(fake_cuda):
    run = FakePaths({"cudnn": 0.0100, "cuda_cluster": 0.0098, "cuda_grid": 0.02})
    assert backend.choose("auto", lstm_call(CUDA), run) == "cudnn"  # 2% faster is noise
    run = FakePaths({"cudnn": 0.0100, "cuda_cluster": 0.0094, "cuda_grid": 0.02})
    assert backend.choose("auto", lstm_call(CUDA, T=40), run) == "cuda_cluster"  # 6% faster is not


@pytest.mark.parametrize("verify, stage", [("1", "verified"), ("0", "timed")])
def test_a_failing_path_is_dropped_with_one_warning(fake_cuda, monkeypatch, verify, stage):
    monkeypatch.setenv("TSRNN_VERIFY", verify)
    backend.forget()  # the variable reaches keys seen before
    run = FakePaths({"cudnn": 0.01, "cuda_grid": 0.001}, failing=("cuda_grid",))
    result, caught = recorded(lambda: backend.choose("auto", lstm_call(CUDA, H=200), run))
    assert result == "cudnn"
    assert len(caught) == 1 and f"cuda_grid path failed while being {stage}" in str(caught[0].message)
    assert "exploded" in str(caught[0].message)
    everything_fails = FakePaths({}, failing=("cudnn", "cuda_grid"))
    if verify == "1":  # the trusted path failing leaves nothing to verify against: a clear error
        with pytest.raises(RuntimeError, match=r"trusted path cudnn failed in float64 .*cudnn exploded"):
            backend.choose("auto", lstm_call(CUDA, H=250), everything_fails)
    else:
        with pytest.raises(RuntimeError, match=r"every path failed"), pytest.warns(RuntimeWarning):
            backend.choose("auto", lstm_call(CUDA, H=250), everything_fails)


def test_autotune_off_uses_the_static_order(fake_cuda, monkeypatch):
    """TSRNN_AUTOTUNE=0 times nothing but still verifies; TSRNN_VERIFY=0 too runs nothing."""
    monkeypatch.setenv("TSRNN_AUTOTUNE", "0")
    backend.forget()  # the variable reaches keys seen before
    run = FakePaths({"cudnn": 0.01, "cuda_cluster": 0.0, "cuda_grid": 0.0})
    assert backend.choose("auto", lstm_call(CUDA), run) == "cudnn"
    assert run.calls == [("cudnn", torch.float64), ("cuda_cluster", None),
                         ("cuda_grid", None)]  # one verification run each, no timing
    monkeypatch.setenv("TSRNN_VERIFY", "0")
    backend.forget()  # the variable reaches keys seen before
    run.calls.clear()
    assert backend.choose("auto", lstm_call(CUDA, T=9), run) == "cudnn"
    assert run.calls == []


def test_deterministic_algorithms_take_the_first_verified_candidate(fake_cuda, monkeypatch):
    """Under torch.use_deterministic_algorithms(True) nothing is timed: the order of preference
    decides (after verification), the same in every process, and the choice is recorded."""
    monkeypatch.setattr(timing, "fastest", lambda *a: pytest.fail("timed under deterministic algorithms"))
    run = FakePaths({"cudnn": 0.01, "cuda_cluster": 0.0, "cuda_grid": 0.0},
                    failing=("cuda_cluster",))
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.warns(RuntimeWarning, match="cuda_cluster path failed while being verified"):
            assert backend.choose("auto", lstm_call(CUDA), run) == "cudnn"
            assert backend.choose("auto", lstm_call(CUDA, forget=True), run) == "cuda_grid"  # no cudnn
    finally:
        torch.use_deterministic_algorithms(before)
    assert list(backend.tuned_choices().values()) == ["cudnn"]  # the forget call had one verified candidate left


def test_reused_choices_replace_measuring(fake_cuda, monkeypatch):
    """reuse_choices (a checkpoint's recorded choices) decides without timing where its path is a
    candidate; a recorded path that cannot serve here is warned about once and the call is tuned."""
    call = lstm_call(CUDA)
    run = FakePaths({"cudnn": 0.01, "cuda_cluster": 0.0, "cuda_grid": 0.0})
    backend.reuse_choices({call.recorded_key(): "cuda_grid"})
    monkeypatch.setattr(timing, "fastest", lambda *a: pytest.fail("timed a reused choice"))
    assert backend.choose("auto", call, run) == "cuda_grid"
    assert backend.tuned_choices() == {call.recorded_key(): "cuda_grid"}
    other = lstm_call(CUDA, T=9)
    backend.reuse_choices({other.recorded_key(): "cpu"})
    monkeypatch.setattr(timing, "fastest", lambda paths, call, run: paths[1])
    with pytest.warns(RuntimeWarning, match="recorded choice 'cpu' .* cannot serve this call here"):
        assert backend.choose("auto", other, run) == "cuda_cluster"
    with pytest.raises(ValueError, match="map call keys to path names"):
        backend.reuse_choices({"key": "warp_drive"})
    on_another_gpu = backend.Call("recurrence", torch.device("cuda", 1), torch.float32, (5, 2, 3, 4), "lstm")
    assert on_another_gpu.recorded_key() == backend.Call("recurrence", torch.device("cuda", 0), torch.float32,
                                                         (5, 2, 3, 4), "lstm").recorded_key()


def test_the_triton_interpreter_is_not_measured():
    """Candidates on CPU tensors that include a Triton path (the interpreter: seconds a call, not a
    GPU's speed) are neither timed nor verified; the compiled CPU paths are."""
    assert not timing.can_measure(torch.device("cpu"), ["cpu", "triton_step"])
    assert timing.can_measure(torch.device("cpu"), ["onednn", "cpu"])


@needs_native
def test_cpu_auto_measures_onednn_against_the_compiled_kernel(monkeypatch):
    """On CPU the LSTM is measured on both paths; the modules give the tuner a runnable call."""
    seen = []
    original = timing.fastest
    monkeypatch.setattr(timing, "fastest", lambda paths, call, run: seen.append((paths, call)) or original(paths, call, run))
    lstm = tsrnn.LSTM(3, 4)
    hooked = []
    lstm.weight_hh_l0.register_hook(lambda g: hooked.append(g.shape))
    x = torch.randn(5, 2, 3)
    lstm(x)[0].sum().backward()
    assert seen[0][0] == ["onednn", "cpu"] and seen[0][1].grad
    assert len(hooked) == 1  # the timed runs use detached copies: the user's hooks fire once
    grad = lstm.weight_hh_l0.grad.clone()
    lstm.zero_grad()
    lstm(x)[0].sum().backward()
    assert torch.equal(lstm.weight_hh_l0.grad, grad)  # the timing runs left no gradient behind
    assert len(seen) == 1  # measured once for this shape
    with torch.no_grad():
        lstm(x)
    assert len(seen) == 2 and not seen[1][1].grad  # inference is another key


def test_forget_gates_after_an_inference_call_of_the_same_shape():
    """Through the module: forget_gates after an eval forward that chose a torch-LSTM path."""
    lstm = tsrnn.LSTM(3, 4).eval()
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        lstm(x)
    (forget,) = lstm.forget_gates(x)
    assert forget is not None and forget.shape == (5, 2, 4)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", testing.SHAPES, ids=str)
def test_torch_lstm_path_is_the_reference_lstm(with_bias, shape):
    """The oneDNN/cuDNN call (torch._VF.lstm) with the effective bias as b_ih and b_hh = 0."""
    T, B, I, H = shape
    g = torch.Generator().manual_seed(T + H)
    args = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
            for s in ((T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,))]
    if not with_bias:
        args[-1] = None
    x, h0, c0, w_ih, w_hh, bias = args
    out, (h, c) = functional.lstm(x, h0, c0, w_ih, w_hh, bias, backend="onednn")
    want, (h_ref, c_ref), _ = reference.lstm(*args)
    inputs = [a for a in args if a is not None]
    grads = torch.autograd.grad((out.sin().sum() + c.sum()), inputs)
    grads_ref = torch.autograd.grad((want.sin().sum() + c_ref.sum()), inputs)
    for got, expected in zip((out, h, c, *grads), (want, h_ref, c_ref, *grads_ref)):
        assert_close(got, expected, TOLERANCE["float64 reordered"])


@pytest.mark.parametrize("dtype, dt_dtype", [(torch.bfloat16, None), (torch.float16, torch.float32),
                                             (torch.float32, torch.float64)], ids=str)
def test_the_reference_path_computes_in_the_math_dtype(dtype, dt_dtype):
    """As every path does: a bf16/fp16 pLSTM (its age in float32, as the modules keep it) and
    float32 inputs with a float64 dt run on the reference loops, "auto"'s fallback; h and c come
    back in the input dtype, the age in the math dtype."""
    args = testing.layer_args("plstm_separate", 5, 2, 3, 4, dt=dt_dtype is not None)
    ours = {**cast(args, dtype), "a0": args["a0"].float(), "dt": None if dt_dtype is None else args["dt"].to(dt_dtype)}
    out, (h, c, a) = testing.run_layer("plstm_separate", ours, "reference")
    assert out.dtype == h.dtype == c.dtype == dtype and a.dtype == torch.float32
    want, _ = testing.reference_layer("plstm_separate", cast(ours, torch.float64))
    assert_close(out, want, TOLERANCE[dtype], "out")
