"""What is particular to the compiled CPU kernels (tsrnn._C) and the operators: any thread count,
long sequences, forget traces, the scan, opcheck of every namespace, and the final-state
gradient. Every path's results against the reference on the shared table: tests/kernels/recurrence/test_paths.py."""
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tsrnn import backend, functional, reference, testing
from tsrnn.ops.recurrence import cells
from tsrnn.testing import TOLERANCE, layer_args
from conftest import assert_close, cast, needs_native

CELLS = list(cells.CELLS)


@needs_native
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_unit_slices_over_any_thread_count(cell, threads):
    """Hidden units are sliced over the threads (32 or more per thread); any count is exact."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = testing.compare("cpu", cell, (4, 3, 5, 97), torch.float64, dt=cells.get(cell).params != (), seed=threads)
    finally:
        torch.set_num_threads(before)
    assert result.ok, result.failures()


@needs_native
@pytest.mark.parametrize("cell", ["plstm_coupled", "plstm_separate"])
def test_long_sequence_keeps_age_precision(cell):
    """T = 1000 with large steps: ages reach thousands; float32 stays near float64."""
    args = layer_args(cell, T=1000, B=2, I=3, H=8, seed=6, dt=True)
    args["dt"] = args["dt"] * 5
    out, (h, c, a) = testing.run_layer(cell, cast(args, torch.float32), "cpu")
    out_r, (h_r, c_r, a_r) = testing.reference_layer(cell, args)
    assert_close(out, out_r, TOLERANCE[torch.float32], "out")
    assert_close(a, a_r, TOLERANCE["float32 age"], "age")


@needs_native
def test_long_lstm_sequence():
    result = testing.compare("cpu", "lstm", (1000, 2, 3, 8), torch.float64, seed=7)
    assert result.ok, result.failures()


@pytest.mark.parametrize("path", [pytest.param("cpu", marks=needs_native), "reference"])
@pytest.mark.parametrize("cell", CELLS)
def test_forget_gates_match_reference(cell, path):
    named = testing.recurrence_args(cell, layer_args(cell, 5, 2, 3, 4, seed=10))
    _, _, traces = functional.recurrence(cell, **named, backend=path, return_traces=True)
    _, _, traces_r = reference.layer(cells.get(cell), **named)
    assert_close(traces["f"], traces_r["f"], TOLERANCE[torch.float64], "forget")


@needs_native
@pytest.mark.parametrize("shape", testing.SCAN_SHAPES + testing.CPU_SCAN_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_linear_scan_matches_reference(shape, dtype):
    result = testing.compare_scan("cpu", shape, dtype, seed=11)
    assert result.ok, result.failures()


@needs_native
def test_linear_scan_constant_decay_and_gradcheck():
    g = torch.Generator().manual_seed(12)
    a = torch.rand(3, dtype=torch.float64, generator=g, requires_grad=True)  # one decay per channel
    u = torch.randn(5, 2, 3, dtype=torch.float64, generator=g, requires_grad=True)
    x = functional.linear_scan(a, u, backend="cpu")
    assert_close(x, reference.linear_scan(a, u), TOLERANCE[torch.float64], "x")
    assert torch.autograd.gradcheck(lambda a, u: functional.linear_scan(a, u, backend="cpu"), (a, u))


TRITON = pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")


def _opcheck_packed(path):
    """opcheck of the packed layout (batch_sizes): xg [N, G*H], steps [N], h_all [N, H]."""
    batch_sizes = torch.tensor([2, 2, 1, 1])
    for cell in CELLS:
        described = cells.get(cell)
        args = layer_args(cell, 4, 2, 3, 3, seed=14)
        xg = torch.randn(6, described.num_gates * 3, dtype=torch.float64, requires_grad=True)
        state0 = torch.stack([args[name] for name in described.initial_states[1:]]).requires_grad_()
        per_unit = [args[name] for name in described.params]
        params = torch.stack(per_unit).requires_grad_() if per_unit else None
        steps = None if described.step_input is None else torch.rand(6, dtype=torch.float64) + 0.5
        constants = list(cells.get(cell).defaults)
        w_hh, h0 = args["w_hh"].clone().requires_grad_(), args["h0"].clone().requires_grad_()
        torch.library.opcheck(backend.op(path, "recurrence_forward"),
                              (cell, xg, w_hh, h0, state0, params, steps, constants, True, batch_sizes))


@pytest.mark.parametrize("path, scan", [pytest.param("cpu", "cpu", marks=needs_native),
                                        pytest.param("triton_step", "triton_scan", marks=TRITON)])
def test_opcheck_registrations(path, scan):
    """Schema, fake (meta) shapes, autograd registration and AOT dispatch of every operator, in
    every namespace (torch.ops.tsrnn compiled, the Triton ones through the interpreter). The fake
    kernels' shapes come from the cell records (tsrnn/ops/recurrence/cells/), the compiled kernels' from
    csrc/recurrence/cells/: opcheck compares them."""
    for cell in CELLS:
        args = layer_args(cell, 4, 2, 3, 3, seed=13, dt=True)
        G = cells.get(cell).num_gates
        xg = torch.randn(4, 2, G * 3, dtype=torch.float64, requires_grad=True)
        states = [args[name] for name in cells.get(cell).initial_states[1:]]
        state0 = torch.stack(states).requires_grad_()
        per_unit = [args[name] for name in cells.get(cell).params]
        params = torch.stack(per_unit).requires_grad_() if per_unit else None
        constants = list(cells.get(cell).defaults)
        w_hh = args["w_hh"].clone().requires_grad_()
        h0 = args["h0"].clone().requires_grad_()
        steps = args.get(cells.get(cell).step_input) if cells.get(cell).step_input else None
        forward_args = (cell, xg, w_hh, h0, state0, params, steps, constants, True)
        torch.library.opcheck(backend.op(path, "recurrence_forward"), forward_args)
        with torch.no_grad():
            h_all, state_n, state_all, saved = backend.op(path, "recurrence_forward")(*forward_args)
        for grad_h, grad_state_n in ((torch.randn_like(h_all), None), (None, torch.randn_like(state_n))):
            torch.library.opcheck(backend.op(path, "recurrence_backward"),
                                  (cell, grad_h, grad_state_n, w_hh.detach(), h0.detach(), state0.detach(), h_all,
                                   state_all, saved, None if params is None else params.detach(), steps, constants))
    _opcheck_packed(path)
    if scan is None:
        return
    a, u, x0 = (torch.rand(5, 3, dtype=torch.float64, requires_grad=True),
                torch.randn(5, 3, dtype=torch.float64, requires_grad=True),
                torch.randn(3, dtype=torch.float64, requires_grad=True))
    torch.library.opcheck(backend.op(scan, "linear_scan_forward"), (a, u, x0))


class _RecordGradStateN(TorchDispatchMode):
    """Records the grad_state_n argument of every torch.ops.tsrnn.recurrence_backward call."""

    def __init__(self):
        super().__init__()
        self.received = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.tsrnn.recurrence_backward.default:
            self.received.append(args[2])
        return func(*args, **(kwargs or {}))


@needs_native
@pytest.mark.parametrize("cell", CELLS)
def test_backward_gets_the_final_state_gradient_only(cell):
    """The operator returns the final states itself: a loss on h_n and c_n reaches the backward as
    grad_state_n [S, B, H], not as a [T, S, B, H] gradient that is zero but at the last step; a loss
    that does not use the final states passes None (no tensor of zeros)."""
    T, B, H = 6, 3, 5
    S = cells.get(cell).num_states
    args = cast(layer_args(cell, T, B, 4, H, seed=14, dt=True), torch.float64, requires_grad=True)
    for loss, expected in ((lambda out, state: state[0].sum() + state[1].square().sum(), (S, B, H)),
                           (lambda out, state: out.sum(), None)):
        out, state = testing.run_layer(cell, args, "cpu")
        record = _RecordGradStateN()
        with record:
            loss(out, state).backward()
        assert len(record.received) == 1
        got = record.received[0]
        assert (got if got is None else tuple(got.shape)) == expected


def _profile_run(env_value, code):
    env = {k: v for k, v in os.environ.items() if k != "TSRNN_CPU_PROFILE"}
    if env_value is not None:
        env["TSRNN_CPU_PROFILE"] = env_value
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@needs_native
@pytest.mark.parametrize("setting", [None, "0", "1"])
def test_loop_phase_clock_is_opt_in(setting):
    """TSRNN_CPU_PROFILE=1 makes the loops time their phases; read once, the totals reset."""
    code = ("import json, torch, tsrnn\n"
            "m = tsrnn.PowerLawLSTM(64, 64, backend='cpu')\n"
            "m(torch.randn(6, 3, 64))[0].sum().backward()\n"
            "print(json.dumps([list(torch.ops.tsrnn.cpu_loop_profile()), list(torch.ops.tsrnn.cpu_loop_profile())]))\n")
    first, second = json.loads(_profile_run(setting, code))
    assert len(first) == 6 and second == [0.0] * 6
    if setting == "1":
        assert all(seconds > 0 for seconds in first), first
    else:
        assert first == [0.0] * 6


@needs_native
def test_profile_script_runs():
    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "cpu_profile.py")
    done = subprocess.run([sys.executable, script, "--shapes", "3,2,64", "--rounds", "1", "--cells", "plstm_separate"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "per-step GEMM" in done.stdout and "plstm_separate T=3 B=2 H=64" in done.stdout


@needs_native
def test_gemm_benchmark_script_runs():
    """bench/cpu_gemms.py checks each of the engine's large GEMMs against ATen's, then times them
    (or says that the engine runs ATen's, where no panel kernel runs)."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "cpu_gemms.py")
    done = subprocess.run([sys.executable, script, "--shapes", "3,5,40", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    if torch.ops.tsrnn.cpu_gemm_in_use() == "aten":
        assert done.returncode != 0 and "runs ATen's GEMMs" in done.stderr
        return
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(name in done.stdout for name in ("projection", "dx", "dW_ih + db", "dW_hh"))
