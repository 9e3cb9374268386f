"""Backend selection (tsrnn.backend): the TSRNN_BACKEND variable, the fallback to the reference
loops with one warning when the compiled extension is missing, and devices without a kernel."""
import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend, functional, reference
from conftest import needs_native

CPU = torch.device("cpu")
META = torch.device("meta")
FAKE_CAUSE = "ImportError: libfake.so: undefined symbol _ZN5tsrnn4fakeE"


@pytest.fixture(autouse=True)
def clean_backend_state(monkeypatch):
    """No TSRNN_BACKEND from the caller's shell, and a fresh set of already-given warnings."""
    monkeypatch.delenv("TSRNN_BACKEND", raising=False)
    monkeypatch.delenv("TSRNN_AUTOTUNE", raising=False)
    monkeypatch.setattr(backend, "_warned", set())
    monkeypatch.setattr(backend, "_tuned", {})


@pytest.fixture
def spies(monkeypatch):
    """Counts the calls of the reference lstm/plstm/linear_scan made through tsrnn.functional."""
    calls = {"lstm": 0, "plstm": 0, "linear_scan": 0}
    for name in calls:
        original = getattr(reference, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(reference, name, spy)
    return calls


@pytest.fixture
def missing_extension(monkeypatch):
    """Pretend tsrnn._C failed to load with FAKE_CAUSE."""
    monkeypatch.setattr(backend, "LOAD_ERROR", FAKE_CAUSE)


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
# TSRNN_BACKEND
# --------------------------------------------------------------------------------------------
@needs_native
def test_auto_is_native_on_cpu_without_the_variable():
    assert backend.native_available()
    assert backend.resolve("auto", CPU) == "native"


def test_env_reference_forces_reference(monkeypatch):
    monkeypatch.setenv("TSRNN_BACKEND", "reference")
    assert backend.resolve("auto", CPU) == "reference"


@needs_native
def test_env_native_selects_native(monkeypatch):
    monkeypatch.setenv("TSRNN_BACKEND", "native")
    assert backend.resolve("auto", CPU) == "native"


@needs_native
@pytest.mark.parametrize("env, explicit", [("reference", "native"), ("native", "reference")])
def test_explicit_backend_beats_the_variable(monkeypatch, env, explicit):
    monkeypatch.setenv("TSRNN_BACKEND", env)
    assert backend.resolve(explicit, CPU) == explicit


@pytest.mark.parametrize("env", ["reference", pytest.param(None, marks=needs_native)])
def test_env_reference_runs_the_reference_loops(monkeypatch, spies, env):
    """The variable is read at call time, by modules and functional alike."""
    if env is not None:
        monkeypatch.setenv("TSRNN_BACKEND", env)
    lstm, plstm = models()
    x = torch.randn(5, 2, 3)
    lstm(x)
    plstm(x)
    functional.linear_scan(torch.rand(5, 2), torch.randn(5, 2))
    expected = 2 if env == "reference" else 0  # one call per layer on the reference path
    assert spies == {"lstm": expected, "plstm": expected, "linear_scan": expected // 2}


@pytest.mark.parametrize("value", ["cuda-magic", "fast"])
def test_invalid_env_value_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("TSRNN_BACKEND", value)
    with pytest.raises(ValueError, match=rf"TSRNN_BACKEND must be one of .*got '{value}'"):
        backend.resolve("auto", CPU)
    lstm, _ = models()  # constructing reads no environment ...
    with pytest.raises(ValueError, match=r"TSRNN_BACKEND"):  # ... the forward does
        lstm(torch.randn(5, 2, 3))
    with pytest.raises(ValueError, match=r"TSRNN_BACKEND"):
        functional.linear_scan(torch.rand(5, 2), torch.randn(5, 2))
    # An explicit backend does not consult the variable.
    assert backend.resolve("reference", CPU) == "reference"


def test_invalid_backend_argument():
    with pytest.raises(ValueError, match=r"backend must be one of \['auto', 'reference', 'native', 'triton'\]"):
        backend.resolve("cuda-magic", CPU)


# --------------------------------------------------------------------------------------------
# Missing extension: "auto" falls back with one warning, "native" raises
# --------------------------------------------------------------------------------------------
def test_missing_extension_auto_falls_back_with_one_warning(missing_extension, spies):
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
    assert spies == {"lstm": 4, "plstm": 4, "linear_scan": 1}
    # The results are the reference results.
    for m in (lstm, plstm):
        m.backend = "reference"
    expected, none = recorded(lambda: [lstm(x), plstm(x), reference.linear_scan(a, u)])
    assert none == []  # backend="reference" never warns
    for got, want in zip(results, expected):
        got, want = flatten(got), flatten(want)
        assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))
    # Later "auto" calls stay quiet.
    lstm.backend = "auto"
    assert recorded(lambda: lstm(x))[1] == []


def flatten(result):
    """(out, (h, c, ...)) or a tensor -> a flat list of tensors."""
    return [result] if isinstance(result, torch.Tensor) else [result[0], *result[1]]


