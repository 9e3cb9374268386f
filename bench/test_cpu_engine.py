"""The C++ engine (backend="cpu") against torch.nn.LSTM at the engine shapes, forward+backward.

    pytest bench/test_cpu_engine.py --benchmark-warmup=on --benchmark-disable-gc

One group per (T, B, H), H = I, float32: torch.nn.LSTM (oneDNN), and tsrnn's LSTM, MTS-LSTM with
its gate traces recorded, coupled and separate pLSTM on the compiled CPU path, each checked first
against what it should compute (bench/cpu_vs_torch.py's `checked_layer`). Targets: the LSTM at most 1.05x
and the coupled pLSTM at most 1.0x torch.nn.LSTM's time at every shape. pytest-benchmark times the
groups one after the other, so the machine's drift lands between them; for ratios measured in
pairs run `python bench/cpu_vs_torch.py --set engine --backend cpu`.
"""
import pytest
import torch

from cpu_vs_torch import SETS, checked_layer, step

SHAPES, KINDS = SETS["engine"]


@pytest.mark.parametrize("kind", ["torch.nn.LSTM", *KINDS])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "T={} B={} H={}".format(*s))
def test_engine(benchmark, shape, kind):
    T, B, H = shape
    benchmark.group = f"cpu engine T={T} B={B} H={H} fwd+bwd"
    x = torch.randn(T, B, H)
    if kind == "torch.nn.LSTM":
        torch.manual_seed(0)
        module, traces = torch.nn.LSTM(H, H), False
    else:
        module, traces, _ = checked_layer(kind, x, "cpu")
    benchmark(step, module, x, traces)
