"""The IMDB sentiment data (Maas et al. 2011; seed 002 §4.4) from the standard ``aclImdb`` folder:
``train/pos``, ``train/neg``, ``test/pos``, ``test/neg``, one review per ``.txt`` file. Nothing is
downloaded.

Preprocessing, as seed 002 describes it: a dictionary of the 25,000 most frequent training words
(plus ``<pad>`` 0 and ``<unk>`` 1), every review cut to its first 400 words, a random 10% of the
training reviews (seed 0) held out for validation. The seed follows Rusch & Mishra's setup
(torchtext with spaCy tokens); tsrnn tokenizes without spaCy: lower case, the ``<br />`` line
breaks removed, words (with inner apostrophes) and each punctuation mark as tokens.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

PAD, UNK = 0, 1
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*|[^\sa-z0-9]")
FOLDERS = ("train/pos", "train/neg", "test/pos", "test/neg")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("<br />", " "))


@dataclass(frozen=True)
class Reviews:
    """tokens: one int64 tensor of ids per review (at most max_length); labels (N,) int64, 1 positive;
    lengths (N,) int64, each review's number of tokens before the cut (seed 002 Figure 4's length)."""
    tokens: list
    labels: torch.Tensor
    lengths: torch.Tensor


@dataclass(frozen=True)
class IMDB:
    words: list          # id -> word; words[0] = "<pad>", words[1] = "<unk>"
    train: Reviews
    valid: Reviews
    test: Reviews


def _read(directory: Path, split: str) -> tuple[list[list[str]], list[int]]:
    texts, labels = [], []
    for label, polarity in ((1, "pos"), (0, "neg")):
        for path in sorted((directory / split / polarity).glob("*.txt")):
            texts.append(tokenize(path.read_text(encoding="utf-8", errors="replace")))
            labels.append(label)
    if not texts:
        raise ValueError(f"{directory / split} holds no reviews (*.txt files in pos/ and neg/)")
    return texts, labels


def load_imdb(directory, vocab_size: int = 25_000, max_length: int = 400, valid_fraction: float = 0.1) -> IMDB:
    """The aclImdb folder at ``directory`` as ids: the dictionary from the training reviews that
    remain after the validation cut."""
    directory = Path(directory)
    missing = [folder for folder in FOLDERS if not (directory / folder).is_dir()]
    if missing:
        raise FileNotFoundError(f"IMDB directory {directory} lacks {', '.join(missing)}; it needs aclImdb's "
                                f"{', '.join(FOLDERS)} folders (one review per .txt file)")
    train_texts, train_labels = _read(directory, "train")
    test_texts, test_labels = _read(directory, "test")
    order = torch.randperm(len(train_texts), generator=torch.Generator().manual_seed(0)).tolist()
    n_valid = round(valid_fraction * len(order))
    valid_idx, train_idx = order[:n_valid], order[n_valid:]
    for split, idx in (("valid", valid_idx), ("train", train_idx)):
        if not idx:
            raise ValueError(f"IMDB directory {directory}: the {split} split is empty: valid takes {valid_fraction:g} "
                             f"of the {len(order)} reviews in train/ ({n_valid}), train the rest")
    counts = Counter(word for i in train_idx for word in train_texts[i])
    words = ["<pad>", "<unk>"] + [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:vocab_size]]
    ids = {w: i for i, w in enumerate(words)}

    def encode(texts, labels, idx):
        tokens = [torch.tensor([ids.get(w, UNK) for w in texts[i][:max_length]] or [UNK], dtype=torch.int64)
                  for i in idx]
        return Reviews(tokens, torch.tensor([labels[i] for i in idx], dtype=torch.int64),
                       torch.tensor([len(texts[i]) for i in idx], dtype=torch.int64))

    return IMDB(words, encode(train_texts, train_labels, train_idx), encode(train_texts, train_labels, valid_idx),
                encode(test_texts, test_labels, range(len(test_texts))))


def _numbers(where: str, word: str, text: str) -> list[float]:
    """The finite numbers of a vector line's ``text``; ValueError at ``where`` naming a bad value."""
    values = []
    for i, value in enumerate(text.split(), 1):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise ValueError(f"{where}: value {i} of {word!r} is {value!r}, not a finite number")
        values.append(number)
    if not values:
        raise ValueError(f"{where}: {word!r} has no numbers")
    return values


def load_vectors(path, words: list, dim: int | None = None) -> tuple[torch.Tensor, int]:
    """Word vectors for ``words`` from a GloVe-format UTF-8 text file (a word, then its numbers, per line).
    Returns (vectors (len(words), dim) float32, how many words were found); words the file lacks
    get N(0, 0.1²) draws (seed 0), ``<pad>`` zeros. The lines of those words must hold ``dim``
    (else the first such line's count of) finite numbers: ValueError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"embeddings file {path} not found (GloVe text format, e.g. glove.6B.100d.txt)")
    wanted = {w: i for i, w in enumerate(words)}
    found: dict[int, list[float]] = {}
    width = "" if dim is None else f"{dim}"
    with path.open("rb") as f:
        for line_number, raw in enumerate(f, 1):
            where = f"{path}:{line_number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{where}: not UTF-8 text (byte {err.start} of the line is "
                                 f"{raw[err.start:err.start + 1]!r})") from None
            word, _, rest = line.rstrip().partition(" ")
            if word in wanted:
                values = _numbers(where, word, rest)
                if dim is None:
                    dim, width = len(values), f"{len(values)} (as on line {line_number})"
                if len(values) != dim:
                    raise ValueError(f"{where}: {len(values)} numbers, expected {width}")
                found[wanted[word]] = values
    if not found:
        raise ValueError(f"{path} holds a vector for none of the {len(words)} words")
    vectors = 0.1 * torch.randn(len(words), dim, generator=torch.Generator().manual_seed(0))
    for i, values in found.items():
        vectors[i] = torch.tensor(values)
    vectors[PAD] = 0
    return vectors, len(found)
