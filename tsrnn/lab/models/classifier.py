"""Sequence classification with seed 002's cells: one recurrent layer read at each sequence's
last step, then a linear layer to the classes (seed 002 §4.2 pixels, §4.4 sentiment, §5.4
frequencies).

``logits = model(x, lengths=None, dt=None)``: x (T, B, input_size), padded after each sequence;
lengths (B,) the steps of each sequence in [1, T] (None: all T); dt (T, B) step lengths > 0 for
the pLSTM (S8), None for Δt = 1. Logits (B, n_classes). The model passes ``lengths`` to the
recurrent layer, which runs each sequence's own steps only (no work on the padding) and returns
its state after its last step, h_n: the output at step lengths - 1, so padding after a sequence
changes nothing. Dropout (seed 002 §4.4: 0.2) acts on h_n before the linear layer.
"""
from __future__ import annotations

import torch
from torch import nn

from tsrnn import _validation as check
from tsrnn.lab.models.recurrent import recurrent_layer


class SequenceClassifier(nn.Module):
    """x → recurrent layer → h_n, the state after each sequence's last step → dropout → linear.

    Args:
        cell: "lstm" | "chrono" | "plstm" (``tsrnn.lab.models.recurrent``). t_max: chrono's T_max.
        eps: the pLSTM's ε. generator: draws the chrono biases. backend: the recurrent module's.
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, n_classes: int, *, t_max: float | None = None,
                 eps: float = 1e-3, dropout: float = 0.0, generator: torch.Generator | None = None,
                 backend: str = "auto"):
        super().__init__()
        self.cell = cell
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.n_classes = check.count("n_classes", n_classes)
        self.rnn = recurrent_layer(cell, check.count("input_size", input_size), self.hidden_size, t_max=t_max,
                                   eps=eps, generator=generator, backend=backend)
        self.dropout = nn.Dropout(check.probability("dropout", dropout))
        self.output = nn.Linear(self.hidden_size, self.n_classes)

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}"

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None, dt: torch.Tensor | None = None):
        check.tensor("x", x, 3)
        check.same_device("output weight", self.output.weight, x=x, lengths=lengths, dt=dt)
        x = x.to(self.output.weight.dtype)
        if lengths is not None:
            check.lengths("lengths", lengths, x.shape[0], x.shape[1])
        if self.cell == "plstm":
            _, state = self.rnn(x, dt=None if dt is None else dt.to(x.dtype), lengths=lengths)
        else:
            _, state = self.rnn(x, lengths=lengths)
        last = state[0][-1]  # h_n of the (one) layer: each sequence's output at its last step
        return self.output(self.dropout(last))
