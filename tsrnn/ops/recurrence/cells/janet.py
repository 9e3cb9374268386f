"""JANET, the forget-gate-only LSTM (van der Westhuizen & Lasenby 2018, "The unreasonable
effectiveness of the forget gate"): gates (f, g), state c, h = c.

    s = z_f,  f = σ(s),  i = 1 - σ(s - β),  g = tanh(z_g)
    c_t = f c_{t-1} + i g,   h_t = c_t

β a constant (1, the paper's value): the input gate is the forget gate's complement shifted by β,
so more input is let in than forgotten. The paper initialises the forget bias with chrono
(``tsrnn.Recurrent(..., chrono=t_max)``). Saved for the fused backward: f, i, g.
"""
from __future__ import annotations

import torch

from tsrnn.ops.recurrence.cells.base import Cell


def step(z, states, params, delta, constants):
    z_f, z_g = z.chunk(2, dim=-1)
    (c,), (beta,) = states, constants
    f = torch.sigmoid(z_f)
    c_new = f * c + (1 - torch.sigmoid(z_f - beta)) * torch.tanh(z_g)
    return c_new, (c_new,), {"f": f}


CELL = Cell("janet", gates=("f", "g"), states=("c",), saved=("f", "i", "g"), step=step, constants=(("beta", 1.0),))
