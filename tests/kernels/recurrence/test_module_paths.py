"""Whole modules with torch.nn.LSTM's options, bidirectional and proj_size, on every path that
takes them, against the same module on the reference loops in float64 (tsrnn.testing's
``compare_module`` and ``MODULE_CASES``): forward and the gradients of the input and of every
parameter, padded, with lengths= and packed. A path that cannot run a case is skipped with the
dispatcher's reason (a projected layer runs on torch's LSTM kernels and the reference only; the
Triton interpreter takes the one-step shape only)."""
import pytest
import torch

from tsrnn import testing

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", testing.MODULE_SHAPES, ids=str)
@pytest.mark.parametrize("kind, bidirectional, proj_size, layout", testing.MODULE_CASES,
                         ids=lambda v: str(v))
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_module_matches_the_reference(path, kind, bidirectional, proj_size, layout, shape, dtype):
    reason = testing.module_why_not(path, kind, shape, proj_size, dtype, DEVICE)
    if reason:
        pytest.skip(reason)
    if DEVICE == "cpu" and path.startswith("triton") and shape[0] > 1:
        pytest.skip("too slow for the Triton interpreter")
    result = testing.compare_module(path, kind, shape, dtype, bidirectional, proj_size, layout, DEVICE,
                                    seed=shape[0] + 7 * proj_size)
    assert result.ok, f"{path} {result.cell} {shape} {dtype}: {result.failures()}"
