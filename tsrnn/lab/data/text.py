"""Line-based corpora: Penn Treebank (word and character level) and WikiText-2.

A split is read as the PyTorch word_language_model example reads it: the whitespace tokens of each
line, then ``<eos>``. Lines end at ``\\n``; a last fragment without ``\\n`` is a line only if it
holds a token (``ptb.char.*`` end in ``"\\n "``), so a split has ``wc -w`` + ``wc -l`` ids, the
"tokens + eos" of /work/shared/data/README.md.
"""
from __future__ import annotations

import os

from tsrnn import _validation as check
from tsrnn.lab.data.corpus import TextCorpus
from tsrnn.lab.data.vocab import EOS, UNK, Vocabulary

SPLITS = ("train", "valid", "test")
# level -> candidate file-name patterns, tried in order; {} is the split name
LAYOUTS = {
    "word": ("{}.txt", "ptb.{}.txt"),
    "char": ("ptb.char.{}.txt",),
}


def decode_text(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text; ValueError naming ``name`` if it is binary, not UTF-8, or has no token."""
    if b"\x00" in data:
        raise ValueError(f"{name} is not a text file (it holds NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not UTF-8 text: byte {err.start} is {data[err.start:err.start + 1]!r}") from None
    if not text.split():
        raise ValueError(f"{name} is empty: it holds no token")
    return text


def read_text(path: str) -> str:
    """The text of a UTF-8 file; FileNotFoundError or ValueError naming the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist or is not a file")
    with open(path, "rb") as f:
        return decode_text(f.read(), path)


def lines_of(text: str) -> list[str]:
    """The ``\\n``-terminated lines, plus a last unterminated fragment if it holds a token."""
    lines = text.split("\n")
    if not lines[-1].split():
        lines.pop()
    return lines


def line_tokens(text: str) -> list[str]:
    """Whitespace tokens of every line, each line followed by ``<eos>``."""
    tokens: list[str] = []
    extend, append = tokens.extend, tokens.append
    for line in lines_of(text):
        extend(line.split())
        append(EOS)
    return tokens


def split_files(path: str, level: str = "word") -> dict[str, str]:
    """{split: file} of a corpus directory; FileNotFoundError names the files expected."""
    check.choice("level", level, tuple(LAYOUTS))
    expected = [[os.path.join(path, pattern.format(s)) for s in SPLITS] for pattern in LAYOUTS[level]]
    wanted = " or ".join(", ".join(os.path.basename(f) for f in files) for files in expected)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no corpus directory at {path}: expected a directory holding {wanted}")
    for files in expected:
        if any(os.path.isfile(f) for f in files):
            missing = [f for f in files if not os.path.isfile(f)]
            if missing:
                raise FileNotFoundError(f"corpus at {path} lacks {', '.join(missing)}")
            return dict(zip(SPLITS, files))
    raise FileNotFoundError(f"corpus directory {path} holds none of the {level}-level files: expected {wanted}")


def load_text_corpus(path, level: str = "word") -> TextCorpus:
    """Read the train/valid/test splits of a PTB or WikiText-2 directory.

    path: a directory with ``train.txt``, ``valid.txt``, ``test.txt`` (WikiText-2) or
    ``ptb.train.txt`` ... (PTB, ``level="word"``) or ``ptb.char.train.txt`` ...
    (``level="char"``: space-separated characters with ``_`` between words, same tokenization).

    The vocabulary holds ``<unk>``, ``<eos>`` (ids 0 and 1) and every train token, by train
    frequency; a valid/test token not in train maps to ``<unk>`` (PTB and WikiText-2 have none).
    PTB's own ``<unk>`` token is the same id. ``<unk>`` is left out when it is not needed (not
    in train and no valid/test token unknown), so the sizes are the standard ones: PTB 10,000,
    WikiText-2 33,278, character PTB 50 (49 symbols + ``<eos>``, ``unk_id`` None). The corpus
    name is the directory name, plus ``-char`` at character level.

    Raises FileNotFoundError naming the files expected, and ValueError naming a file that is
    not UTF-8 text or holds no token.
    """
    path = os.fspath(path)
    files = split_files(path, level)
    tokens = {split: line_tokens(read_text(f)) for split, f in files.items()}
    known = set(tokens["train"])
    needs_unk = UNK in known or any(t not in known for s in SPLITS[1:] for t in tokens[s])
    vocab = Vocabulary.build(tokens["train"], min_count=1, specials=(UNK, EOS) if needs_unk else (EOS,))
    name = os.path.basename(os.path.normpath(path)) + ("-char" if level == "char" else "")
    return TextCorpus(name, vocab, *(vocab.encode(tokens[s]) for s in SPLITS))
