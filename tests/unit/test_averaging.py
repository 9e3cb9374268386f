"""(S10) averaging memory: the cumsum form against a literal memory-list loop, the docs/equations.md §4 checks,
resets, gradients, float32 precision, batch_first, the ablation without h_0 (count_h0=False), the memory
carried across windows (state) and bad arguments."""
import pytest
import torch

from tsrnn.memory.averaging import averaging_context
from tsrnn.testing import TOLERANCE
from conftest import assert_close

T, B, H = 23, 3, 4  # T != B != H, so a transposed layout cannot pass by accident
NAN, INF = float("nan"), float("inf")


def _reference(h, reset=None, count_h0=True, memories=None):
    """(S10) literally: a memory list that starts as [h_0 = 0] ([] without h_0, or column b's
    ``memories[b]``), is averaged (an empty one: 0) before each step's h joins it, and restarts
    as [h_0 = 0] ([]) at each reset step. h (T, B, H), reset (T, B). Returns the contexts and
    the memories after the last step."""
    steps, batch, _ = h.shape
    fresh = [torch.zeros_like(h[0, 0])] if count_h0 else []
    out = torch.zeros_like(h)
    memories = [list(fresh) for _ in range(batch)] if memories is None else [list(m) for m in memories]
    for b, memory in enumerate(memories):
        for t in range(steps):
            if reset is not None and bool(reset[t, b]):
                memory[:] = fresh
            if memory:
                out[t, b] = torch.stack(memory).mean(dim=0)
            memory.append(h[t, b])
    return out, memories


def _oracle(h, reset=None, count_h0=True):
    return _reference(h, reset, count_h0)[0]


