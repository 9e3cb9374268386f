"""(S9) The power-law forget-gate LSTM (pLSTM) in age form; states (c, a), a the age.

    r = σ(z_r),  a_t = (1 - r)(a_{t-1} + Δt)
    f = ((1 - r)(a_{t-1} + Δt) + 1) / ((1 - r)(a_{t-1} + 1) + ε)) ** -p
    i = 1 - f (coupled, gates r, g, o) or σ(z_i) (separate, gates i, r, g, o)
    c_t = f c_{t-1} + i tanh(z_g),   h_t = σ(z_o) tanh(c_t)

p (H,) the decay exponent (> 0), Δt the step input (1 where absent), ε a constant (1e-3). The
age is kept in the math dtype. The traces are f, the reset gate r and the age a.
"""
from __future__ import annotations

from functools import partial

import torch

from tsrnn.ops.recurrence.cells.base import Cell


def step(z, states, params, delta, constants, coupled=True):
    if coupled:
        z_r, z_g, z_o = z.chunk(3, dim=-1)
    else:
        z_i, z_r, z_g, z_o = z.chunk(4, dim=-1)
    r, g, o = torch.sigmoid(z_r), torch.tanh(z_g), torch.sigmoid(z_o)
    (c, a), (p,), (eps,) = states, params, constants
    f = (((1 - r) * (a + delta) + 1) / ((1 - r) * (a + 1) + eps)) ** -p
    a_new = (1 - r) * (a + delta)
    i = 1 - f if coupled else torch.sigmoid(z_i)
    c_new = f * c + i * g
    return o * torch.tanh(c_new), (c_new, a_new), {"f": f, "r": r}


_SHARED = dict(states=("c", "a"), params=("p",), step_input="dt", constants=(("eps", 1e-3),), math_states=("a",),
               positive=("p", "eps"), traces=("f", "r", "a"))
COUPLED = Cell("plstm_coupled", gates=("r", "g", "o"), saved=("f", "r", "g", "o"), step=step, **_SHARED)
SEPARATE = Cell("plstm_separate", gates=("i", "r", "g", "o"), saved=("f", "r", "g", "o", "i"),
                step=partial(step, coupled=False), **_SHARED)


def plstm_literal(x, h0, c0, w_ih, w_hh, bias, p, dt=None, eps=1e-3, input_gate="coupled"):
    """(S7)/(S8) pLSTM written with absolute time t and reference time k, from k_0 = t_0 = 0.

        t   = t_prev + Δt
        k_t = r t + (1 - r) k_prev
        k~  = r (t - Δt + 1) + (1 - r) k_prev
        f   = ((t - k_t + 1) / (t - Δt - k~ + 1 + ε)) ** -p

    With Δt = 1, k~ = k_t and this is (S7). It loses precision as t grows (it subtracts two
    large times); it exists to check the age form (S9), which is the same function.
    Returns ``(out, (h, c, k, t), forget)``.
    """
    h, c = h0, c0
    k = torch.zeros_like(c0)
    t = torch.zeros_like(c0)
    outs, forgets = [], []
    for step_index, x_t in enumerate(x):
        z = x_t @ w_ih.T + h @ w_hh.T
        if bias is not None:
            z = z + bias
        z_i, z_r, z_g, z_o = (None, *z.chunk(3, dim=-1)) if input_gate == "coupled" else z.chunk(4, dim=-1)
        r, g, o = torch.sigmoid(z_r), torch.tanh(z_g), torch.sigmoid(z_o)
        step = 1.0 if dt is None else dt[step_index].unsqueeze(-1)
        t = t + step
        k_tilde = r * (t - step + 1) + (1 - r) * k
        k = r * t + (1 - r) * k
        f = ((t - k + 1) / (t - step - k_tilde + 1 + eps)) ** -p
        c = f * c + (1 - f if z_i is None else torch.sigmoid(z_i)) * g
        h = o * torch.tanh(c)
        outs.append(h)
        forgets.append(f)
    return torch.stack(outs), (h, c, k, t), torch.stack(forgets)
