"""The Dyck-2 model of seed 000 (§3.1.2, A.10), after Suzgun et al. (2019).

Bracket symbols are one-hot encoded and read by one 256-unit LSTM layer; a linear layer to 2
outputs and a sigmoid give, after each prefix, the predicted probability that each closing
bracket (round, square) may come next. Training minimizes the mean squared error against
``tsrnn.lab.data.dyck`` labels (Adam, lr 1e-4 in the seed).

cell = "lstm": the baseline; "mts": the multi-timescale model, whose unit timescales are the
Inverse-Gamma quantiles ``inverse_gamma_quantiles(hidden_size, alpha)`` with α = 1.5 and fixed
input/forget biases (S3-S4). The authors' code froze the whole bias vector; ``freeze="all"``
does the same, the default "gates" fixes only the i and f biases (see ``tsrnn.LSTM``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsrnn import _validation as check
from tsrnn.lab.data.dyck import DYCK_PAD, DYCK_SYMBOLS
from tsrnn.modules import LSTM
from tsrnn.modules.lstm import FREEZE
from tsrnn.memory.timescales import inverse_gamma_quantiles

CELLS = ("lstm", "mts")


class DyckModel(nn.Module):
    """One-hot → LSTM(hidden_size) → linear → sigmoid, (T, B, 2) (seed 000 §3.1.2).

    Args:
        cell: "lstm" or "mts". hidden_size: units (256). alpha: Inverse-Gamma shape of the MTS
            timescales (1.5). freeze: which MTS biases are fixed ("gates" or "all").
        backend: passed to ``tsrnn.LSTM``.

    ``probs = model(tokens, lengths=lengths)``: tokens (T, B) int64 with "(" 0, ")" 1, "[" 2,
    "]" 3 and the padding id ``tsrnn.lab.data.dyck.DYCK_PAD`` (4) after each word; lengths (B,) the
    words' steps in [0, T], passed to the LSTM, which runs each word's own steps only (none on the
    padding). probs (T, B, 2) in (0, 1): (round, square) closing bracket allowed after each
    prefix; past a word's end they are meaningless (the LSTM's output there is zero) and the
    scoring masks them. Without lengths every step runs, padding entering as a zero vector.
    """

    def __init__(self, cell: str = "lstm", hidden_size: int = 256, alpha: float = 1.5,
                 freeze: str = "gates", backend: str = "auto"):
        super().__init__()
        check.choice("cell", cell, CELLS)
        check.choice("freeze", freeze, FREEZE)
        self.cell = cell
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.alpha = check.positive_real("alpha", alpha)
        self.n_symbols = len(DYCK_SYMBOLS)
        timescales = [inverse_gamma_quantiles(self.hidden_size, self.alpha)] if cell == "mts" else None
        self.rnn = LSTM(self.n_symbols, self.hidden_size, timescales=timescales, freeze=freeze, backend=backend)
        self.output = nn.Linear(self.hidden_size, 2)

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}" + (f", alpha={self.alpha}" if self.cell == "mts" else "")

    def forward(self, tokens: torch.Tensor, state=None, return_state: bool = False, lengths=None):
        """Predictions (T, B, 2) from ``state`` (None: zeros); with ``return_state`` also the final
        state, for the authors' stateful training on consecutive chunks of long sequences: with
        ``lengths``, each word's state after its last step (a word of length 0, one that ended in
        an earlier chunk, keeps the state it came with)."""
        tokens = check.token_ids("tokens", tokens, 2, DYCK_PAD + 1)
        check.same_device("output weight", self.output.weight, tokens=tokens)
        # One column per symbol plus one for padding, which is then dropped: padding is all-zero.
        x = F.one_hot(tokens, DYCK_PAD + 1)[..., : self.n_symbols].to(self.output.weight.dtype)
        h, state = self.rnn(x, state, lengths=lengths)
        pred = torch.sigmoid(self.output(h))
        return (pred, state) if return_state else pred
