"""Property-based checks (hypothesis): random shapes and values, each fused CPU path against the
float64 reference, and invariants of the cells that hold for any input."""
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tsrnn import functional, testing  # noqa: E402
from tsrnn.ops.recurrence import cells

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
sizes = st.tuples(st.integers(1, 12), st.integers(1, 5), st.integers(1, 9), st.integers(1, 40))


@SETTINGS
@given(cell=st.sampled_from(list(cells.CELLS)), shape=sizes, seed=st.integers(0, 2**31 - 1),
       path=st.sampled_from(["cpu", "onednn"]), dtype=st.sampled_from([torch.float64, torch.float32]))
def test_fused_cpu_paths_match_the_reference(cell, shape, seed, path, dtype):
    assume(testing.why_not(path, cell, shape, dtype, "cpu") is None)
    result = testing.compare(path, cell, shape, dtype, dt=cells.get(cell).params != () and seed % 2 == 0, seed=seed)
    assert result.ok, result.failures()


@SETTINGS
@given(shape=sizes, seed=st.integers(0, 2**31 - 1), scale=st.floats(0.1, 30.0))
def test_plstm_age_and_forget_gate_bounds(shape, seed, scale):
    """For any input: the age stays in [0, a0 + sum of dt]; 0 < f <= 1 + eps (the denominator of
    (S9) exceeds the numerator by at most eps); |h| < 1."""
    T, B, I, H = shape
    args = testing.layer_args("plstm_coupled", T, B, I, H, seed=seed, dt=True)
    args["x"] = args["x"] * scale
    out, (h, c, a), forget = functional.plstm(**args, return_forget=True)
    assert (a >= 0).all() and (a <= args["a0"] + args["dt"].sum(0)[:, None] + 1e-9).all()
    assert (forget > 0).all() and (forget <= 1 + 1e-3 + 1e-12).all()
    assert out.abs().max() <= 1
