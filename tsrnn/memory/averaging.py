"""Averaging memory of Salton & Kelleher (docs/equations.md §4, seed 001): the mean of the past hidden states.

The memory at step t holds h_0 = 0 and the top layer's outputs h_1 .. h_{t-1}; the context is

    (S10) m_t = (1/t) Σ_{i=0}^{t-1} h_i

and it restarts (holds h_0 = 0 alone) at the steps the caller marks. ``count_h0=False`` is the
seed's ablation leaving h_0 out: m_t = (1/(t-1)) Σ_{i=1}^{t-1} h_i and m_1 = 0.
"""
from __future__ import annotations

import torch

from tsrnn import _validation as check


def _segment_starts(reset: torch.Tensor | None, steps: int, batch: int, device) -> torch.Tensor:
    """(T, B) int64: the index of the last reset at or before each step (0 if none)."""
    t = torch.arange(steps, device=device)[:, None].expand(steps, batch)
    if reset is None:
        return torch.zeros_like(t)
    return torch.where(reset, t, torch.zeros_like(t)).cummax(dim=0).values


def _initial_memory(state: tuple[torch.Tensor, torch.Tensor] | None, batch: int, size: int, count_h0: bool,
                    like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The memory before the first step: ``state`` checked, or a fresh one (sum 0; count 1 with h_0, else 0)."""
    if state is None:
        return like.new_zeros(batch, size, dtype=torch.float64), \
            torch.full((batch,), int(count_h0), dtype=torch.int64, device=like.device)
    if not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise TypeError(f"state must be a (sum, count) pair, got {type(state).__name__}")
    total, count = state
    check.tensor("state sum", total, 2)
    check.shape("state sum", total, (batch, size))
    if not isinstance(count, torch.Tensor) or count.is_floating_point() or count.is_complex() or count.dtype == torch.bool:
        raise TypeError(f"state count must be an integer tensor, got {getattr(count, 'dtype', type(count).__name__)}")
    check.shape("state count", count, (batch,))
    check.same_device("h", like, **{"state sum": total, "state count": count})
    check.finite("state sum", total)
    return total.to(torch.float64), count.to(torch.int64)


def averaging_context(h: torch.Tensor, reset: torch.Tensor | None = None, batch_first: bool = False,
                      count_h0: bool = True, state: tuple[torch.Tensor, torch.Tensor] | None = None,
                      return_state: bool = False
                      ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """(S10) The averaging-memory context m for every step of a sequence of hidden states.

    h (T, B, H) (``(B, T, H)`` if ``batch_first``): the outputs h_1 .. h_T of the top layer, so
    0-indexed step t sees the memory {h_0 = 0, h[0], ..., h[t-1]} and

        m[t] = sum(h[:t]) / (t + 1),     m[0] = 0.

    reset (T, B) (``(B, T)`` if ``batch_first``), bool or 0/1, or None: True marks the first step
    of a document, where the memory restarts (m = 0); later, with r the last reset,
    m[t] = sum(h[r:t]) / (t - r + 1). count_h0=False: m[t] = sum(h[r:t]) / (t - r), m[r] = 0.

    state: the memory carried in from the previous window, a pair (sum (B, H), count (B,) int64)
    (h_0 counts as one entry); None: a fresh memory. Until a column's first reset,
    m[t] = (sum + sum(h[:t])) / (count + t) (0 if that count is 0). With ``return_state``, returns
    (m, the memory after the last step); windows fed in order, each with the previous state,
    give the whole stream's context to float rounding.

    Returns m with the shape and dtype of h, differentiable in h and the carried sum. Prefix sums
    are float64 (bench/RESULTS.md); h is checked for NaN/Inf (docs/equations.md §8).
    """
    check.tensor("h", h, 3)
    check.finite("h", h)
    count_h0 = check.flag("count_h0", count_h0)
    if batch_first:
        h = h.transpose(0, 1)
    steps, batch, size = h.shape
    if reset is not None:
        reset = check.reset_mask(reset, steps, batch, batch_first, "h", h)
    carried_sum, carried_count = _initial_memory(state, batch, size, count_h0, h)

    x = h.to(torch.float64)
    # before[t] = sum(h[:t]) for t = 0..T
    before = torch.cat([x.new_zeros(1, batch, size), torch.cumsum(x, dim=0)], dim=0)  # (T + 1, B, H)
    t = torch.arange(steps + 1, device=h.device)[:, None]
    if reset is None:  # every step in the carried-in segment
        total, count = before + carried_sum, t + carried_count
    else:
        reset = torch.cat([reset, reset.new_zeros(1, batch)])  # and none after the last step
        start = _segment_starts(reset, steps + 1, batch, h.device)
        carried = reset.cumsum(dim=0) == 0  # no reset yet: the memory carried in
        total = before - torch.gather(before, 0, start[:, :, None].expand_as(before)) \
            + torch.where(carried[:, :, None], carried_sum, 0.0)
        count = t - start + torch.where(carried, carried_count, int(count_h0))
    m = (total[:steps] / count[:steps, :, None].clamp(min=1)).to(h.dtype)  # count 0: the sum is 0 too
    m = m.transpose(0, 1) if batch_first else m
    return (m, (total[steps], count[steps])) if return_state else m
