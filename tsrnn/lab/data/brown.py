"""The Brown corpus as documents, for the Bengio MLP LM of seed 004.

Seed 004 (after Bengio et al. 2003) trains on "the first ~800,000 words", evaluates on "the
~200,000 words following the training set", keeps "words that appeared more than 5 times" (a
vocabulary of ~13,000) and clears the context at the start of each document. Here:

- documents ca01 .. cr09 in file order (NLTK's ``brown.fileids()`` order, grouped by category);
- a token ``word/tag`` is the word before the last ``/``; case is kept (Bengio et al. distinguish
  upper and lower case, and the case-sensitive count, 13,160 words seen more than 5 times in the
  whole corpus, is the closer to seed 004's ~13,000; lower-cased it is 12,416);
- a document goes to train if it starts before token 800,000 of the corpus, to valid if it starts
  before token 1,000,000, else to test: 348 / 85 / 67 documents, 800,223 / 199,910 / 161,059
  tokens (Bengio's 800k / 200k / rest, at document boundaries). Seed 004's evaluation set is valid;
- the vocabulary is ``<unk>`` plus the words seen at least ``min_count`` = 6 times in the train
  documents (10,328 ids); ``vocab_from="all"`` counts the whole corpus instead, as seed 004 says
  (13,161 ids);
- no ``<eos>``: seed 004 marks no sentence ends (the files hold one sentence per line); the
  documents are the units.

Seed 004's "only analyzed words that appeared more than 5 times" is the corpus's
``without_unknown()`` (the ``<unk>`` tokens removed after the split; ``--rare-words drop``).
"""
from __future__ import annotations

import os
import re
import zipfile
import zlib
from pathlib import Path

from tsrnn import _validation as check
from tsrnn.lab.data.corpus import DocumentCorpus
from tsrnn.lab.data.text import decode_text
from tsrnn.lab.data.vocab import UNK, Vocabulary

DOCUMENT = re.compile(r"c[a-r]\d\d")  # ca01 .. cr09; README, CONTENTS, cats.txt do not match
TRAIN_TOKENS = 800_000
VALID_TOKENS = 200_000


def _words(text: str, lowercase: bool) -> list[str]:
    words = [token.rpartition("/")[0] or token for token in text.split()]
    return [w.lower() for w in words] if lowercase else words


def _read_documents(path: str) -> list[tuple[str, str]]:
    """[(name, text)] of the documents in a brown.zip or an extracted brown/ directory, in name order."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if DOCUMENT.fullmatch(n) and os.path.isfile(os.path.join(path, n)))
        if not names:
            raise FileNotFoundError(f"{path} holds no Brown document (files ca01 .. cr09)")
        out = []
        for n in names:
            with open(os.path.join(path, n), "rb") as f:
                out.append((n, decode_text(f.read(), os.path.join(path, n))))
        return out
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: expected brown.zip or an extracted brown/ directory")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{path} is not a zip archive: expected NLTK's brown.zip") from None
    with archive:
        members = sorted((m for m in archive.namelist() if DOCUMENT.fullmatch(m.rsplit("/", 1)[-1])),
                         key=lambda m: m.rsplit("/", 1)[-1])
        if not members:
            raise FileNotFoundError(f"{path} holds no Brown document (members brown/ca01 .. brown/cr09)")
        out = []
        for m in members:
            try:
                data = archive.read(m)
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise ValueError(f"{path}:{m} cannot be read, the archive is damaged: {err}") from None
            out.append((m.rsplit("/", 1)[-1], decode_text(data, f"{path}:{m}")))
        return out


def is_brown_path(path) -> bool:
    """Whether ``path`` names the Brown corpus as ``load_brown`` reads it: a ``.zip`` archive or a
    directory named ``brown`` (what the mlp-lm task loads as documents, not as a text corpus)."""
    return path is not None and (Path(path).suffix == ".zip" or Path(path).name == "brown")


def load_brown(path, min_count: int = 6, lowercase: bool = False, vocab_from: str = "train") -> DocumentCorpus:
    """The Brown corpus split 800k / 200k / rest tokens at document boundaries (see module doc).

    path: ``brown.zip`` (read in place) or the extracted ``brown/`` directory.
    min_count: a word is kept if seen at least this often (6: "more than 5 times").
    lowercase: lower-case the words first (default False, as Bengio et al.).
    vocab_from: ``"train"`` counts the train documents, ``"all"`` all 500 (seed 004).
    Returns a DocumentCorpus named "brown": per split a list of 1-D LongTensors; ValueError if
    the corpus is too small for a valid or test split.
    """
    min_count = check.count("min_count", min_count)
    check.choice("vocab_from", vocab_from, ("train", "all"))
    docs = [_words(text, bool(lowercase)) for _, text in _read_documents(os.fspath(path))]
    splits: dict[str, list[list[str]]] = {"train": [], "valid": [], "test": []}
    start = 0
    for words in docs:
        split = "train" if start < TRAIN_TOKENS else "valid" if start < TRAIN_TOKENS + VALID_TOKENS else "test"
        splits[split].append(words)
        start += len(words)
    for split, first in (("valid", TRAIN_TOKENS), ("test", TRAIN_TOKENS + VALID_TOKENS)):
        if not splits[split]:
            raise ValueError(f"{os.fspath(path)} is too small: its {len(docs)} documents ({start:,} tokens) leave the "
                             f"{split} split empty; {split} takes the documents starting from token {first:,}, so "
                             f"the corpus needs more than {first:,} tokens (NLTK's brown.zip: 500 documents, "
                             f"1,161,192 tokens)")
    counted = splits["train"] if vocab_from == "train" else docs
    vocab = Vocabulary.build((w for words in counted for w in words), min_count=min_count, specials=(UNK,))
    if vocab_from == "all":  # counts stay training counts (frequency bins, unigram baselines)
        train = Vocabulary.build((w for words in splits["train"] for w in words), min_count=1, specials=(UNK,))
        counts = vocab.counts.new_zeros(len(vocab))
        ids = vocab.encode(train.itos)
        counts.index_add_(0, ids, train.counts)
        vocab = Vocabulary(vocab.itos, counts, vocab.specials)
    encoded = ([vocab.encode(words) for words in splits[s]] for s in ("train", "valid", "test"))
    return DocumentCorpus("brown", vocab, *encoded)
