"""Whole training steps (forward, backward, an SGD step) of tsrnn.LSTM, the multi-timescale LSTM and
tsrnn.PowerLawLSTM captured as CUDA graphs on every CUDA path, and under
torch.compile(mode="reduce-overhead"): replays compute what eager steps compute. Skipped without a
GPU; run by bench/gpu_report.py. The capture-time rules themselves are tested on the CPU
(tests/unit/test_graph_capture.py); bench/cuda_graphs.py times the replays.

The bound: the same kernels on the same values, so only the order of reductions may differ (the
GEMMs' split and the gradient atomics): 1e-4 absolute after a few steps of a loss of order one.
"""
import os
import sys

import pytest
import torch

from tsrnn import backend, testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import cuda_graphs  # noqa: E402  (bench/, beside the GPU report)

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
SHAPE = (6, 4, 40)  # (T, B, H): small, so every path serves it
BOUND = 1e-4
CASES = [(kind, path) for kind, paths in cuda_graphs.PATHS.items() for path in paths]


def refused(kind, path):
    if path == "auto" or path not in backend.REGISTRY:
        return None if path == "auto" else f"{path} is not registered in this build"
    cell = "plstm_coupled" if kind == "plstm" else "lstm"
    T, B, H = SHAPE
    return testing.why_not(path, cell, (T, B, H, H), torch.float32, "cuda")


@pytest.mark.parametrize("kind, path", CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_a_replayed_training_step_computes_the_eager_step(kind, path):
    reason = refused(kind, path)
    if reason:
        pytest.skip(reason)
    result = cuda_graphs.compare(kind, path, SHAPE, torch.device("cuda"))
    assert result["out_max_diff"] <= BOUND and result["param_max_diff"] <= BOUND, result


@pytest.mark.parametrize("kind", list(cuda_graphs.PATHS))
def test_reduce_overhead_compiles_and_computes_the_eager_step(kind):
    """torch.compile(mode="reduce-overhead") of the module (its cudagraph trees): the same outputs
    and gradients as the eager module, from the same weights and input."""
    T, B, H = SHAPE
    x = torch.randn(T, B, H, device="cuda")
    eager = cuda_graphs.model(kind, H, "auto", torch.device("cuda"))
    twin = cuda_graphs.model(kind, H, "auto", torch.device("cuda"))
    compiled = torch.compile(twin, mode="reduce-overhead")
    for _ in range(3):  # the first calls record, the later ones replay
        want = eager(x)[0]
        got = compiled(x)[0]
        want.square().mean().backward()
        got.square().mean().backward()
    torch.testing.assert_close(got, want, rtol=0, atol=BOUND)
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=BOUND, msg=name)