def test_missing_extension_warning_points_at_the_cause_once_per_cause(missing_extension, monkeypatch):
    result, caught = recorded(lambda: [backend.resolve("auto", CPU) for _ in range(3)])
    assert result == ["reference"] * 3
    assert len(caught) == 1
    monkeypatch.setattr(backend, "LOAD_ERROR", "OSError: another cause")
    _, caught = recorded(lambda: backend.resolve("auto", CPU))
    assert len(caught) == 1 and "another cause" in str(caught[0].message)


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_missing_extension_native_raises(missing_extension, monkeypatch, how):
    kw = {}
    if how == "argument":
        kw["backend"] = "native"
    else:
        monkeypatch.setenv("TSRNN_BACKEND", "native")
    lstm = tsrnn.LSTM(3, 4, **kw)
    pattern = r"tsrnn\._C.*" + FAKE_CAUSE.replace(".", r"\.")
    with pytest.raises(RuntimeError, match=pattern):
        backend.resolve(kw.get("backend", "auto"), CPU)
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
        backend.resolve("native", META)


def test_auto_on_a_device_without_kernel_warns_once():
    result, caught = recorded(lambda: [backend.resolve("auto", META) for _ in range(3)])
    assert result == ["reference"] * 3
    assert len(caught) == 1 and "meta" in str(caught[0].message)
    # "reference" is a choice, not a fallback: no warning.
    assert recorded(lambda: backend.resolve("reference", META)) == ("reference", [])


def test_functional_on_meta_tensors_uses_the_reference_path(monkeypatch):
    # A stub instead of the real reference loop: running ops on meta tensors costs a second.
    monkeypatch.setattr(reference, "lstm", lambda *args: ("out", ("h_n", "c_n"), None))
    x = torch.empty(5, 2, 3, device=META)
    h = torch.empty(2, 4, device=META)
    w_ih, w_hh = torch.empty(16, 3, device=META), torch.empty(16, 4, device=META)
    result, caught = recorded(lambda: functional.lstm(x, h, h, w_ih, w_hh))
    assert result == ("out", ("h_n", "c_n"))
    assert len(caught) == 1 and "meta" in str(caught[0].message)
    with pytest.raises(RuntimeError, match=r"no kernel for meta"):
        functional.lstm(x, h, h, w_ih, w_hh, backend="native")


def test_triton_backend_runs_through_the_modules():
    """backend="triton" on CPU tensors (Triton interpreter) gives the compiled kernels' results."""
    if not backend.triton_available():
        pytest.skip("triton is not installed")
    x = torch.randn(4, 2, 3)
    for make in (lambda b: tsrnn.LSTM(3, 5, num_layers=2, backend=b),
                 lambda b: tsrnn.PowerLawLSTM(3, 5, input_gate="separate", backend=b)):
        results = {}
        for name in ("triton", "reference"):
            torch.manual_seed(0)
            model = make(name)
            out = model(x)[0]
            out.square().sum().backward()
            results[name] = (out, model.weight_hh_l0.grad)
        for got, want in zip(results["triton"], results["reference"]):
            assert (got - want).abs().max() < 1e-5


# --------------------------------------------------------------------------------------------
# CUDA: the choice among cuDNN, the persistent CUDA kernel and Triton (decided by device type,
# so it is tested here without a GPU)
# --------------------------------------------------------------------------------------------
CUDA = torch.device("cuda")


@pytest.fixture
def cuda_extension(monkeypatch):
    monkeypatch.setattr(backend, "CUDA_LOAD_ERROR", None)
    monkeypatch.setattr(backend, "triton_available", lambda: True)


def test_auto_on_cuda_prefers_cudnn_then_the_persistent_kernel_then_triton(cuda_extension):
    assert backend.resolve("auto", CUDA, "recurrence", cudnn=True, fits=lambda: True) == "cudnn"
    assert backend.resolve("auto", CUDA, "recurrence", fits=lambda: True) == "native"
    assert recorded(lambda: backend.resolve("auto", CUDA, "recurrence", fits=lambda: False)) == ("triton", [])
    assert backend.resolve("auto", CUDA, "linear_scan") == "triton"


class FakePaths:
    """run(path) for the measured choice: sleeps a path's cost, counts the calls, may fail."""

    def __init__(self, seconds, failing=()):
        self.seconds, self.failing, self.calls = seconds, failing, []

    def __call__(self, path):
        self.calls.append(path)
        if path in self.failing:
            raise RuntimeError(f"{path} exploded")
        time.sleep(self.seconds[path])


def test_auto_on_cuda_measures_the_candidates_once_per_shape(cuda_extension):
    run = FakePaths({"cudnn": 0.03, "native": 0.001, "triton": 0.015})
    pick = lambda key: backend.resolve("auto", CUDA, "recurrence", cudnn=True, fits=lambda: True,  # noqa: E731
                                       tune=(key, run))
    assert pick("shape A") == "native"
    assert sorted(set(run.calls)) == ["cudnn", "native", "triton"]
    assert len(run.calls) == 3 * (1 + backend.TUNE_REPEATS)  # one warm-up each, then the timed calls
    assert [pick("shape A") for _ in range(3)] == ["native"] * 3
    assert len(run.calls) == 3 * (1 + backend.TUNE_REPEATS)  # cached: measured once per shape
    run.seconds["native"] = 0.05
    assert pick("shape B") == "triton"  # another shape is measured on its own


