"""The copy tasks (seed 002 §4.1, A.3): the sequences and their scoring.

m = 8 symbols a_0..a_7 (ids 0..7), the blank a_8 (id 8) and the
signal a_9 (id 9). Input: n = 10 random symbols, T blanks, the signal, n - 1 blanks; target:
n + T blanks, then the n symbols, so both have T + 2n steps and the reproduction starts at the
step of the signal. A memoryless model predicts the blank, then uniform symbols, and scores
the cross-entropy n log m / (T + 2n) (``copy_baseline_loss``). The variable copy task (A.3) draws
T ~ U{T_1, ..., T_2} per sequence; sequences are padded at the end with blank inputs and the
target ``IGNORE_INDEX`` (-100, ``torch.nn.functional.cross_entropy``'s default); ``copy_lengths``
gives each column's own steps, which the model passes to its recurrent layer.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import torch

from tsrnn import _validation as check

__all__ = ["IGNORE_INDEX", "copy_task", "variable_copy_task", "copy_lengths", "copy_baseline_loss",
           "copy_accuracy", "copy_sequence_accuracy"]

IGNORE_INDEX = -100


def _generator(generator):
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def _copy(delays: torch.Tensor, n_copy: int, n_symbols: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y (L, B) for per-column delays (B,) int64; L = max(delay) + 2 n_copy."""
    batch = delays.shape[0]
    blank, signal = n_symbols, n_symbols + 1
    steps = int(delays.max()) + 2 * n_copy
    symbols = torch.randint(n_symbols, (n_copy, batch), generator=generator)
    t = torch.arange(steps)[:, None]                       # (L, 1)
    start = (n_copy + delays)[None, :]                     # (1, B): signal and first output step
    end = start + n_copy                                   # (1, B): length of each column
    x = torch.full((steps, batch), blank, dtype=torch.int64)
    x[:n_copy] = symbols
    x = torch.where(t == start, torch.full_like(x, signal), x)
    offset = (t - start).clamp(0, n_copy - 1).expand(steps, batch)
    y = torch.where((t >= start) & (t < end), symbols.gather(0, offset), torch.full_like(x, blank))
    y = torch.where(t >= end, torch.full_like(y, IGNORE_INDEX), y)
    return x, y


