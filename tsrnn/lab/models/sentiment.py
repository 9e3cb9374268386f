"""The IMDB sentiment model of seed 002 (§4.4): word embeddings (100-d; frozen when pretrained
vectors are given), one recurrent layer read at each review's last word, dropout 0.2, 2 classes.

The seed uses frozen 100-d GloVe vectors and 128 units (LSTM, chrono) or 154 (pLSTM, matching
~118K parameters). Without a vectors file tsrnn trains the embedding from N(0, 1) instead (no
download at run time). Where the seed reads the output is not stated; tsrnn reads it at the
review's last word, not after the padding: the model passes the reviews' lengths to the
recurrent layer, which runs no step on the padding, and reads its final state h_n.
"""
from __future__ import annotations

import torch
from torch import nn

from tsrnn import _validation as check
from tsrnn.lab.models.classifier import SequenceClassifier


class SentimentModel(SequenceClassifier):
    """``logits = model(tokens, lengths)``: tokens (T, B) int64 word ids (0 is padding), lengths (B,)
    in [1, T], passed to the recurrent layer (``SequenceClassifier``); logits (B, 2). ``vectors``
    (V, E): pretrained embeddings, frozen; else ``vocab_size`` and ``embedding_size`` give a
    trained embedding."""

    def __init__(self, cell: str, hidden_size: int, vocab_size: int | None = None, embedding_size: int = 100,
                 vectors: torch.Tensor | None = None, dropout: float = 0.2, t_max: float | None = None,
                 generator: torch.Generator | None = None, backend: str = "auto"):
        if vectors is not None:
            check.tensor("vectors", vectors, 2)
            vocab_size, embedding_size = vectors.shape
        super().__init__(cell, embedding_size, hidden_size, 2, t_max=t_max, dropout=dropout, generator=generator,
                         backend=backend)
        self.embedding = nn.Embedding(check.count("vocab_size", vocab_size), embedding_size, padding_idx=0)
        if vectors is not None:
            self.embedding.weight.data.copy_(vectors)
            self.embedding.weight.requires_grad_(False)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        tokens = check.token_ids("tokens", tokens, 2, self.embedding.num_embeddings)
        return super().forward(self.embedding(tokens), lengths)
