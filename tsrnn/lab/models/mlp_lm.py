"""Bengio et al.'s MLP language model with the context of Jacques & Sederberg (seed 004).

Words are embedded by C (V, D); a context module turns the embeddings (T, B, D) into n slots
(T, B, n, D) (``tsrnn.memory.contexts``: the FIFO buffer, the first n τ* of TILT, or a buffer of TILT's
first τ*); the slots are concatenated and read by one tanh hidden layer and a softmax:

    x_t = [slot_0(t); ...; slot_{n-1}(t)]           (n D)
    logits_t = b + W x_t + U tanh(d + H x_t)         (W only with direct=True)

Seed 004 follows Bengio's best Brown-corpus MLP without direct connections or mixture (MLP9:
"input size" n = 5, hidden layer 100, feature space 30, test perplexity 276; seed 004 Figure 1
and Experiment 1), so the defaults are n = 5, hidden_size = 100, embedding_size = 30,
direct = False. (Bengio's n counts the predicted word; seed 004's "input size" counts context
slots, and this module follows seed 004.) Because the contexts are linear, integrating
embeddings equals integrating one-hot words and embedding afterwards (docs/equations.md §5).
"""
from __future__ import annotations

import torch
from torch import nn

from tsrnn import _validation as check
from tsrnn.memory.contexts import BufferContext, TILTBufferContext, TILTContext

CONTEXTS = {"buffer": BufferContext, "tilt": TILTContext, "tilt-buffer": TILTBufferContext}


class MLPLM(nn.Module):
    """Buffer-MLP, TILT-MLP or TILT-Buffer-MLP (seed 004).

    Args:
        vocab_size: V. embedding_size: D (30). hidden_size: tanh units (100).
        context: "buffer" | "tilt" | "tilt-buffer". n: context slots, the seed's "input size" (5).
        direct: Bengio's direct connections W from the context to the output (False, as MLP9).
        context_kwargs: extra arguments of the context module (e.g. ``tau_min``, ``c``, ``k`` of
            the TILT contexts; their defaults are the seed's grid; ``drop`` of the TILT context removes
            τ* slots, seed 004's Experiment 4, and the MLP then reads ``context.slots`` < n slots).

    ``logits = model(tokens, reset=None)``: tokens (T, B) int64; logits (T, B, V) at step t
    predict token t + 1 from tokens <= t (token t + K when trained K words ahead, seed 004's
    Experiment 2: ``tsrnn.lab.training.tasks.language.ahead_targets``). reset (T, B) bool or 0/1 marks
    document starts, where the context forgets everything before (the seed clears it at each document).

    ``logits, state = model(tokens, reset, state=state, return_state=True)`` reads a stream in
    windows: ``state`` is the context's recurrent state after the stream's previous window (None at
    its start; ``tsrnn.memory.contexts``: the last n-1 embeddings of the buffer, TILT's integrators F, or
    both), and the windows fed in order give the logits of the whole stream at once, to float
    rounding, so the context reaches back over the whole document as in the seed. Training on
    windows detaches the state between them (truncated BPTT: the trainer's carry): the loss of a
    window then sends no gradient to the embeddings of earlier windows, whose words still shape its
    context.
    """

    def __init__(self, vocab_size: int, embedding_size: int = 30, hidden_size: int = 100,
                 context: str = "buffer", n: int = 5, direct: bool = False, context_kwargs: dict | None = None):
        super().__init__()
        self.vocab_size = check.count("vocab_size", vocab_size)
        self.embedding_size = check.count("embedding_size", embedding_size)
        self.hidden_size = check.count("hidden_size", hidden_size)
        self.n = check.count("n", n)
        check.choice("context", context, tuple(CONTEXTS))
        self.context_name = context
        self.direct = bool(direct)
        self.embedding = nn.Embedding(self.vocab_size, self.embedding_size)
        self.context = CONTEXTS[context](self.n, **(context_kwargs or {}))
        width = self.context.slots * self.embedding_size
        self.hidden = nn.Linear(width, self.hidden_size)
        self.output = nn.Linear(self.hidden_size, self.vocab_size)
        self.direct_output = nn.Linear(width, self.vocab_size, bias=False) if self.direct else None

    def extra_repr(self) -> str:
        return f"context={self.context_name!r}, n={self.n}, direct={self.direct}"

    def forward(self, tokens: torch.Tensor, reset: torch.Tensor | None = None, state=None,
                return_state: bool = False):
        tokens = check.token_ids("tokens", tokens, 2, self.vocab_size)
        check.same_device("embedding weight", self.embedding.weight, tokens=tokens)
        u = self.embedding(tokens)                                     # (T, B, D)
        ctx, state = self.context(u, reset, state=state, return_state=True)  # (T, B, slots, D)
        x = ctx.flatten(2).to(u.dtype)                                 # (T, B, slots D)
        logits = self.output(torch.tanh(self.hidden(x)))
        if self.direct_output is not None:
            logits = logits + self.direct_output(x)
        return (logits, state) if return_state else logits
