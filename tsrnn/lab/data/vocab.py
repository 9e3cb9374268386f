"""Word <-> id maps built from training-split token counts.

Ids: the specials first, in the order given, then the kept words by decreasing training count
(ties in order of first appearance), so id order is frequency order, as adaptive softmax and the
frequency bins of seed 000 (Table 1) want.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

import torch

from tsrnn import _validation as check

UNK = "<unk>"
EOS = "<eos>"


class Vocabulary:
    """An id for every kept word, with the training count of every id.

    Build one with :meth:`Vocabulary.build`. ``itos`` (list) and ``stoi`` (dict) map both ways;
    ``counts`` (LongTensor (V,)) holds how often each id occurs in the training tokens *after*
    mapping: ``<unk>`` counts the ``<unk>`` tokens of the text plus every dropped rare word (0 once
    ``DocumentCorpus.without_unknown`` removed them), ``<eos>`` the number of lines. ``unk_id`` /
    ``eos_id`` are None when that special is absent.
    """

    def __init__(self, itos: Sequence[str], counts: Sequence[int] | torch.Tensor, specials: Sequence[str] = ()):
        itos = list(itos)
        for word in itos:
            if not isinstance(word, str):
                raise TypeError(f"itos must hold str, got {type(word).__name__}")
        stoi = {word: i for i, word in enumerate(itos)}
        if len(stoi) != len(itos):
            seen, dup = set(), None
            for word in itos:
                if word in seen:
                    dup = word
                    break
                seen.add(word)
            raise ValueError(f"itos must hold distinct words, got {dup!r} twice")
        counts = torch.as_tensor(counts, dtype=torch.long).reshape(-1)
        if counts.numel() != len(itos):
            raise ValueError(f"counts must have one entry per word ({len(itos)}), got {counts.numel()}")
        if counts.numel() and int(counts.min()) < 0:
            raise ValueError("counts must be >= 0")
        for special in specials:
            if special not in stoi:
                raise ValueError(f"special {special!r} is not in itos")
        self.itos: list[str] = itos
        self.stoi: dict[str, int] = stoi
        self.counts: torch.Tensor = counts
        self.specials: tuple[str, ...] = tuple(specials)
        self.unk_id: int | None = stoi.get(UNK)
        self.eos_id: int | None = stoi.get(EOS)

    @classmethod
    def build(cls, tokens: Iterable[str], min_count: int = 1, specials: Sequence[str] = (UNK, EOS)) -> "Vocabulary":
        """Keep the specials and every word seen at least ``min_count`` times in ``tokens``.

        ``tokens`` are the training split's tokens (with its ``<eos>`` marks, if any). A special
        that also occurs in the text (PTB's ``<unk>``) is one id. Words below ``min_count`` map
        to ``<unk>``, which must then be among the specials.
        """
        min_count = check.count("min_count", min_count)
        if isinstance(specials, str):
            raise TypeError("specials must be a sequence of str, e.g. ('<unk>', '<eos>'), not one str")
        specials = tuple(specials)
        if len(set(specials)) != len(specials):
            raise ValueError(f"specials must be distinct, got {specials}")
        freq = Counter(tokens)  # insertion order = first appearance; sorted() below is stable
        kept = [(w, c) for w, c in sorted(freq.items(), key=lambda wc: -wc[1]) if c >= min_count and w not in specials]
        dropped = sum(freq.values()) - sum(c for _, c in kept) - sum(freq.get(s, 0) for s in specials)
        if dropped and UNK not in specials:
            raise ValueError(f"min_count={min_count} drops {dropped} tokens but {UNK!r} is not in specials")
        counts = [freq.get(s, 0) + (dropped if s == UNK else 0) for s in specials] + [c for _, c in kept]
        return cls(list(specials) + [w for w, _ in kept], counts, specials)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word) -> bool:
        return word in self.stoi

    def __eq__(self, other) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.itos == other.itos and self.specials == other.specials and torch.equal(self.counts, other.counts)

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)}, specials={list(self.specials)}, tokens={int(self.counts.sum())})"

    def encode(self, tokens: Iterable[str]) -> torch.Tensor:
        """LongTensor (N,) of ids; a word not in the vocabulary becomes ``<unk>``."""
        if isinstance(tokens, str):
            raise TypeError("encode takes a sequence of tokens, e.g. text.split(), not one str")
        get = self.stoi.get
        unk = self.unk_id
        if unk is None:
            ids = []
            for word in tokens:
                i = get(word)
                if i is None:
                    raise ValueError(f"{word!r} is not in the vocabulary, which has no {UNK!r}")
                ids.append(i)
        else:
            ids = [get(word, unk) for word in tokens]
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids) -> list[str]:
        """The words of a 1-D sequence of ids (tensor or list of int)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"ids must be a 1-D integer tensor, got dtype {ids.dtype} shape {tuple(ids.shape)}")
            ids = ids.tolist()
        return [self.itos[check.index("id", i, len(self))] for i in ids]

    def state_dict(self) -> dict:
        """A plain JSON-able dict; :meth:`from_state_dict` rebuilds an equal Vocabulary."""
        return {"itos": list(self.itos), "counts": self.counts.tolist(), "specials": list(self.specials)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Vocabulary":
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, got {type(state).__name__}")
        missing = [k for k in ("itos", "counts", "specials") if k not in state]
        if missing:
            raise ValueError(f"state is missing {missing}; expected the dict of Vocabulary.state_dict()")
        return cls(state["itos"], state["counts"], state["specials"])


def frequency_bins(counts: torch.Tensor, edges: Sequence[int] = (100, 1000, 10000)) -> torch.Tensor:
    """LongTensor (V,): the bin of every id by training count, as in seed 000 Table 1.

    Bin i holds counts c with edges[i-1] <= c < edges[i]; with the default edges the bins are
    0: below 100, 1: 100-1K, 2: 1K-10K, 3: 10K and above.
    """
    if not isinstance(counts, torch.Tensor) or counts.dim() != 1:
        raise TypeError("counts must be a 1-D tensor (Vocabulary.counts)")
    edges_t = torch.tensor(list(edges), dtype=torch.long)
    if edges_t.numel() and not bool((edges_t[1:] > edges_t[:-1]).all()):
        raise ValueError(f"edges must be increasing, got {list(edges)}")
    return torch.bucketize(counts.long(), edges_t, right=True)
