"""CPU forward+backward: tsrnn's paths vs the reference loop vs torch.nn.LSTM.

    pytest bench/                       # timings (pytest-benchmark)
    pytest bench/ --benchmark-disable   # run each once, as a smoke test

Shapes: the AWD-LSTM-like T=70, B=20, H=I=256 float32, and a sweep over T and H. "auto" is what users
get: the dispatcher measures oneDNN against the compiled kernel on the first call of a shape
(the benchmark's warm-up) and keeps the faster; "cpu" and "onednn" (``tsrnn.backend.paths_on``)
are the two paths by name.
Target: LSTM and MTS-LSTM "auto" at most 1.0x torch.nn.LSTM at H = 64, 256 and 512.
"""
import copy

import pytest
import torch

import tsrnn
from conftest import checked, fwd_bwd

T, B, H = 70, 20, 256
KINDS = ["torch.nn.LSTM", "auto", *tsrnn.backend.paths_on("cpu", "recurrence"), "reference"]


def make_lstm(kind, hidden=H, inputs=H):
    torch.manual_seed(0)
    torch_lstm = torch.nn.LSTM(inputs, hidden)
    if kind == "torch.nn.LSTM":
        return torch_lstm, torch_lstm
    ours = tsrnn.LSTM(inputs, hidden, backend=kind)
    ours.load_state_dict(torch_lstm.state_dict())
    return ours, torch_lstm


@pytest.mark.parametrize("kind", KINDS)
def test_lstm(benchmark, kind):
    benchmark.group = f"lstm T={T} B={B} H={H} fwd+bwd"
    module, reference = make_lstm(kind)
    x = torch.randn(T, B, H)
    checked(module, reference, x)
    benchmark(fwd_bwd, module, x)


def time_against_reference(benchmark, module, hidden=H):
    """Check ``module`` against a reference-backend copy of itself, then time its fwd+bwd."""
    reference = copy.deepcopy(module)
    reference.backend = "reference"
    x = torch.randn(T, B, hidden)
    checked(module, reference, x)
    benchmark(fwd_bwd, module, x)


@pytest.mark.parametrize("hidden", [64, 256, 512])
@pytest.mark.parametrize("kind", KINDS)
def test_mts_lstm(benchmark, kind, hidden):
    """The multi-timescale LSTM against torch.nn.LSTM of the same size (which cannot fix biases)."""
    benchmark.group = f"mts-lstm T={T} B={B} H={hidden} fwd+bwd"
    torch.manual_seed(0)
    if kind == "torch.nn.LSTM":
        module, reference = make_lstm(kind, hidden, hidden)
        x = torch.randn(T, B, hidden)
        checked(module, reference, x)
        benchmark(fwd_bwd, module, x)
        return
    ts = [tsrnn.memory.timescales.inverse_gamma_quantiles(hidden, 0.56)]
    time_against_reference(benchmark, tsrnn.LSTM(hidden, hidden, timescales=ts, backend=kind), hidden)


@pytest.mark.parametrize("input_gate", ["coupled", "separate"])
@pytest.mark.parametrize("kind", ["auto", "reference"])
def test_plstm(benchmark, kind, input_gate):
    benchmark.group = f"plstm-{input_gate} T={T} B={B} H={H} fwd+bwd"
    torch.manual_seed(0)
    time_against_reference(benchmark, tsrnn.PowerLawLSTM(H, H, input_gate=input_gate, backend=kind))


@pytest.mark.parametrize("steps,hidden", [(35, 256), (140, 256), (70, 64), (70, 512)])
@pytest.mark.parametrize("kind", KINDS)
def test_lstm_sweep(benchmark, kind, steps, hidden):
    benchmark.group = f"lstm sweep T={steps} B={B} H={hidden} fwd+bwd"
    module, reference = make_lstm(kind, hidden, hidden)
    x = torch.randn(steps, B, hidden)
    checked(module, reference, x)
    benchmark(fwd_bwd, module, x)


@pytest.mark.parametrize("kind", ["auto", "reference"])
def test_linear_scan(benchmark, kind):
    steps, width = 2000, 32 * 240
    benchmark.group = f"linear_scan T={steps} N={width} fwd+bwd"
    g = torch.Generator().manual_seed(0)
    a = torch.rand(steps, width, generator=g).requires_grad_()
    u = torch.randn(steps, width, generator=g).requires_grad_()
    x = tsrnn.functional.linear_scan(a, u, backend=kind)
    torch.testing.assert_close(x, tsrnn.reference.linear_scan(a, u), atol=1e-4, rtol=1e-4)

    def step():
        tsrnn.functional.linear_scan(a, u, backend=kind).sum().backward()

    benchmark(step)