def _random_reset(steps, batch, p, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(steps, batch, generator=g) < p


@pytest.mark.parametrize("p", [0.0, 0.15, 0.5, 1.0])
def test_matches_memory_loop_float64(p):
    torch.manual_seed(0)
    h = torch.randn(T, B, H, dtype=torch.float64)
    reset = _random_reset(T, B, p, seed=1)
    assert_close(averaging_context(h, reset), _oracle(h, reset), TOLERANCE["float64 reordered"], f"p={p}")


def test_matches_memory_loop_without_reset():
    torch.manual_seed(1)
    h = torch.randn(T, B, H, dtype=torch.float64)
    assert_close(averaging_context(h), _oracle(h), TOLERANCE["float64 reordered"], "no reset")


def test_spec_checks_first_step_zero_and_all_ones():
    """docs/equations.md §4: m_1 = 0; with every h_j = 1 (j >= 1), m_t = (t-1)/t (1-indexed steps)."""
    torch.manual_seed(2)
    m = averaging_context(torch.randn(T, B, H, dtype=torch.float64))
    assert torch.equal(m[0], torch.zeros(B, H, dtype=torch.float64))
    ones = averaging_context(torch.ones(T, B, H, dtype=torch.float64))
    t = torch.arange(1, T + 1, dtype=torch.float64)[:, None, None]
    torch.testing.assert_close(ones, ((t - 1) / t).expand(T, B, H), atol=1e-15, rtol=0)


def test_reset_restarts_memory_by_hand():
    """h = 1..6 in one column, reset at the 0-indexed steps 0 and 3:
    memories {0}, {0,1}, {0,1,2} | {0}, {0,4}, {0,4,5}."""
    h = torch.arange(1.0, 7.0, dtype=torch.float64)[:, None, None]
    reset = torch.tensor([1, 0, 0, 1, 0, 0])[:, None]
    expected = torch.tensor([0.0, 1 / 2, 3 / 3, 0.0, 4 / 2, 9 / 3], dtype=torch.float64)
    torch.testing.assert_close(averaging_context(h, reset)[:, 0, 0], expected, atol=1e-15, rtol=0)


def test_reset_dtypes_agree():
    """A bool mask, an integer 0/1 mask and a float 0/1 mask mean the same thing."""
    torch.manual_seed(3)
    h = torch.randn(T, B, H, dtype=torch.float64)
    reset = _random_reset(T, B, 0.3, seed=4)
    want = averaging_context(h, reset)
    for mask in (reset.long(), reset.to(torch.uint8), reset.double()):
        assert torch.equal(averaging_context(h, mask), want)


def test_batch_first():
    torch.manual_seed(5)
    h = torch.randn(T, B, H, dtype=torch.float64)
    reset = _random_reset(T, B, 0.3, seed=6)
    m = averaging_context(h.transpose(0, 1), reset.T, batch_first=True)
    assert m.shape == (B, T, H)
    assert_close(m.transpose(0, 1), _oracle(h, reset), TOLERANCE["float64 reordered"], "batch_first")


@pytest.mark.parametrize("count_h0", [True, False])
def test_gradcheck(count_h0):
    torch.manual_seed(7)
    h = torch.randn(9, 2, 3, dtype=torch.float64, requires_grad=True)
    reset = _random_reset(9, 2, 0.3, seed=8)
    assert torch.autograd.gradcheck(lambda x: averaging_context(x, reset, count_h0=count_h0), (h,))
    assert torch.autograd.gradcheck(lambda x: averaging_context(x, count_h0=count_h0), (h,))


@pytest.mark.parametrize("count_h0", [True, False])
def test_gradient_float32_matches_loop(count_h0):
    torch.manual_seed(9)
    h = torch.randn(T, B, H, requires_grad=True)
    reset = _random_reset(T, B, 0.3, seed=10)
    weight = torch.randn(T, B, H)
    (grad,) = torch.autograd.grad((averaging_context(h, reset, count_h0=count_h0) * weight).sum(), h)
    h64 = h.detach().double().requires_grad_()
    (grad64,) = torch.autograd.grad((_oracle(h64, reset, count_h0) * weight.double()).sum(), h64)
    assert grad.dtype == torch.float32
    assert_close(grad, grad64, TOLERANCE[torch.float32], "grad h")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_output_dtype_and_error(dtype):
    torch.manual_seed(11)
    h = torch.randn(T, B, H).to(dtype)
    reset = _random_reset(T, B, 0.2, seed=12)
    m = averaging_context(h, reset)
    assert m.dtype == dtype
    assert_close(m, _oracle(h.double(), reset), TOLERANCE[dtype], str(dtype))


def test_float32_long_sequence_with_resets_does_not_cancel():
    """Prefix sums in float32 lose ~2e-4 here (segment sums are differences of sums near 5e3);
    the float64 accumulation keeps the float32 result within its final rounding."""
    g = torch.Generator().manual_seed(13)
    steps = 10_000
    h64 = torch.rand(steps, 2, 8, generator=g, dtype=torch.float64) * 2 - 0.5
    reset = torch.rand(steps, 2, generator=g) < 0.01
    want = averaging_context(h64, reset)  # float64 throughout, checked against the loop above
    got = averaging_context(h64.float(), reset)
    assert_close(got, want, TOLERANCE["averaging float32"], "float32, 10,000 steps")


# --------------------------------------------------------------------------------------------
# Without h_0 (count_h0=False, the ablation of seed 001 §6.3)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count_h0", [True, False])
@pytest.mark.parametrize("steps, batch", [(T, B), (1, B), (T, 1), (1, 1)])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_both_forms_match_memory_loop_float64(count_h0, steps, batch, p):
    torch.manual_seed(14)
    h = torch.randn(steps, batch, H, dtype=torch.float64)
    reset = _random_reset(steps, batch, p, seed=15)
    for mask in (reset, None):
        want = _oracle(h, mask, count_h0)
        assert_close(averaging_context(h, mask, count_h0=count_h0), want, TOLERANCE["float64 reordered"],
                     f"count_h0={count_h0}")


def test_without_h0_by_hand():
    """h = 1..6 in one column, reset at the 0-indexed steps 0 and 3: memories {}, {1}, {1,2} | {}, {4}, {4,5}."""
    h = torch.arange(1.0, 7.0, dtype=torch.float64)[:, None, None]
    reset = torch.tensor([1, 0, 0, 1, 0, 0])[:, None]
    expected = torch.tensor([0.0, 1 / 1, 3 / 2, 0.0, 4 / 1, 9 / 2], dtype=torch.float64)
    torch.testing.assert_close(averaging_context(h, reset, count_h0=False)[:, 0, 0], expected, atol=1e-15, rtol=0)
    ones = averaging_context(torch.ones(T, B, H, dtype=torch.float64), count_h0=False)
    assert torch.equal(ones[0], torch.zeros(B, H, dtype=torch.float64)) and torch.equal(ones[1:], torch.ones_like(ones[1:]))


# --------------------------------------------------------------------------------------------
# The memory carried across windows (state, return_state)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count_h0", [True, False])
@pytest.mark.parametrize("p", [0.0, 0.1])
def test_windows_with_carried_state_are_the_whole_stream(count_h0, p):
    """Windows of 7, 1 and 15 steps, each from the state the previous one returned, give the
    contexts of the 23 steps at once; the state is the loop's memory (sum, number of entries)."""
    torch.manual_seed(16)
    h = torch.randn(T, B, H, dtype=torch.float64)
    reset = _random_reset(T, B, p, seed=17)
    whole, memories = _reference(h, reset, count_h0)
    state, parts = None, []
    for lo, hi in ((0, 7), (7, 8), (8, T)):
        m, state = averaging_context(h[lo:hi], reset[lo:hi], count_h0=count_h0, state=state, return_state=True)
        parts.append(m)
    assert_close(torch.cat(parts), whole, TOLERANCE["float64 reordered"], "windows")
    total, count = state
    assert count.dtype == torch.int64 and count.tolist() == [len(memory) for memory in memories]
    assert_close(total, torch.stack([torch.stack(memory).sum(0) for memory in memories]),
                 TOLERANCE["float64 reordered"], "state sum")


def test_fresh_state_is_h0_alone_or_empty():
    h = torch.randn(4, 2, 3, dtype=torch.float64)
    for count_h0, entries in ((True, 1), (False, 0)):
        _, (total, count) = averaging_context(h[:0], count_h0=count_h0, return_state=True)
        assert torch.equal(total, torch.zeros(2, 3, dtype=torch.float64)) and count.tolist() == [entries] * 2
        m, _ = averaging_context(h, count_h0=count_h0, state=(total, count), return_state=True)
        assert torch.equal(m, averaging_context(h, count_h0=count_h0))


# --------------------------------------------------------------------------------------------
# Bad arguments (docs/equations.md §8)
# --------------------------------------------------------------------------------------------
BAD = {
    # id: (h, reset, kwargs, exception, match)
    "h-2d": (lambda: torch.randn(T, H), None, {}, ValueError, r"h must have 3 dimensions"),
    "h-4d": (lambda: torch.randn(T, B, H, 1), None, {}, ValueError, r"h must have 3 dimensions"),
    "h-int": (lambda: torch.ones(T, B, H, dtype=torch.int64), None, {}, TypeError, r"h must be a floating-point"),
    "h-list": (lambda: [[[1.0]]], None, {}, TypeError, r"h must be a torch.Tensor"),
    "h-nan": (lambda: torch.randn(T, B, H).index_fill_(0, torch.tensor([5]), NAN), None, {}, ValueError,
              r"h must be finite"),
    "h-inf": (lambda: torch.randn(T, B, H).index_fill_(0, torch.tensor([5]), INF), None, {}, ValueError,
              r"h must be finite"),
    "reset-shape": (lambda: torch.randn(T, B, H), lambda: torch.zeros(T, B + 1, dtype=torch.bool), {},
                    ValueError, r"reset must have shape \(23, 3\)"),
    "reset-time-major-with-batch-first": (lambda: torch.randn(B, T, H), lambda: torch.zeros(T, B, dtype=torch.bool),
                                          {"batch_first": True}, ValueError, r"reset must have shape \(3, 23\)"),
    "reset-3d": (lambda: torch.randn(T, B, H), lambda: torch.zeros(T, B, 1, dtype=torch.bool), {}, ValueError,
                 r"reset must have shape"),
    "reset-values": (lambda: torch.randn(T, B, H), lambda: torch.full((T, B), 2), {}, ValueError,
                     r"reset must hold only 0 and 1"),
    "reset-list": (lambda: torch.randn(T, B, H), lambda: [[True] * B] * T, {}, TypeError,
                   r"reset must be a torch.Tensor"),
    "count_h0-int": (lambda: torch.randn(T, B, H), None, {"count_h0": 0}, TypeError, r"count_h0 should be of type bool, got: int; count_h0 must be True or False, got 0"),
    "state-single": (lambda: torch.randn(T, B, H), None, {"state": torch.zeros(B, H)}, TypeError,
                     r"state must be a \(sum, count\) pair"),
    "state-sum-shape": (lambda: torch.randn(T, B, H), None, {"state": (torch.zeros(B, H + 1), torch.ones(B, dtype=torch.long))},
                        ValueError, r"state sum must have shape \(3, 4\)"),
    "state-count-float": (lambda: torch.randn(T, B, H), None, {"state": (torch.zeros(B, H), torch.ones(B))}, TypeError,
                          r"state count must be an integer tensor"),
    "state-count-shape": (lambda: torch.randn(T, B, H), None, {"state": (torch.zeros(B, H), torch.ones(B, 1, dtype=torch.long))},
                          ValueError, r"state count must have shape \(3,\)"),
    "state-sum-nan": (lambda: torch.randn(T, B, H), None, {"state": (torch.full((B, H), NAN), torch.ones(B, dtype=torch.long))},
                      ValueError, r"state sum must be finite"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_arguments(case):
    make_h, make_reset, kwargs, exception, match = BAD[case]
    with pytest.raises(exception, match=match):
        averaging_context(make_h(), None if make_reset is None else make_reset(), **kwargs)
