"""The two corpus containers: one token stream per split, or one tensor per document."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tsrnn.lab.data.vocab import Vocabulary


@dataclass(repr=False)
class TextCorpus:
    """Word (or character) ids of a train/valid/test split, each a 1-D LongTensor.

    Each line of a split is its tokens followed by one ``<eos>`` (an empty line is ``<eos>``
    alone), as in the PyTorch word_language_model example. ``vocab`` comes from train only.
    """

    name: str
    vocab: Vocabulary
    train: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    valid: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    test: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    def __repr__(self) -> str:
        return (f"TextCorpus({self.name!r}, vocab={len(self.vocab)}, train={self.train.numel()}, "
                f"valid={self.valid.numel()}, test={self.test.numel()})")


@dataclass(repr=False)
class DocumentCorpus:
    """Documents of a train/valid/test split: lists of 1-D LongTensors, one per document."""

    name: str
    vocab: Vocabulary
    train: list = field(default_factory=list)
    valid: list = field(default_factory=list)
    test: list = field(default_factory=list)

    def __repr__(self) -> str:
        def size(docs):
            return f"{len(docs)} docs/{sum(d.numel() for d in docs)} tokens"

        return (f"DocumentCorpus({self.name!r}, vocab={len(self.vocab)}, train={size(self.train)}, "
                f"valid={size(self.valid)}, test={size(self.test)})")

    def without_unknown(self) -> "DocumentCorpus":
        """The corpus with its ``<unk>`` tokens removed from every document, the emptied documents
        left out, and ``<unk>``'s training count 0 (the other counts are those of the same tokens):
        a text that holds only the vocabulary's words, as seed 004 "only analyzed words that
        appeared more than 5 times". ValueError when a split is left without a token."""
        unk = self.vocab.unk_id
        if unk is None:
            return self
        splits = {}
        for split in ("train", "valid", "test"):
            docs = [kept for doc in getattr(self, split) if (kept := doc[doc != unk]).numel()]
            if getattr(self, split) and not docs:
                raise ValueError(f"{self.name}: every token of the {split} split is <unk>, so none is left when "
                                 "the words outside the vocabulary are removed")
            splits[split] = docs
        counts = self.vocab.counts.clone()
        counts[unk] = 0
        return DocumentCorpus(self.name, Vocabulary(self.vocab.itos, counts, self.vocab.specials), **splits)
