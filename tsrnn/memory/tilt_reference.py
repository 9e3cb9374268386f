"""TILT's reference: (S11)-(S12) as a plain loop, the oracle of ``tsrnn.TILT``'s kernels."""
from __future__ import annotations

import math

import torch

from tsrnn.memory import laplace


def tilt(u, n_taus=30, tau_min=1.0, tau_max=50.0, k=4, g=0.0, dt=1.0, integrate="exact",
         reset=None, state=None):
    """(S11)-(S12) literally: leaky integrators at all N + 2k rates, then D applied k times.

    u (T, B, D); reset (T, B) marks steps whose history starts afresh; state (B, N+2k, D) is F
    before the first step. Runs in u's dtype. Returns ``(y, F)`` with y (T, B, N, D).
    """
    grid = laplace.grid(n_taus, tau_min, tau_max, k)
    s, tau = grid.s.to(u.dtype), grid.tau.to(u.dtype)
    D = laplace.derivative_matrix(grid.s).to(u.dtype)
    decay, beta = laplace.decay_and_input_weight(grid.s, dt, integrate)
    decay, beta = decay.to(u.dtype), beta.to(u.dtype)
    central = slice(k, k + n_taus)
    scale = tau[central] ** g * (-1) ** k / float(math.factorial(k)) * s[central] ** (k + 1)
    F = u.new_zeros(u.shape[1], s.shape[0], u.shape[2]) if state is None else state.to(u.dtype)
    outs = []
    for t, u_t in enumerate(u):
        if reset is not None:
            F = F * (~reset[t].bool()).to(u.dtype)[:, None, None]
        F = decay[:, None] * F + beta[:, None] * u_t[:, None, :]
        derivative = F
        for _ in range(k):
            derivative = torch.einsum("rq,bqd->brd", D, derivative)
        outs.append(scale[:, None] * derivative[:, central])
    return torch.stack(outs), F
