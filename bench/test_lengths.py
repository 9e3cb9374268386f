"""CPU forward+backward of a variable-length batch: ``lengths=`` against the same batch padded.

    pytest bench/test_lengths.py                       # timings (pytest-benchmark)
    python bench/lengths_vs_padded.py                  # paired ratios, as in bench/RESULTS.md

The shapes and lengths of bench/lengths_vs_padded.py (T=200, B=64, H=256 with lengths U(T/4, T);
the frequency task's T=125, B=32, H=110 with lengths U(15, 125)). Target: the fused CPU path with
lengths at least 1.5x faster than padded, and within 10% of the padded time times the fraction of
real steps. Each module is checked against its reference-backend copy, with lengths, first.
"""
import copy

import pytest
import torch

import tsrnn
from lengths_vs_padded import SHAPES, batch, module
from conftest import checked, fwd_bwd

PATHS = tsrnn.backend.paths_on("cpu", "recurrence")  # what "auto" picks among (the script times "auto" too)


@pytest.mark.parametrize("given", ["padded", "lengths"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cell", ["lstm", "plstm"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_lengths_vs_padded(benchmark, shape, cell, path, given):
    if cell == "plstm" and path == "onednn":
        pytest.skip("oneDNN runs the LSTM cell only")
    benchmark.group = f"{cell} {shape} fwd+bwd"
    m = module(cell, SHAPES[shape], path, "cpu")
    x, lengths = batch(SHAPES[shape], "cpu")
    reference = copy.deepcopy(m)
    reference.backend = "reference"
    checked(m, reference, x[:, :4], lengths=lengths[:4])
    benchmark(fwd_bwd, m, x, lengths=None if given == "padded" else lengths)
