"""tsrnn.TILT: leaky integrators read out through Post's inverse Laplace transform (docs/equations.md §5).

TILT maps inputs u (T, B, D) to f~ (T, B, N, D): for each of N τ*, a causal, fixed temporal
receptive field over the past inputs that peaks about τ* steps back (seed 004). Three paths
compute the same function as ``tsrnn.reference.tilt``:

- "scan": the recurrence (S11) by ``functional.linear_scan`` at all N + 2k rates, then the Post
  operator L (S12), in the input's precision (float32 error grows with k);
- "chunked" (what "auto" takes): f~ = Toeplitz(g) u within chunks of C steps, kernels and the
  carried state F in float64 (float32 error near 1e-7 for any k);
- "fft": the same convolution over the whole sequence by FFT in float64.

The state returned (and accepted, to stream a sequence in pieces) is F (B, N + 2k, D) float64.
"""
from __future__ import annotations

import torch
from torch import nn

from tsrnn import _validation as check
from tsrnn import functional
from tsrnn.ops.recurrence import cells
from tsrnn.memory import laplace

METHODS = ("auto", "scan", "chunked", "fft")


class TILT(nn.Module):
    """Timescale-invariant representation of the input history (seed 004).

    Args:
        n_taus (N), tau_min, tau_max: the grid of τ* (docs/equations.md §5); k: order of Post's approximation;
        g: peak normalization (τ*^g; 0 as in the seed's Figure 3, 1 equalizes peak heights);
        dt: step length Δ; integrate: "exact" β(s) = (1 - e^{-sΔ}) / s or "unit" β = 1;
        method: "auto" | "scan" | "chunked" | "fft"; chunk: steps per chunk of "chunked".

    ``y, state = tilt(u, state=None, reset=None)``; reset (T, B) marks steps whose history
    starts afresh (document starts).

    A coarse grid (large c) moves the peaks later than τ* (S12's derivative is a finite
    difference): for few wide fields, keep every m-th τ* of a fine grid, as
    ``tsrnn.TILTContext`` does. At construction (``laplace.check_post``) TILT warns once where a
    field's mass / τ*^g leaves ``laplace.MASS_RANGE`` and raises ValueError where the mass is not
    finite, swamped by float64 rounding or beyond float32's range (docs/equations.md §5,
    "Receptive-field mass").
    """

    tau_star: torch.Tensor  # buffers (not saved in the state dict: they follow from the arguments)
    s: torch.Tensor
    decay: torch.Tensor
    beta: torch.Tensor
    post: torch.Tensor

    def __init__(self, n_taus: int = 30, tau_min: float = 1.0, tau_max: float = 50.0, k: int = 4, g: float = 0.0,
                 dt: float = 1.0, integrate: str = "exact", batch_first: bool = False, method: str = "auto",
                 chunk: int = 64) -> None:
        super().__init__()
        laplace.validate(n_taus, tau_min, tau_max, k, g, dt, integrate)
        check.choice("method", method, METHODS)
        check.count("chunk", chunk)
        self.n_taus, self.tau_min, self.tau_max, self.k = n_taus, float(tau_min), float(tau_max), k
        self.g, self.dt, self.integrate = float(g), float(dt), integrate
        self.batch_first, self.method, self.chunk = batch_first, method, chunk
        grid = laplace.grid(n_taus, self.tau_min, self.tau_max, k)
        post = laplace.post_operator(n_taus, k, self.g, grid)
        laplace.check_post(post, grid, n_taus, self.tau_min, self.tau_max, k, self.g, self.dt, integrate)
        decay, beta = laplace.decay_and_input_weight(grid.s, self.dt, integrate)
        for name, value in (("tau_star", grid.tau[k:k + n_taus]), ("s", grid.s), ("decay", decay),
                            ("beta", beta), ("post", post)):
            self.register_buffer(name, value, persistent=False)

    def extra_repr(self) -> str:
        return (f"n_taus={self.n_taus}, tau_min={self.tau_min}, tau_max={self.tau_max}, k={self.k}, "
                f"g={self.g}, dt={self.dt}, integrate={self.integrate!r}, method={self.method!r}")

    def _apply(self, fn, recurse=True):
        # The grid, L and kernels stay float64 whatever dtype the module is cast to.
        keep = {name: getattr(self, name) for name in ("tau_star", "s", "decay", "beta", "post")}
        super()._apply(fn, recurse)
        for name, value in keep.items():
            setattr(self, name, value.to(device=getattr(self, name).device, dtype=torch.float64))
        return self

    def kernels(self, length: int) -> torch.Tensor:
        """Receptive fields g_τ*(j), j = 0 .. length-1: (N, length) float64."""
        check.count("length", length)
        return laplace.kernels(self.post, self.s, self.beta, self.dt, length)

    @property
    def n_rates(self) -> int:
        return self.n_taus + 2 * self.k

    def _check(self, u, state, reset):
        """u time-major (T, B, D) after the checks; returns reset as time-major bool or None."""
        if u.shape[0] < 1 or u.shape[1] < 1:
            raise ValueError(f"u must have at least one step and one batch row, got shape {tuple(u.shape)}")
        check.finite("u", u)
        steps, batch, width = u.shape
        if reset is not None:
            reset = check.reset_mask(reset, steps, batch, self.batch_first, "u", u)
        if state is not None:
            check.tensor("state", state, 3)
            check.shape("state", state, (batch, self.n_rates, width))
            check.same_device("u", u, state=state)
            check.finite("state", state)
        return reset

    def forward(self, u: torch.Tensor, state: torch.Tensor | None = None,
                reset: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        check.tensor("u", u, 3)
        if self.batch_first:
            u = u.transpose(0, 1)
        reset = self._check(u, state, reset)
        method = "chunked" if self.method == "auto" else self.method
        if method == "fft" and reset is not None:
            raise ValueError("method='fft' does not support reset; use 'chunked' or 'scan'")
        compute = cells.math_dtype(u.dtype)
        run = {"scan": self._scan, "chunked": self._chunked, "fft": self._fft}[method]
        y, state = run(u.to(compute), None if state is None else state.double(), reset)
        y = y.to(u.dtype)
        return (y.transpose(0, 1) if self.batch_first else y), state

    # The three paths
    def _scan(self, u, state, reset):
        dtype = u.dtype
        decay = self.decay.to(dtype)[None, None, :, None]
        if reset is not None:
            decay = decay * (~reset).to(dtype)[:, :, None, None]
        drive = self.beta.to(dtype)[None, None, :, None] * u[:, :, None, :]
        F = functional.linear_scan(decay.expand_as(drive), drive, None if state is None else state.to(dtype))
        y = torch.einsum("nr,tbrd->tbnd", self.post.to(dtype), F)
        return y, F[-1].double()

    def _readout_of_state(self, steps: int) -> torch.Tensor:
        """(steps, N, R) float64: row c maps F before a block to f~ at its step c (history part)."""
        c = torch.arange(1, steps + 1, dtype=torch.float64, device=self.s.device)
        return self.post[None] * torch.exp(-self.s[None, :] * c[:, None] * self.dt)[:, None, :]

    def _state_after(self, F, u_block, weights_from=None):
        """F after a block of n steps: e^{-snΔ} F + Σ_q β e^{-s(n-1-q)Δ} u_q, in float64.

        weights_from (n, B) selects the steps that still count (after the block's last reset);
        F is dropped for rows with a reset in the block.
        """
        n = u_block.shape[0]
        q = torch.arange(n, dtype=torch.float64, device=self.s.device)
        w = self.beta[:, None] * torch.exp(-self.s[:, None] * (n - 1 - q)[None, :] * self.dt)
        u64 = u_block.double()
        if weights_from is None:
            fresh = torch.einsum("rq,qbd->brd", w, u64)
            keep = torch.exp(-self.s * n * self.dt)[None, :, None]
        else:
            fresh = torch.einsum("rq,qb,qbd->brd", w, weights_from.double(), u64)
            keep = torch.exp(-self.s * n * self.dt)[None, :, None] * weights_from[0].double()[:, None, None]
        return fresh if F is None else fresh + keep * F

    def _chunked(self, u, state, reset):
        steps, batch, width = u.shape
        C = min(self.chunk, steps)
        dtype = u.dtype
        kernel = self.kernels(C).to(dtype)
        lag = torch.arange(C, device=u.device)[:, None] - torch.arange(C, device=u.device)[None, :]
        toeplitz = kernel[:, lag.clamp(min=0)] * (lag >= 0).to(dtype)  # (N, C, C)
        readout = self._readout_of_state(C)  # (C, N, R)
        F, outs = state, []
        for t0 in range(0, steps, C):
            n = min(C, steps - t0)
            block, T_n = u[t0:t0 + n], toeplitz[:, :n, :n]
            if reset is None:
                y = torch.einsum("ncq,qbd->cbnd", T_n, block)
                since_start = None
            else:
                segment = reset[t0:t0 + n].long().cumsum(0)  # (n, B): 0 until the block's first reset
                same = (segment[:, None, :] == segment[None, :, :]).to(dtype)  # (c, q, B)
                y = torch.einsum("ncq,cqb,qbd->cbnd", T_n, same, block)
                since_start = segment == segment[-1:]  # steps after the block's last reset
            if F is not None:
                history = torch.einsum("cnr,brd->cbnd", readout[:n], F)
                if reset is not None:
                    history = history * (segment == 0).double()[:, :, None, None]
                y = y + history.to(dtype)
            outs.append(y)
            if since_start is not None and F is not None:
                F = F * (segment[-1] == 0).double()[:, None, None]
            F = self._state_after(F, block, since_start)
        return torch.cat(outs), F

    def _fft(self, u, state, reset):
        steps, batch, width = u.shape
        n_fft = 1 << (2 * steps - 1).bit_length()
        kernel = torch.fft.rfft(self.kernels(steps), n=n_fft, dim=1)  # (N, F)
        spectrum = torch.fft.rfft(u.double(), n=n_fft, dim=0)  # (F, B, D)
        y = torch.stack([torch.fft.irfft(spectrum * kernel[n][:, None, None], n=n_fft, dim=0)[:steps]
                         for n in range(self.n_taus)], dim=2)  # (T, B, N, D)
        if state is not None:
            y = y + torch.einsum("cnr,brd->cbnd", self._readout_of_state(steps), state)
        return y.to(u.dtype), self._state_after(state, u)