def copy_task(batch_size: int, delay: int, n_copy: int = 10, n_symbols: int = 8,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy task of seed 002 §4.1 with delay T = ``delay``.

    Returns x, y (T + 2 n_copy, batch_size) int64: x holds n_copy symbols drawn uniformly from
    0..n_symbols-1, T blanks (id n_symbols), the signal (id n_symbols + 1) and n_copy - 1 blanks;
    y holds n_copy + T blanks and then the n_copy symbols. Draws use ``generator``.
    The seed: n_symbols = 8, n_copy = 10, T in {200, 500, 1000}, batch 128.
    """
    batch_size = check.count("batch_size", batch_size)
    delay = check.count("delay", delay, minimum=0)
    n_copy = check.count("n_copy", n_copy)
    n_symbols = check.count("n_symbols", n_symbols)
    return _copy(torch.full((batch_size,), delay, dtype=torch.int64), n_copy, n_symbols, _generator(generator))


def variable_copy_task(batch_size: int, delay_range: tuple[int, int], n_copy: int = 10, n_symbols: int = 8,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The variable copy task of seed 002 A.3: each column has its own delay T ~ U{T_1, ..., T_2}.

    Returns x, y (max T + 2 n_copy, batch_size) int64, laid out per column as in ``copy_task``
    and padded after the column's T + 2 n_copy steps with blank inputs and ``IGNORE_INDEX``
    targets. The seed: T ~ U[200, 500] and U[200, 1000]. Each column's delay is the position of
    its signal minus n_copy.
    """
    batch_size = check.count("batch_size", batch_size)
    if isinstance(delay_range, (str, bytes)) or not isinstance(delay_range, Sequence) or len(delay_range) != 2:
        raise ValueError(f"delay_range must be a pair (T_1, T_2), got {delay_range!r}")
    low = check.count("delay_range[0]", delay_range[0], minimum=0)
    high = check.count("delay_range[1]", delay_range[1], minimum=0)
    if low > high:
        raise ValueError(f"delay_range must have T_1 <= T_2, got {delay_range!r}")
    n_copy = check.count("n_copy", n_copy)
    n_symbols = check.count("n_symbols", n_symbols)
    generator = _generator(generator)
    delays = torch.randint(low, high + 1, (batch_size,), generator=generator)
    return _copy(delays, n_copy, n_symbols, generator)


def copy_lengths(y: torch.Tensor) -> torch.Tensor:
    """(B,) int64: the steps of each column of targets y (L, B) before its padding (the
    ``IGNORE_INDEX`` targets at its end): T_b + 2 n_copy for ``variable_copy_task``, L for
    ``copy_task``."""
    if not isinstance(y, torch.Tensor) or y.dtype.is_floating_point or y.dim() != 2:
        raise TypeError("y must be a 2-D integer tensor of targets (L, B)")
    return (y != IGNORE_INDEX).sum(0)


def copy_baseline_loss(delay, n_copy: int = 10, n_symbols: int = 8) -> float:
    """Cross-entropy per target step of the memoryless strategy: n_copy log(n_symbols) / (T + 2 n_copy).

    ``delay``: the T of ``copy_task``, or the per-column delays of a variable batch (sequence or
    tensor), for which it is the mean over all non-ignored target steps, as
    ``F.cross_entropy(..., ignore_index=IGNORE_INDEX)`` averages:
    n_copy log(n_symbols) B / Σ_b (T_b + 2 n_copy).
    """
    n_copy = check.count("n_copy", n_copy)
    n_symbols = check.count("n_symbols", n_symbols)
    if isinstance(delay, numbers.Integral) and not isinstance(delay, bool):
        delays = [check.count("delay", delay, minimum=0)]
    else:
        delays = torch.as_tensor(delay).reshape(-1).tolist() if isinstance(delay, torch.Tensor) else list(delay)
        if not delays:
            raise ValueError("delay must be an int or a non-empty sequence of ints")
        delays = [check.count(f"delay[{k}]", d, minimum=0) for k, d in enumerate(delays)]
    return n_copy * math.log(n_symbols) * len(delays) / sum(d + 2 * n_copy for d in delays)


def copy_accuracy(logits: torch.Tensor, y: torch.Tensor, n_symbols: int | None = None) -> float:
    """Fraction of reproduced symbols predicted right (seed 002: correct out of the n_copy targets).

    logits (L, B, C), y (L, B) from ``copy_task``/``variable_copy_task``. Only the reproduction
    steps count: targets in 0..n_symbols-1 (n_symbols defaults to C - 2: symbols, blank, signal);
    blank and ignored steps do not. The prediction is the argmax over all C classes.
    """
    check.tensor("logits", logits, 3)
    if not isinstance(y, torch.Tensor) or y.dtype.is_floating_point or y.dim() != 2:
        raise TypeError("y must be a 2-D integer tensor of targets (L, B)")
    check.shape("y", y, logits.shape[:2])
    check.same_device("logits", logits, y=y)
    n_symbols = logits.shape[-1] - 2 if n_symbols is None else check.count("n_symbols", n_symbols)
    mask = (y >= 0) & (y < n_symbols)
    if not bool(mask.any()):
        raise ValueError("y has no reproduction steps (targets in 0..n_symbols-1)")
    return (logits.argmax(dim=-1) == y)[mask].double().mean().item()


def copy_sequence_accuracy(logits: torch.Tensor, y: torch.Tensor, n_symbols: int | None = None) -> float:
    """Fraction of sequences whose every reproduced symbol is right (arguments as ``copy_accuracy``)."""
    copy_accuracy(logits, y, n_symbols)  # the same checks
    n_symbols = logits.shape[-1] - 2 if n_symbols is None else n_symbols
    mask = (y >= 0) & (y < n_symbols)
    wrong = ((logits.argmax(dim=-1) != y) & mask).any(dim=0)
    return 1.0 - wrong.double().mean().item()
