"""(S1) The LSTM cell, gates (i, f, g, o) as torch.nn.LSTM orders them; state c.

    i, f, g, o = σ(z_i), σ(z_f), tanh(z_g), σ(z_o)
    c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)

The multi-timescale LSTM is this cell with fixed forget and input gate biases (S3): the same
function of its effective bias.
"""
from __future__ import annotations

import torch

from tsrnn.ops.recurrence.cells.base import Cell


def step(z, states, params, delta, constants):
    z_i, z_f, z_g, z_o = z.chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(z_i), torch.sigmoid(z_f), torch.tanh(z_g), torch.sigmoid(z_o)
    (c,) = states
    c_new = f * c + i * g
    return o * torch.tanh(c_new), (c_new,), {"f": f}


CELL = Cell("lstm", gates=("i", "f", "g", "o"), states=("c",), saved=("i", "f", "g", "o"), step=step,
            torch_kernel=True)
