"""The three contexts of Jacques & Sederberg's MLP language model (docs/equations.md §5, seed 004).

Each maps word embeddings u (T, B, D) to a context (T, B, n, D) of n slots, so the Bengio MLP that
reads it (flatten the slots, tanh hidden layer, softmax) does not care which one it gets:

- ``BufferContext(n)``: the FIFO buffer, slot i = u_{t-i} (seed 004 Figure 2);
- ``TILTContext(n)``: the first n τ* of TILT, slot i = f~_t(τ*_i) (Figure 3); ``drop`` removes
  some of them (Experiment 4);
- ``TILTBufferContext(n)``: a buffer of TILT's first τ*, slot i = f~_{t-i}(τ*_0) (Figure 4).

All three are fixed causal convolutions with no parameters, slot_i(t) = Σ_j K[i, j] u_{t-j};
``kernels(length)`` returns K (n, length) in float64. reset (T, B) marks document starts: slots
that reach before the last one hold zeros. With ``return_state=True`` a context returns
``(output, state)``; windows of a stream fed in order, each with the previous window's state
(None first), give the whole stream's output to float rounding (each class says its state).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from tsrnn import _validation as check
from tsrnn.memory.averaging import _segment_starts
from tsrnn.memory.tilt import TILT

# Seed 004's grid τ* = τ_0 (1 + c)^n, every 6th kept (its Fig. 3: "τ* 4" at 5.56 = 1.1^18); k, g
# as its authors' code (compmem).
PAPER: dict[str, Any] = {"tau_min": 1.0, "c": 0.1, "every": 6, "k": 4, "g": 0.0}


def _time_major(u, reset, batch_first):
    """Check u (and reset); return both time-major, reset as bool (T, B) or None."""
    check.tensor("u", u, 3)
    if batch_first:
        u = u.transpose(0, 1)
    steps, batch, _ = u.shape
    if steps < 1 or batch < 1:
        raise ValueError(f"u must have at least one step and one batch row, got shape {tuple(u.shape)}")
    check.finite("u", u)
    if reset is not None:
        reset = check.reset_mask(reset, steps, batch, batch_first, "u", u)
    return u, reset


def _check_past(past, n, x):
    """The buffer's carried state: None or (B, n-1, D) on x's device (x time-major (T, B, D))."""
    if past is not None:
        check.tensor("state", past, 3)
        check.shape("state", past, (x.shape[1], n - 1, x.shape[2]))
        check.same_device("u", x, state=past)
        check.finite("state", past)
    return past


def _buffer(x, n, reset, past=None):
    """(T, B, D) -> (T, B, n, D) and the state P (B, n-1, D) after the last step: slot i at step t
    holds x[t - i] (past[:, i - t - 1] for t < i; None: zeros), zero before the last reset."""
    if past is not None:
        x = torch.cat([past.to(x.dtype).flip(1).transpose(0, 1), x])
        if reset is not None:
            reset = torch.cat([reset.new_zeros((n - 1,) + reset.shape[1:]), reset])
    steps, batch, _ = x.shape
    start = _segment_starts(reset, steps, batch, x.device)  # (T, B)
    t = torch.arange(steps, device=x.device)[:, None]
    slots = []
    for i in range(n):
        lag = min(i, steps)
        shifted = torch.cat([x.new_zeros((lag,) + x.shape[1:]), x[: steps - lag]], dim=0)
        if reset is not None:
            shifted = torch.where((t - i >= start)[:, :, None], shifted, torch.zeros_like(shifted))
        slots.append(shifted)
    y = torch.stack(slots, dim=2)
    if past is not None:
        y = y[n - 1:]
    return y, y[-1, :, :n - 1]


def _kept(n, drop):
    """The slots 0..n-1 not in ``drop`` (a sequence of distinct slot indices, not all of them)."""
    if isinstance(drop, (str, bytes)) or not hasattr(drop, "__iter__"):
        raise TypeError(f"drop must be a sequence of slot indices, got {type(drop).__name__}")
    drop = [check.index(f"drop[{j}]", i, n) for j, i in enumerate(drop)]
    if len(set(drop)) != len(drop):
        raise ValueError(f"drop names a slot twice: {drop}")
    keep = [i for i in range(n) if i not in drop]
    if not keep:
        raise ValueError(f"drop removes all {n} slots; keep at least one")
    return keep


def _batch_layout(y, batch_first):
    return y.transpose(0, 1) if batch_first else y


class BufferContext(nn.Module):
    """The FIFO buffer of the last n embeddings (seed 004, Buffer-MLP): slot i = u_{t-i}.

    ``forward(u, reset=None, state=None, return_state=False)``: u (T, B, D) (``(B, T, D)`` if
    ``batch_first``), reset (T, B) bool or 0/1 -> (T, B, n, D) (``(B, T, n, D)``). ``state`` P
    (B, n-1, D): the last n-1 inputs before u, newest first (None: zeros). With ``return_state``,
    returns (output, P after u).
    """

    def __init__(self, n: int, batch_first: bool = False) -> None:
        super().__init__()
        self.n = check.count("n", n)
        self.batch_first = bool(batch_first)

    @property
    def slots(self) -> int:
        """The number of slots the context outputs: n."""
        return self.n

    def extra_repr(self) -> str:
        return f"n={self.n}, batch_first={self.batch_first}"

    def kernels(self, length: int) -> torch.Tensor:
        """K (n, length) float64: K[i, j] = 1 if j == i (slot i is the input i steps back)."""
        check.count("length", length)
        return torch.eye(self.n, length, dtype=torch.float64)

    def forward(self, u: torch.Tensor, reset: torch.Tensor | None = None, state: torch.Tensor | None = None,
                return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        u, reset = _time_major(u, reset, self.batch_first)
        y, state = _buffer(u, self.n, reset, _check_past(state, self.n, u))
        y = _batch_layout(y, self.batch_first)
        return (y, state) if return_state else y


class TILTContext(nn.Module):
    """The first n τ* of TILT (seed 004, TILT-MLP): slot i = f~_t(τ*_i) (S11-S12).

    τ*_i = tau_min (1 + c)^(every i), i = 0 .. n-1: TILT runs on the ``every`` times finer grid
    (S12) and the context keeps every ``every``-th output; defaults (``PAPER``) give τ* = 1, 1.77,
    3.14, 5.56, ... ``drop`` (Experiment 4): indices in 0..n-1 of τ* to remove (distinct, not all);
    the m = n - len(drop) other slots keep their order and τ*. k, g, dt, integrate, method: as in
    ``tsrnn.TILT``.

    ``forward(u, reset=None, state=None, return_state=False)``: u (T, B, D) -> (T, B, m, D);
    state: TILT's integrators F (B, N + 2k, D) float64 (None: zeros). With ``return_state``,
    returns (output, F after u). ``tau_star`` (m,) float64: the kept τ*; ``tilt``: the wrapped
    ``tsrnn.TILT`` (every·(n-1)+1 τ*, at least 2).
    """

    def __init__(self, n: int, tau_min: float = PAPER["tau_min"], c: float = PAPER["c"],
                 every: int = PAPER["every"], k: int = PAPER["k"], g: float = PAPER["g"], dt: float = 1.0,
                 integrate: str = "exact", batch_first: bool = False, method: str = "auto",
                 drop: Sequence[int] = ()) -> None:
        super().__init__()
        self.n = check.count("n", n)
        self.keep = _kept(self.n, drop)
        self.every = check.count("every", every)
        self.c = check.positive_real("c", c)
        tau_min = check.positive_real("tau_min", tau_min)
        n_taus = max(2, self.every * (self.n - 1) + 1)  # the kernels of the first τ* do not depend on N
        self.tilt = TILT(n_taus=n_taus, tau_min=tau_min, tau_max=tau_min * (1.0 + self.c) ** (n_taus - 1),
                         k=k, g=g, dt=dt, integrate=integrate, method=method)
        self.batch_first = bool(batch_first)

    @property
    def slots(self) -> int:
        """The number of slots the context outputs: n less the dropped τ*."""
        return len(self.keep)

    def extra_repr(self) -> str:
        dropped = [i for i in range(self.n) if i not in self.keep]
        return (f"n={self.n}, c={self.c}, every={self.every}, batch_first={self.batch_first}"
                + (f", drop={dropped}" if dropped else ""))

    @property
    def _rows(self) -> list[int]:
        """The kept slots' rows in the wrapped TILT's fine grid."""
        return [self.every * i for i in self.keep]

    @property
    def tau_star(self) -> torch.Tensor:
        return self.tilt.tau_star[self._rows]

    def kernels(self, length: int) -> torch.Tensor:
        """K (m, length) float64: the receptive fields g_τ*(j) of the kept slots."""
        return self.tilt.kernels(length)[self._rows]

    def forward(self, u: torch.Tensor, reset: torch.Tensor | None = None, state: torch.Tensor | None = None,
                return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        u, reset = _time_major(u, reset, self.batch_first)
        y, state = self.tilt(u, state=state, reset=reset)  # (T, B, N, D)
        y = _batch_layout(y[:, :, self._rows], self.batch_first)
        return (y, state) if return_state else y


class TILTBufferContext(nn.Module):
    """A buffer of TILT's first τ* over the last n steps (seed 004, TILT-Buffer-MLP):
    slot i = f~_{t-i}(τ*_0), zero for steps before the sequence start or the last reset.

    tau_min (τ*_0), c, k, g, dt, integrate, method: as in ``TILTContext`` (slot 0 is its slot 0).
    ``forward(u, reset=None, state=None, return_state=False)``: u (T, B, D) -> (T, B, n, D);
    state: the pair (F, P), TILT's F (B, N + 2k, D) float64 and P (B, n-1, D) the last n-1
    f~(τ*_0), newest first (None: zeros). With ``return_state``, returns (output, (F, P) after u).
    """

    def __init__(self, n: int, tau_min: float = PAPER["tau_min"], c: float = PAPER["c"], k: int = PAPER["k"],
                 g: float = PAPER["g"], dt: float = 1.0, integrate: str = "exact", batch_first: bool = False,
                 method: str = "auto") -> None:
        super().__init__()
        self.n = check.count("n", n)
        self.c = check.positive_real("c", c)
        tau_min = check.positive_real("tau_min", tau_min)
        # N = 2 τ* of growth c: τ*_0's kernel uses rates 0..2k only, the same as in a longer grid.
        self.tilt = TILT(n_taus=2, tau_min=tau_min, tau_max=tau_min * (1.0 + self.c), k=k, g=g, dt=dt,
                         integrate=integrate, method=method)
        self.batch_first = bool(batch_first)

    @property
    def slots(self) -> int:
        """The number of slots the context outputs: n."""
        return self.n

    def extra_repr(self) -> str:
        return f"n={self.n}, c={self.c}, batch_first={self.batch_first}"

    @property
    def tau_star(self) -> torch.Tensor:
        """(1,) float64: the buffered τ*."""
        return self.tilt.tau_star[:1]

    def kernels(self, length: int) -> torch.Tensor:
        """K (n, length) float64: K[i, j] = g_τ*0(j - i) for j >= i, else 0."""
        g0 = self.tilt.kernels(length)[0]
        K = g0.new_zeros(self.n, length)
        for i in range(min(self.n, length)):
            K[i, i:] = g0[: length - i]
        return K

    def forward(self, u: torch.Tensor, reset: torch.Tensor | None = None,
                state: tuple[torch.Tensor, torch.Tensor] | None = None,
                return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        u, reset = _time_major(u, reset, self.batch_first)
        if state is not None and (not isinstance(state, (tuple, list)) or len(state) != 2):
            raise TypeError(f"state must be the pair (F, P) or None, got {type(state).__name__}")
        F, past = (None, None) if state is None else state
        y, F = self.tilt(u, state=F, reset=reset)  # (T, B, 2, D)
        y, past = _buffer(y[:, :, 0], self.n, reset, _check_past(past, self.n, u))
        y = _batch_layout(y, self.batch_first)
        return (y, (F, past)) if return_state else y
