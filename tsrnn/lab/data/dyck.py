"""Dyck-2 (seed 000 §3.1.2, A.10): the words, their per-step labels and timescales, and their scoring.

Words are drawn from the PCFG of Suzgun et al. (2019) (seed 000, A.10)

    S -> (S) with p1,   [S] with p2,   SS with q,   ε with 1 - p1 - p2 - q

with p1 = p2 = q = 0.25, expanding the leftmost S first, as the authors' ``create_dyckn.py``
does (it consumes one uniform draw per expansion, in that order; a draw r < p1 gives "(",
p1 <= r < p1 + p2 gives "["). A derivation is abandoned once its brackets exceed
``max_length`` = 200 symbols, and words shorter than ``min_length`` = 2 (the empty word) are
dropped. Every word is therefore a complete, balanced Dyck-2 word of 2..200 symbols. Duplicates
are discarded until 10k + 2k + 5k distinct words exist; they are shuffled and cut into
train/valid/test, so the splits are disjoint. Everything follows from ``seed``.

Symbol ids: "(" 0, ")" 1, "[" 2, "]" 3; padding ``DYCK_PAD`` = 4. The label after each prefix
(seed 000: "predict which closing parentheses could appear next") is the 2-vector
(round allowed, square allowed): the closing bracket of the innermost open bracket, so one-hot
while a bracket is open and (0, 0) when the stack is empty (after the last symbol, always).
The authors' files hold the same labels as bits ``'{:02b}'.format(2**type)``, which lists them
in the order (square, round): flip the last axis to compare.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from tsrnn import _validation as check

__all__ = [
    "DYCK_SYMBOLS", "DYCK_PAD", "DyckSplit", "Dyck2", "sample_dyck", "dyck_targets", "encode_dyck",
    "dyck2", "sequences_correct", "whole_sequence_correct", "dyck_mse",
]

DYCK_SYMBOLS = "()[]"          # ids 0, 1, 2, 3
DYCK_PAD = 4
_ID = {s: i for i, s in enumerate(DYCK_SYMBOLS)}
_OPEN = "(["
_CLOSE = ")]"
_MATCH = {")": "(", "]": "["}


@dataclass(frozen=True)
class DyckSplit:
    """One split, N words padded to the longest, L steps.

    words: the N words as strings. tokens (L, N) int64, ``DYCK_PAD`` after each word's end.
    labels (L, N, 2) float32: (round, square) closing bracket allowed after the prefix ending at
    each step, 0 at padding. lengths (N,) int64. timescales (L, N) int64: at a closing bracket,
    its distance to the matching opening bracket counting both (the authors' timescale), else 0.
    """
    words: tuple
    tokens: torch.Tensor
    labels: torch.Tensor
    lengths: torch.Tensor
    timescales: torch.Tensor

    def __len__(self) -> int:
        return len(self.words)

    @property
    def max_timescale(self) -> torch.Tensor:
        """(N,) the longest dependency of each word (seed 000 Figure 2's x-axis)."""
        return self.timescales.max(dim=0).values


@dataclass(frozen=True)
class Dyck2:
    """The three disjoint splits of ``dyck2``."""
    train: DyckSplit
    valid: DyckSplit
    test: DyckSplit


def _check_pcfg(p, q, max_length, min_length):
    if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or len(p) != 2:
        raise ValueError(f"p must be a pair (p1, p2), got {p!r}")
    p = tuple(check.positive_real(f"p[{k}]", v) for k, v in enumerate(p))
    q = check.positive_real("q", q)
    if sum(p) + q >= 1:
        raise ValueError(f"p1 + p2 + q must be < 1 (ε needs probability > 0), got {sum(p) + q:g}")
    max_length = check.count("max_length", max_length, minimum=2)
    min_length = check.count("min_length", min_length, minimum=0)
    if min_length > max_length:
        raise ValueError(f"min_length must be <= max_length, got {min_length} > {max_length}")
    return p, q, max_length, min_length


def _sample_word(draw, p1: float, p12: float, pq: float, max_length: int, min_length: int) -> str | None:
    """One leftmost derivation; None if it exceeds max_length or ends below min_length."""
    out = []
    stack: list = [None]               # None: a pending S; a string: a pending closing bracket
    length = 0
    while stack:
        item = stack.pop()
        if item is not None:
            out.append(item)
            continue
        r = draw()
        if r < p12:                    # S -> (S) or [S]
            length += 2
            if length > max_length:
                return None
            kind = 0 if r <= p1 else 1
            out.append(_OPEN[kind])
            stack.append(_CLOSE[kind])
            stack.append(None)
        elif r < pq:                   # S -> S S
            stack.append(None)
            stack.append(None)
    if length < min_length:
        return None
    return "".join(out)


def sample_dyck(n: int, p=(0.25, 0.25), q: float = 0.25, max_length: int = 200, min_length: int = 2,
                seed: int | np.random.Generator = 0) -> list[str]:
    """n distinct Dyck-2 words from the PCFG (see the module docstring), in order of first draw.

    seed: an int or a ``numpy.random.Generator``. Raises ValueError if the grammar and length
    limits do not give n distinct words (no new word in 100,000 draws in a row).
    """
    n = check.count("n", n)
    (p1, p2), q, max_length, min_length = _check_pcfg(p, q, max_length, min_length)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(_seed(seed))
    buffer: list = []

    def draw() -> float:
        if not buffer:
            buffer.extend(rng.random(8192).tolist()[::-1])
        return buffer.pop()

    words: dict = {}                   # insertion-ordered set: deterministic, unlike set()
    misses = 0
    while len(words) < n:
        word = _sample_word(draw, p1, p1 + p2, p1 + p2 + q, max_length, min_length)
        if word is None or word in words:
            misses += 1
            if misses > 100_000:
                raise ValueError(f"could not draw {n} distinct words with max_length={max_length}, "
                                 f"min_length={min_length} (got {len(words)})")
            continue
        misses = 0
        words[word] = None
    return list(words)


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int or a numpy.random.Generator, got {type(seed).__name__}")
    return int(seed)


def dyck_targets(word: str) -> tuple[list, list]:
    """Stack oracle for one word: per step the (round, square) label and the timescale.

    Raises ValueError if the word has a symbol outside "()[]" or a closing bracket that does not
    match (prefixes of Dyck-2 words, complete or not, are accepted).
    """
    labels, timescales, stack = [], [], []   # stack of (bracket, position)
    for t, s in enumerate(word):
        if s in _OPEN:
            stack.append((s, t))
            timescales.append(0)
        elif s in _CLOSE:
            if not stack or stack[-1][0] != _MATCH[s]:
                raise ValueError(f"word is not a Dyck-2 prefix: {s!r} at position {t} does not match")
            timescales.append(t - stack.pop()[1] + 1)
        else:
            raise ValueError(f"word must use only {DYCK_SYMBOLS!r}, got {s!r} at position {t}")
        top = stack[-1][0] if stack else None
        labels.append((1.0 if top == "(" else 0.0, 1.0 if top == "[" else 0.0))
    return labels, timescales


def encode_dyck(words: Sequence[str]) -> DyckSplit:
    """Pad words into a ``DyckSplit`` (tokens, labels, lengths, timescales; see its docstring)."""
    words = tuple(words)
    if not words or any(not isinstance(w, str) or not w for w in words):
        raise ValueError("words must be a non-empty sequence of non-empty strings")
    steps = max(len(w) for w in words)
    tokens = np.full((steps, len(words)), DYCK_PAD, dtype=np.int64)
    labels = np.zeros((steps, len(words), 2), dtype=np.float32)
    timescales = np.zeros((steps, len(words)), dtype=np.int64)
    lookup = np.full(256, -1, dtype=np.int64)
    for s, i in _ID.items():
        lookup[ord(s)] = i
    for b, word in enumerate(words):
        lab, ts = dyck_targets(word)
        tokens[: len(word), b] = lookup[np.frombuffer(word.encode("ascii"), dtype=np.uint8)]
        labels[: len(word), b] = lab
        timescales[: len(word), b] = ts
    return DyckSplit(words=words, tokens=torch.from_numpy(tokens), labels=torch.from_numpy(labels),
                     lengths=torch.tensor([len(w) for w in words], dtype=torch.int64),
                     timescales=torch.from_numpy(timescales))


def dyck2(n_train: int = 10_000, n_valid: int = 2_000, n_test: int = 5_000, p=(0.25, 0.25),
          q: float = 0.25, max_length: int = 200, min_length: int = 2, seed: int = 0) -> Dyck2:
    """The Dyck-2 data set of seed 000 (§3.1.2): disjoint splits of distinct words.

    Draws n_train + n_valid + n_test distinct words (``sample_dyck``), shuffles them with the same
    seeded generator and cuts them into train, valid, test (as the authors' ``divide_samples``).
    The same arguments give the same splits on every machine.
    """
    counts = [check.count(name, v) for name, v in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test))]
    rng = np.random.default_rng(_seed(seed))
    words = sample_dyck(sum(counts), p, q, max_length, min_length, seed=rng)
    order = rng.permutation(len(words))
    a, b = counts[0], counts[0] + counts[1]
    pick = lambda idx: encode_dyck([words[i] for i in idx])  # noqa: E731
    return Dyck2(train=pick(order[:a]), valid=pick(order[a:b]), test=pick(order[b:]))


