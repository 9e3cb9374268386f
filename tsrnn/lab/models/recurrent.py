"""The three recurrent layers seed 002 compares on every task, built one way for all its models.

- "lstm": ``tsrnn.LSTM`` with PyTorch's initialization.
- "chrono": the same with chrono initialization (Tallec & Ollivier 2018): forget biases
  b_f = log(U[1, t_max - 1]) and input biases -b_f (S4). They are an initialization only and
  train like every bias (unlike MTS timescales).
- "plstm": ``tsrnn.PowerLawLSTM`` (coupled input gate, p ~ U(0, 1), S7-S9).
"""
from __future__ import annotations

import torch

from tsrnn import _validation as check
from tsrnn.modules import LSTM, PowerLawLSTM
from tsrnn.memory.timescales import chrono

CELLS = ("lstm", "chrono", "plstm")


def recurrent_layer(cell: str, input_size: int, hidden_size: int, *, t_max: float | None = None,
                    eps: float = 1e-3, fixed_p: float | None = None, generator: torch.Generator | None = None,
                    backend: str = "auto"):
    """One layer of ``cell``; ``t_max`` (chrono's T_max) is required for "chrono" and refused
    otherwise; ``eps`` is the pLSTM's ε (S7) and ``fixed_p`` its decay exponent held fixed (None:
    learned, p ~ U(0, 1)); ``generator`` draws the chrono biases."""
    check.choice("cell", cell, CELLS)
    if fixed_p is not None and cell != "plstm":
        raise ValueError(f"fixed_p is the pLSTM's decay exponent, got cell={cell!r}")
    if cell == "chrono" and t_max is None:
        raise ValueError("cell='chrono' needs t_max (seed 002 uses 3/2 of the longest delay)")
    if cell != "chrono" and t_max is not None:
        raise ValueError(f"t_max is only used by cell='chrono', got cell={cell!r}")
    if cell == "plstm":
        return PowerLawLSTM(input_size, hidden_size, eps=eps, fixed_p=fixed_p, backend=backend)
    rnn = LSTM(input_size, hidden_size, backend=backend)
    if cell == "chrono":
        chrono_init(rnn, check.real("t_max", t_max), generator)
    return rnn


@torch.no_grad()
def chrono_init(rnn: LSTM, t_max: float, generator: torch.Generator | None = None) -> None:
    """Set the first layer's effective biases b_f = log(U[1, t_max - 1]), b_i = -b_f (b_ih holds
    them, b_hh 0)."""
    H = rnn.hidden_size
    b_f = chrono(H, t_max, generator).to(rnn.bias_ih_l0)
    rnn.bias_ih_l0[:H] = -b_f
    rnn.bias_ih_l0[H:2 * H] = b_f
    rnn.bias_hh_l0[:2 * H] = 0.0
