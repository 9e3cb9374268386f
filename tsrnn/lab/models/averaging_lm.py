"""The Averaging RNN-LM of Salton & Kelleher (seed 001, §5; docs/equations.md §4).

A stack of LSTM layers reads the sentence; the averaging memory holds h_0 = 0 and the top
layer's earlier outputs, and its mean joins the current output in a concatenation layer:

    (S10) m_t = (1/t) Σ_{i=0}^{t-1} h_i,   h'_t = tanh(W_c [h_t ; m_t] + b_c)
    p(w_{t+1} | w_{<=t}) = softmax(W_s h'_t + b)           (seed 001 eq. 12)

W_s is tied to the embedding matrix (seed 001 §6.1), so the concatenation layer outputs
``embedding_size`` features. ``memory=False`` is the same LM without the memory, the ablation
that isolates what m_t adds: h'_t = tanh(W_c h_t + b_c) (tsrnn's baseline; the seed compares
with other published models instead). ``count_h0=False`` leaves h_0 out of the memory, the ablation
of seed 001 §6.3's "allowing the initial state of all zeros to be included in the memory when
averaging improves the performance": m_t = (1/(t-1)) Σ_{i=1}^{t-1} h_i, and m_1 = 0.

Defaults are the seed's PTB model (§6.1): 2 layers of 650 units, embeddings 650, dropout 0.5
on the non-recurrent connections, weights U(-0.05, 0.05), biases 0 except the forget-gate bias
1.0 (Jozefowicz et al. 2015). The seed's WikiText-2 model uses 1000 units, embeddings 1000 and
dropout 0.65 (§6.2).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsrnn import _validation as check
from tsrnn.memory.averaging import averaging_context
from tsrnn.modules import LSTM


class AveragingLM(nn.Module):
    """Averaging RNN-LM (seed 001).

    Args:
        vocab_size: V. embedding_size: D (seed 001 PTB: 650). hidden_size: H (650).
        num_layers: LSTM layers (2). dropout: on every non-recurrent connection (0.5): the
            embedded input, between LSTM layers, the top output h_t (it feeds both the memory and
            the concatenation layer) and h'_t before the softmax.
        tie_weights: decoder weight = embedding matrix (same Parameter).
        memory: False drops m_t: the concatenation layer reads h_t alone (the baseline).
        count_h0: False leaves h_0 = 0 out of the average (``averaging_context``'s count_h0).
        backend: passed to ``tsrnn.LSTM``.

    ``logits = model(tokens, reset=None)``: tokens (T, B) int64, one sentence per column
    (seed 001 §6.3: the LSTM state starts at zero for every batch); logits (T, B, V) at step t
    predict token t + 1. The memory restarts at t = 0 of every column; ``reset`` (T, B) bool or
    0/1 marks further restarts of the memory (the LSTM state is not reset there).

    ``logits, state = model(tokens, reset, state=state, return_state=True)`` reads a stream in
    windows instead: ``state`` is what the stream's previous window returned (None at its start),
    the LSTM's (h, c) and the memory's (sum, count) (``averaging_context``), so neither restarts at
    row 0 and the memory spans the windows up to the next ``reset``.
    """

    def __init__(self, vocab_size: int, embedding_size: int = 650, hidden_size: int = 650,
                 num_layers: int = 2, dropout: float = 0.5, tie_weights: bool = True,
                 memory: bool = True, count_h0: bool = True, backend: str = "auto"):
        super().__init__()
        self.vocab_size = check.count("vocab_size", vocab_size)
        self.embedding_size = check.count("embedding_size", embedding_size)
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.num_layers = check.count("num_layers", num_layers)
        self.dropout = check.probability("dropout", dropout)
        self.tie_weights = bool(tie_weights)
        self.memory = bool(memory)
        self.count_h0 = bool(count_h0)
        self.encoder = nn.Embedding(self.vocab_size, self.embedding_size)
        self.rnn = LSTM(self.embedding_size, self.hidden_size, num_layers=self.num_layers,  # between layers only
                        dropout=self.dropout if self.num_layers > 1 else 0.0, backend=backend)
        self.concat = nn.Linear((2 if self.memory else 1) * self.hidden_size, self.embedding_size)
        self.decoder = nn.Linear(self.embedding_size, self.vocab_size)
        self.reset_parameters()
        if self.tie_weights:
            self.decoder.weight = self.encoder.weight

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Seed 001 §6.1: weights U(-0.05, 0.05), biases 0, LSTM forget-gate biases 1."""
        for name, param in self.named_parameters():
            if name.endswith("bias") or ".bias_" in name:
                param.zero_()
            else:
                param.uniform_(-0.05, 0.05)
        H = self.hidden_size
        for k in range(self.num_layers):
            getattr(self.rnn, f"bias_ih_l{k}")[H:2 * H] = 1.0   # effective b_f = b_ih + b_hh = 1

    def extra_repr(self) -> str:
        return (f"dropout={self.dropout}, tie_weights={self.tie_weights}, memory={self.memory}, "
                f"count_h0={self.count_h0}")

    def forward(self, tokens: torch.Tensor, reset: torch.Tensor | None = None, state=None,
                return_state: bool = False):
        tokens = check.token_ids("tokens", tokens, 2, self.vocab_size)
        check.same_device("encoder weight", self.encoder.weight, tokens=tokens)
        hx, carried = (None, None) if state is None else state
        x = F.dropout(self.encoder(tokens), self.dropout, self.training)
        h, hx = self.rnn(x, hx)                                          # (T, B, H)
        h = F.dropout(h, self.dropout, self.training)
        if self.memory:
            m, carried = averaging_context(h, reset, count_h0=self.count_h0, state=carried, return_state=True)
            h = torch.cat([h, m], dim=-1)                                # [h_t ; m_t], S10
        logits = self.decoder(F.dropout(torch.tanh(self.concat(h)), self.dropout, self.training))  # h'_t (T, B, D)
        return (logits, (hx, carried)) if return_state else logits
