"""A small word-level corpus shipped inside the package, so training runs with no data and no download.

``tiny_shakespeare.txt`` is the first 190,000 bytes (7,189 lines, cut at a speech boundary) of
karpathy/char-rnn ``data/tinyshakespeare/input.txt`` (Shakespeare, public domain; see
ATTRIBUTION.txt). Tokenization: lower-case, then words (letters with inner apostrophes:
``o'er``, ``that's``), digit runs and single punctuation marks; blank lines (between speeches)
are dropped, every other line ends with ``<eos>``. The 5,859 non-blank lines are split 80/10/10
in order (train: Coriolanus; valid and test: the start of Richard III): 38,502 / 4,927 / 5,250 ids.
Words seen fewer than ``min_count`` = 3 times in train become ``<unk>``: V = 1,099 (3,912 with
every train word), small enough for a CPU LM to learn in a minute. ``<unk>`` is 8.8% of train,
17.9% of valid and 19.3% of test ids (12% of valid are words absent from train).
"""
from __future__ import annotations

import re
from importlib import resources

from tsrnn import _validation as check
from tsrnn.lab.data.corpus import TextCorpus
from tsrnn.lab.data.text import decode_text, lines_of
from tsrnn.lab.data.vocab import EOS, UNK, Vocabulary

FILE = "tiny_shakespeare.txt"
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|[0-9]+|[^\sa-z0-9]")


def words(line: str) -> list[str]:
    """Light normalization: lower-case words, digit runs and punctuation marks as tokens."""
    return _TOKEN.findall(line.lower())


def default_corpus(min_count: int = 3) -> TextCorpus:
    """The embedded tiny-shakespeare excerpt as a word-level TextCorpus (see module doc)."""
    min_count = check.count("min_count", min_count)
    data = resources.files("tsrnn.lab.data").joinpath(FILE).read_bytes()
    lines = [tokens + [EOS] for tokens in map(words, lines_of(decode_text(data, FILE))) if tokens]
    a, b = int(0.8 * len(lines)), int(0.9 * len(lines))
    splits = [[t for line in part for t in line] for part in (lines[:a], lines[a:b], lines[b:])]
    vocab = Vocabulary.build(splits[0], min_count=min_count, specials=(UNK, EOS))
    return TextCorpus("tiny-shakespeare", vocab, *(vocab.encode(s) for s in splits))
