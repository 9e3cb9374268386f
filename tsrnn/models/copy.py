"""The copy-task model of seed 002 (§4.1, A.3): one recurrent layer between one-hot inputs and
class logits.

Inputs are one-hot over n_symbols + 2 categories (the symbols to copy, the blank, the signal;
``tsrnn.synthetic``), one layer of ``hidden_size`` units (128 in the seed) reads them, and a linear
layer gives logits over the same n_symbols + 2 classes (the targets are symbols or the blank).

cell = "lstm": ``tsrnn.LSTM`` with PyTorch's initialization; "chrono": the same with chrono
initialization (Tallec & Ollivier 2018): forget biases b_f = log(U[1, t_max - 1]) and input biases
-b_f (S4). They are an initialization only and train like every bias (unlike MTS timescales).
The seed uses t_max = 3T/2 for delay T (and 3 T_2 / 2 for the variable task T ~ U[T_1, T_2]).
"plstm": ``tsrnn.PowerLawLSTM`` (coupled input gate, p ~ U(0, 1), S7-S9).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsrnn import _validation as check
from tsrnn.modules import LSTM, PowerLawLSTM
from tsrnn.timescales import chrono

CELLS = ("lstm", "chrono", "plstm")


class CopyModel(nn.Module):
    """One-hot (n_symbols + 2) → recurrent layer (hidden_size) → linear (n_symbols + 2).

    Args:
        cell: "lstm" | "chrono" | "plstm". hidden_size: units (128, seed 002 §4.1).
        n_symbols: symbols to copy (8). t_max: chrono's T_max, required for cell="chrono".
        generator: torch.Generator for the chrono draws (None: the global generator).
        backend: passed to the recurrent module.

    ``logits = model(x)``: x (T, B) int64 category ids (``tsrnn.synthetic.copy_task``); logits
    (T, B, n_symbols + 2). The state starts at zero (the seed backpropagates through whole
    sequences).
    """

    def __init__(self, cell: str = "lstm", hidden_size: int = 128, n_symbols: int = 8,
                 t_max: float | None = None, generator: torch.Generator | None = None,
                 backend: str = "auto"):
        super().__init__()
        check.choice("cell", cell, CELLS)
        self.cell = cell
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.n_symbols = check.count("n_symbols", n_symbols)
        self.n_classes = self.n_symbols + 2
        if cell == "chrono" and t_max is None:
            raise ValueError("cell='chrono' needs t_max (the seed uses 3/2 of the delay T)")
        if cell != "chrono" and t_max is not None:
            raise ValueError(f"t_max is only used by cell='chrono', got cell={cell!r}")
        self.t_max = None if t_max is None else check.real("t_max", t_max)
        if cell == "plstm":
            self.rnn = PowerLawLSTM(self.n_classes, self.hidden_size, backend=backend)
        else:
            self.rnn = LSTM(self.n_classes, self.hidden_size, backend=backend)
        if cell == "chrono":
            self.chrono_init(self.t_max, generator)
        self.output = nn.Linear(self.hidden_size, self.n_classes)

    @torch.no_grad()
    def chrono_init(self, t_max: float, generator: torch.Generator | None = None) -> None:
        """Set the effective biases b_f = log(U[1, t_max - 1]), b_i = -b_f (b_ih holds them, b_hh 0)."""
        H = self.hidden_size
        b_f = chrono(H, t_max, generator).to(self.rnn.bias_ih_l0)
        self.rnn.bias_ih_l0[:H] = -b_f
        self.rnn.bias_ih_l0[H:2 * H] = b_f
        self.rnn.bias_hh_l0[:2 * H] = 0.0

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}, n_symbols={self.n_symbols}" + (
            f", t_max={self.t_max}" if self.t_max is not None else "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check.token_ids("x", x, 2, self.n_classes)
        check.same_device("output weight", self.output.weight, x=x)
        h, _ = self.rnn(F.one_hot(x, self.n_classes).to(self.output.weight.dtype))
        return self.output(h)
