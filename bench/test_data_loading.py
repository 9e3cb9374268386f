"""Corpus loading time (the timed part of what tests/unit/test_data.py checks for counts): the
embedded default corpus, and WikiText-2 / Brown when the corpora are on disk (TSRNN_DATA)."""
import os

import pytest

from tsrnn.lab.data import default_corpus, load_brown, load_text_corpus

DATA = os.environ.get("TSRNN_DATA", "/work/shared/data")
CORPORA = {
    "default": (None, default_corpus),
    "wikitext-2": (os.path.join(DATA, "wikitext-2"), load_text_corpus),
    "brown": (os.path.join(DATA, "brown", "brown.zip"), load_brown),
}


@pytest.mark.parametrize("name", list(CORPORA))
def test_load_corpus(benchmark, name):
    path, load = CORPORA[name]
    if path is not None and not os.path.exists(path):
        pytest.skip(f"{path} not on disk")
    corpus = benchmark.pedantic(load, args=() if path is None else (path,), rounds=1, iterations=1)
    assert len(corpus.vocab) > 1000
