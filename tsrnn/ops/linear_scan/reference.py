"""The linear scan's reference: a plain loop over time, the oracle of its fused kernels."""
from __future__ import annotations

import torch


def linear_scan(a, u, x0=None):
    """x_t = a_t x_{t-1} + u_t elementwise over (T, ...), from x_{-1} = x0 (zeros if None).

    ``a`` broadcasts against ``u`` (a constant decay is a tensor of shape u.shape[1:]).
    """
    a = torch.broadcast_to(a, u.shape)
    x = torch.zeros_like(u[0]) if x0 is None else x0
    outs = []
    for a_t, u_t in zip(a, u):
        x = a_t * x + u_t
        outs.append(x)
    return torch.stack(outs)