def _dyck_outputs(pred, labels, lengths):
    check.tensor("pred", pred, 3)
    check.tensor("labels", labels, 3)
    check.shape("labels", labels, pred.shape)
    if pred.shape[-1] != 2:
        raise ValueError(f"pred must have 2 outputs (round, square) in its last dimension, got {tuple(pred.shape)}")
    check.same_device("pred", pred, labels=labels, lengths=lengths)
    check.lengths("lengths", lengths, pred.shape[0], pred.shape[1])
    steps = torch.arange(pred.shape[0], device=pred.device)[:, None]
    return steps < lengths[None, :]                        # (T, B) valid steps


def sequences_correct(pred: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor,
                      threshold: float = 0.5) -> torch.Tensor:
    """(B,) bool: whether every step of each sequence is right (seed 000 §3.2.3).

    pred (T, B, 2) probabilities, labels (T, B, 2) in {0, 1}, lengths (B,). A step is right when
    (pred > threshold) equals the label on both outputs; steps at or past a sequence's length are
    ignored (the authors' ``padded_all_same_metric``).
    """
    valid = _dyck_outputs(pred, labels, lengths)
    threshold = check.real("threshold", threshold)
    right = ((pred > threshold) == (labels > 0.5)).all(dim=-1) | ~valid
    return right.all(dim=0)


def whole_sequence_correct(pred: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor,
                           threshold: float = 0.5) -> float:
    """Fraction of sequences whose every step is right: the mean of ``sequences_correct``."""
    return sequences_correct(pred, labels, lengths, threshold).double().mean().item()


def dyck_mse(pred: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Squared error over the valid steps and both outputs: their mean, or (``reduction="sum"``,
    the authors' ``MSELoss(reduction="sum")``) their sum."""
    check.choice("reduction", reduction, ("mean", "sum"))
    valid = _dyck_outputs(pred, labels, lengths)
    sq = ((pred - labels).pow(2).sum(dim=-1) * valid).sum()
    return sq if reduction == "sum" else sq / (2 * valid.sum())