def test_a_failing_path_is_dropped_with_one_warning(cuda_extension):
    run = FakePaths({"cudnn": 0.01, "triton": 0.001}, failing=("triton",))
    result, caught = recorded(lambda: backend.resolve("auto", CUDA, "recurrence", cudnn=True,
                                                      fits=lambda: False, tune=("k", run)))
    assert result == "cudnn"
    assert len(caught) == 1 and "triton path failed" in str(caught[0].message) and "exploded" in str(caught[0].message)
    everything_fails = FakePaths({"cudnn": 0.0, "triton": 0.0}, failing=("cudnn", "triton"))
    with pytest.raises(RuntimeError, match=r"every CUDA path failed"), pytest.warns(RuntimeWarning):
        backend.resolve("auto", CUDA, "recurrence", cudnn=True, fits=lambda: False, tune=("k2", everything_fails))


def test_autotune_off_uses_the_static_order(cuda_extension, monkeypatch):
    monkeypatch.setenv("TSRNN_AUTOTUNE", "0")
    run = FakePaths({"cudnn": 0.01, "native": 0.0, "triton": 0.0})
    assert backend.resolve("auto", CUDA, "recurrence", cudnn=True, fits=lambda: True, tune=("k", run)) == "cudnn"
    assert run.calls == []
    monkeypatch.delenv("TSRNN_AUTOTUNE")
    # One candidate: nothing to measure.
    assert backend.resolve("auto", CUDA, "linear_scan", tune=("k", run)) == "triton" and run.calls == []


def test_functional_passes_a_runnable_measurement(monkeypatch):
    """The (key, run) that functional.lstm/plstm give resolve: run(path) runs the layer on that
    path without autograd, and the key tells shapes apart."""
    seen = {}

    def fake_resolve(backend_name, device, op, cudnn=False, fits=None, tune=None):
        seen.setdefault("keys", []).append(tune[0])
        tune[1]("reference")  # must run without building a graph
        return "reference"

    monkeypatch.setattr(backend, "resolve", fake_resolve)
    for T in (4, 5, 9):
        x = torch.randn(T, 2, 3, requires_grad=True)
        h = torch.zeros(2, 4)
        out, _ = functional.lstm(x, h, h, torch.randn(16, 3), torch.randn(16, 4))
        assert out.requires_grad  # the call itself still records autograd
    assert seen["keys"][0] == seen["keys"][1] != seen["keys"][2]  # T=4, 5 share a bucket, 9 does not


def test_native_on_cuda_falls_back_once_when_the_shape_does_not_fit(cuda_extension):
    assert backend.resolve("native", CUDA, "recurrence", cudnn=True, fits=lambda: True) == "native"
    result, caught = recorded(lambda: [backend.resolve("native", CUDA, "recurrence", fits=lambda: False)
                                       for _ in range(3)])
    assert result == ["triton"] * 3
    assert len(caught) == 1 and "does not take this shape" in str(caught[0].message)
    with pytest.raises(RuntimeError, match=r"no CUDA kernel for linear_scan"):
        backend.resolve("native", CUDA, "linear_scan")


def test_native_on_cuda_without_the_cuda_extension_raises(monkeypatch):
    monkeypatch.setattr(backend, "CUDA_LOAD_ERROR", "ModuleNotFoundError: No module named 'tsrnn._cuda'")
    with pytest.raises(RuntimeError, match=r"tsrnn\._cuda.*TSRNN_CUDA=1"):
        backend.resolve("native", CUDA, "recurrence", fits=lambda: True)
    monkeypatch.setattr(backend, "triton_available", lambda: False)
    result, caught = recorded(lambda: backend.resolve("auto", CUDA, "recurrence", fits=lambda: True))
    assert result == "reference" and len(caught) == 1 and "triton is not installed" in str(caught[0].message)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 2, 3), (6, 3, 4, 5)], ids=str)
def test_cudnn_path_is_the_reference_lstm(with_bias, shape):
    """The cuDNN call (here torch's CPU LSTM kernel, same entry point) with the effective bias."""
    T, B, I, H = shape
    g = torch.Generator().manual_seed(T + H)
    args = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
            for s in ((T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,))]
    if not with_bias:
        args[-1] = None
    out, (h, c) = functional._cudnn_lstm(*args)
    want, (h_ref, c_ref), _ = reference.lstm(*args)
    inputs = [a for a in args if a is not None]
    grads = torch.autograd.grad((out.sin().sum() + c.sum()), inputs)
    grads_ref = torch.autograd.grad((want.sin().sum() + c_ref.sum()), inputs)
    for got, expected in zip((out, h, c, *grads), (want, h_ref, c_ref, *grads_ref)):
        assert (got - expected).abs().max() < 1e-12
