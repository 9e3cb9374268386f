"""AWD-LSTM language model (Merity et al. 2018) with LSTM, multi-timescale or power-law layers.

This is the model of seed 000 (§3.1.1): three single-layer recurrent modules of 1150, 1150 and
400 units over 400-dimensional tied embeddings, with the AWD-LSTM regularizers:

- embedding dropout ``dropoute``: whole rows of the embedding matrix (words) are dropped;
- locked (variational) dropout: one mask per sequence, shared by every step, on the embedded
  input (``dropouti``), between layers (``dropouth``) and on the last output (``dropout``);
- weight drop ``wdrop``: DropConnect on each layer's recurrent matrix W_hh, one mask per forward;
- activation regularization (AR, ``alpha``) on the dropped last output and temporal activation
  regularization (TAR, ``beta``) on the raw last output (``regularization``).

Weight drop keeps the raw W_hh as the layer's Parameter (``rnns[k].weight_hh_l0``) and runs the
layer with ``torch.func.functional_call``, substituting a dropped copy F.dropout(W_hh) for that one
call. Autograd then carries the gradient through the mask to the raw Parameter (zero exactly at
the dropped entries, scaled by 1/(1 - wdrop) elsewhere), optimizers see one stable Parameter,
and eval mode runs the raw weight unchanged (inverted dropout needs no rescaling there). The
classic pitfalls, re-wrapping W_hh in a new Parameter each forward or deleting the Parameter,
either cut the gradient to the weight that the optimizer holds or break fused/flattened RNNs.

cell = "lstm": ``tsrnn.LSTM`` layers; "mts": the seed-000 assignment of fixed timescales,
``tsrnn.memory.timescales.lm_timescales(hidden_sizes, mts_alpha)`` (layer 1: T = 3 and 4, layer 2:
Inverse-Gamma quantiles, further layers learned; S3-S4); "plstm": ``tsrnn.PowerLawLSTM`` layers
(S7-S9).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from tsrnn import _validation as check
from tsrnn.modules import LSTM, PowerLawLSTM
from tsrnn.modules.lstm import FREEZE
from tsrnn.memory.timescales import lm_timescales

CELLS = ("lstm", "mts", "plstm")
LSTM_INITS = ("sqrt", "inverse")


def embedded_dropout(weight: torch.Tensor, tokens: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Embed ``tokens`` (T, B) with whole rows of ``weight`` (V, D) dropped with probability p.

    Every occurrence of a dropped word in the batch becomes the zero vector; kept rows are scaled
    by 1/(1 - p) (Gal & Ghahramani 2016, as in AWD-LSTM). Returns (T, B, D).
    """
    if training and p > 0:
        mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(tokens, weight)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout of x (T, B, F): one mask (1, B, F) for all T steps, scaled by 1/(1 - p)."""
    if not training or p == 0:
        return x
    mask = x.new_empty(1, x.shape[1], x.shape[2]).bernoulli_(1 - p) / (1 - p)
    return x * mask


@torch.no_grad()
def _scale_init(rnn, factor: float) -> None:
    """Multiply a recurrent module's weights and biases by ``factor`` (U(±1/sqrt(H)) * 1/sqrt(H) = U(±1/H)),
    with the g and o rows that an MTS layer with freeze="all" fixed from its biases when built."""
    for name, param in rnn.named_parameters(recurse=False):
        if name.startswith(("weight_", "bias_")):
            param.mul_(factor)
    for k in getattr(rnn, "timescale_layers", ()):
        getattr(rnn, f"bias_fixed_l{k}")[2 * rnn.hidden_size:].mul_(factor)  # empty for freeze="gates"


class AWDExtras(NamedTuple):
    """What ``AWDLSTMLM.forward`` returns besides logits and state, per layer, (T, B, H_k) each.

    raw_outputs: layer outputs before dropout (TAR reads the last one);
    dropped_outputs: the same after locked dropout, ``dropouth`` between layers and ``dropout`` on
    the last one (AR reads the last one; it is what the decoder saw).
    """
    raw_outputs: list
    dropped_outputs: list


class AWDLSTMLM(nn.Module):
    """AWD-LSTM language model with one single-layer recurrent module per layer.

    Args:
        vocab_size: V. embedding_size: D (seed 000: 400). hidden_sizes: units per layer (seed
            000: 1150, 1150, 400); with ``tie_weights`` the last must equal ``embedding_size``.
        cell: "lstm" | "mts" | "plstm" (see the module docstring).
        dropout, dropouth, dropouti, dropoute, wdrop: AWD-LSTM's rates (defaults: its PTB
            setting, which seed 000's run.sh uses: 0.4, 0.25, 0.4, 0.1, 0.5), each in [0, 1).
        tie_weights: the decoder uses the embedding matrix (same Parameter).
        alpha, beta: AR and TAR weights (AWD-LSTM defaults 2 and 1), >= 0.
        mts_alpha: Inverse-Gamma shape of layer 2 for cell="mts" (seed 000: 0.56).
        mts_freeze: "gates" (fix only the i and f biases) or "all" (the whole bias vector of the
            MTS layers, as the seed-000 code did); see ``tsrnn.LSTM``.
        lstm_init: the recurrent layers' weights and biases ~ U(-1/sqrt(H), 1/sqrt(H)) ("sqrt":
            PyTorch's, which AWD-LSTM and the seed-000 authors' code keep) or U(-1/H, 1/H) ("inverse":
            seed 000's text, "uniformly initialized between [-1/H, 1/H] where H is the output size of
            the respective layer"). Fixed MTS biases stay as their timescales set them.
        backend: passed to the recurrent modules.

    Initialization as in AWD-LSTM / seed 000: embedding U(-0.1, 0.1), decoder bias 0 (untied
    decoder weight U(-0.1, 0.1)), recurrent layers as ``lstm_init``.

    ``logits, state, extras = model(tokens, state=None)``: tokens (T, B) int64 ids; logits
    (T, B, V) predict the next token; state: one tuple per layer, (h, c) (or (h, c, a) for
    pLSTM) of shape (1, B, H_k); extras: ``AWDExtras`` for ``regularization``.
    """

    def __init__(self, vocab_size: int, embedding_size: int = 400, hidden_sizes=(1150, 1150, 400),
                 cell: str = "lstm", dropout: float = 0.4, dropouth: float = 0.25, dropouti: float = 0.4,
                 dropoute: float = 0.1, wdrop: float = 0.5, tie_weights: bool = True, alpha: float = 2.0,
                 beta: float = 1.0, mts_alpha: float = 0.56, mts_freeze: str = "gates", lstm_init: str = "sqrt",
                 backend: str = "auto"):
        super().__init__()
        self.vocab_size = check.count("vocab_size", vocab_size)
        self.embedding_size = check.count("embedding_size", embedding_size)
        self.hidden_sizes = check.sizes("hidden_sizes", hidden_sizes)
        check.choice("cell", cell, CELLS)
        check.choice("mts_freeze", mts_freeze, FREEZE)
        check.choice("lstm_init", lstm_init, LSTM_INITS)
        self.cell = cell
        self.dropout = check.probability("dropout", dropout)
        self.dropouth = check.probability("dropouth", dropouth)
        self.dropouti = check.probability("dropouti", dropouti)
        self.dropoute = check.probability("dropoute", dropoute)
        self.wdrop = check.probability("wdrop", wdrop)
        self.alpha = check.nonnegative_real("alpha", alpha)
        self.beta = check.nonnegative_real("beta", beta)
        self.tie_weights = bool(tie_weights)
        if self.tie_weights and self.hidden_sizes[-1] != self.embedding_size:
            raise ValueError(f"tie_weights needs hidden_sizes[-1] == embedding_size, got "
                             f"{self.hidden_sizes[-1]} and {self.embedding_size}")

        timescales = [None] * len(self.hidden_sizes)
        if cell == "mts":
            timescales = lm_timescales(self.hidden_sizes, alpha=check.positive_real("mts_alpha", mts_alpha))
        inputs = (self.embedding_size,) + self.hidden_sizes[:-1]
        layers = []
        for size_in, size, ts in zip(inputs, self.hidden_sizes, timescales):
            if cell == "plstm":
                layers.append(PowerLawLSTM(size_in, size, backend=backend))
            else:
                layers.append(LSTM(size_in, size, timescales=None if ts is None else [ts],
                                   freeze=mts_freeze, backend=backend))
        self.rnns = nn.ModuleList(layers)
        if lstm_init == "inverse":
            for rnn, size in zip(self.rnns, self.hidden_sizes):
                _scale_init(rnn, 1 / math.sqrt(size))
        self.encoder = nn.Embedding(self.vocab_size, self.embedding_size)
        self.decoder = nn.Linear(self.hidden_sizes[-1], self.vocab_size)
        with torch.no_grad():
            self.encoder.weight.uniform_(-0.1, 0.1)
            self.decoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()
        if self.tie_weights:
            self.decoder.weight = self.encoder.weight

    def extra_repr(self) -> str:
        return (f"cell={self.cell!r}, dropout={self.dropout}, dropouth={self.dropouth}, "
                f"dropouti={self.dropouti}, dropoute={self.dropoute}, wdrop={self.wdrop}, "
                f"tie_weights={self.tie_weights}, alpha={self.alpha}, beta={self.beta}")

    # -- state --------------------------------------------------------------------------
    def init_state(self, batch_size: int) -> list[tuple[torch.Tensor, ...]]:
        """Zero state for ``batch_size`` columns: per layer (h, c) or (h, c, a), each (1, B, H_k)."""
        batch_size = check.count("batch_size", batch_size)
        weight = self.encoder.weight
        parts = 3 if self.cell == "plstm" else 2
        return [tuple(weight.new_zeros(1, batch_size, h) for _ in range(parts)) for h in self.hidden_sizes]

    @staticmethod
    def detach_state(state):
        """The same state cut from the graph (truncated BPTT between segments)."""
        if isinstance(state, torch.Tensor):
            return state.detach()
        if isinstance(state, (list, tuple)):
            return type(state)(AWDLSTMLM.detach_state(s) for s in state)
        raise TypeError(f"state must be tensors in lists/tuples, got {type(state).__name__}")

    # -- forward ------------------------------------------------------------------------
    def _run_layer(self, k: int, x: torch.Tensor, state):
        rnn = self.rnns[k]
        if self.training and self.wdrop > 0:
            raw = rnn.weight_hh_l0
            dropped = F.dropout(raw, self.wdrop, training=True)
            return functional_call(rnn, {"weight_hh_l0": dropped}, (x, state))
        return rnn(x, state)

    def forward(self, tokens: torch.Tensor, state=None):
        tokens = check.token_ids("tokens", tokens, 2, self.vocab_size)
        if state is not None and (not isinstance(state, (list, tuple)) or len(state) != len(self.rnns)):
            raise ValueError(f"state must be None or a list of {len(self.rnns)} per-layer tuples "
                             "(see init_state)")
        check.same_device("encoder weight", self.encoder.weight, tokens=tokens)
        emb = embedded_dropout(self.encoder.weight, tokens, self.dropoute, self.training)
        x = locked_dropout(emb, self.dropouti, self.training)
        raw_outputs, dropped_outputs, new_state = [], [], []
        last = len(self.rnns) - 1
        for k in range(len(self.rnns)):
            out, layer_state = self._run_layer(k, x, None if state is None else tuple(state[k]))
            new_state.append(layer_state)
            raw_outputs.append(out)
            x = locked_dropout(out, self.dropout if k == last else self.dropouth, self.training)
            dropped_outputs.append(x)
        return self.decoder(x), new_state, AWDExtras(raw_outputs, dropped_outputs)

    def regularization(self, extras: AWDExtras) -> torch.Tensor:
        """AR + TAR of AWD-LSTM on the last layer, a scalar to add to the loss:

            alpha * mean(dropped_last ** 2) + beta * mean((raw_last[t] - raw_last[t-1]) ** 2)

        A zero weight skips its term; TAR is 0 for a single step.
        """
        raw, dropped = extras.raw_outputs[-1], extras.dropped_outputs[-1]
        total = raw.new_zeros(())
        if self.alpha:
            total = total + self.alpha * dropped.pow(2).mean()
        if self.beta and raw.shape[0] > 1:
            total = total + self.beta * (raw[1:] - raw[:-1]).pow(2).mean()
        return total
