"""The copy-task model of seed 002 (§4.1, A.3): one recurrent layer between one-hot inputs and
class logits.

Inputs are one-hot over n_symbols + 2 categories (the symbols to copy, the blank, the signal;
``tsrnn.lab.data.copy``), one layer of ``hidden_size`` units (128 in the seed) reads them, and a linear
layer gives logits over the same n_symbols + 2 classes (the targets are symbols or the blank).
The cells are ``tsrnn.lab.models.recurrent``'s; the seed uses chrono's t_max = 3T/2 for delay T (and
3 T_2 / 2 for the variable task T ~ U[T_1, T_2]).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsrnn import _validation as check
from tsrnn.lab.models.recurrent import recurrent_layer


class CopyModel(nn.Module):
    """One-hot (n_symbols + 2) → recurrent layer (hidden_size) → linear (n_symbols + 2).

    Args:
        cell: "lstm" | "chrono" | "plstm". hidden_size: units (128, seed 002 §4.1).
        n_symbols: symbols to copy (8). t_max: chrono's T_max, required for cell="chrono".
        fixed_p: the pLSTM's p held fixed for every unit (seed 002 §5.1), None: learned.
        generator: torch.Generator for the chrono draws (None: the global generator).
        backend: passed to the recurrent module.

    ``logits = model(x, lengths=None)``: x (T, B) int64 category ids (``tsrnn.lab.data.copy.copy_task``);
    lengths (B,) the steps of each column in [0, T] for a variable copy batch padded at the end
    (``tsrnn.lab.data.copy.copy_lengths``), None: all T. The model passes them to the recurrent layer,
    which runs each column's own steps only (none on the padding, whose targets are ignored);
    past a column's end its output is zero and its logits the output layer's bias. Logits
    (T, B, n_symbols + 2). The state starts at zero (the seed backpropagates through whole
    sequences).
    """

    def __init__(self, cell: str = "lstm", hidden_size: int = 128, n_symbols: int = 8,
                 t_max: float | None = None, generator: torch.Generator | None = None,
                 backend: str = "auto", fixed_p: float | None = None):
        super().__init__()
        self.cell = cell
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.n_symbols = check.count("n_symbols", n_symbols)
        self.n_classes = self.n_symbols + 2
        self.rnn = recurrent_layer(cell, self.n_classes, self.hidden_size, t_max=t_max, fixed_p=fixed_p,
                                   generator=generator, backend=backend)
        self.t_max = None if t_max is None else float(t_max)
        self.output = nn.Linear(self.hidden_size, self.n_classes)

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}, n_symbols={self.n_symbols}" + (
            f", t_max={self.t_max}" if self.t_max is not None else "")

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        x = check.token_ids("x", x, 2, self.n_classes)
        check.same_device("output weight", self.output.weight, x=x)
        h, _ = self.rnn(F.one_hot(x, self.n_classes).to(self.output.weight.dtype), lengths=lengths)
        return self.output(h)
