"""Benchmarks check correctness before they time (llm.c discipline): see `checked`."""
import pytest
import torch

from tsrnn import backend


def pytest_collection_modifyitems(items):
    if not backend.native_available():
        skip = pytest.mark.skip(reason=f"tsrnn._C not loaded: {backend.LOAD_ERROR}")
        for item in items:
            item.add_marker(skip)


def fwd_bwd(module, x, **kwargs):
    """One training step's recurrent work: forward, then backward through every parameter."""
    out = module(x, **kwargs)[0]
    out.sum().backward()
    return out


def checked(module, reference_module, x, atol=1e-4, **kwargs):
    """Assert that ``module`` computes what ``reference_module`` does on ``x`` before timing."""
    with torch.no_grad():
        out, ref = module(x, **kwargs)[0], reference_module(x, **kwargs)[0]
    err = (out - ref).abs().max().item()
    assert err < atol, f"benchmarked module disagrees with its reference: max error {err:.2e}"
