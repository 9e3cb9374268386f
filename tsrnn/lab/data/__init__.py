"""The training tasks' data: corpora, vocabularies and batching, the digit and review loaders, and the
synthetic tasks.

    from tsrnn.lab.data import default_corpus, batchify, bptt_batches
    corpus = default_corpus()                      # embedded tiny-shakespeare, word level
    stream = batchify(corpus.train, batch_size=20) # (N, B)
    for x, y in bptt_batches(stream, bptt=35):     # (T, B) inputs and next-token targets
        ...

Loaders: ``load_text_corpus`` (PTB word/char, WikiText-2), ``load_brown`` (documents),
``load_mnist`` / ``load_small_digits`` (pixel sequences), ``load_imdb`` (reviews).
Batching is time-major, like torch.nn.LSTM.

The synthetic tasks' data stand in submodules of their own, imported by name:
``tsrnn.lab.data.dyck`` (Dyck-2), ``tsrnn.lab.data.copy`` (the copy tasks) and ``tsrnn.lab.data.sine_waves``
(frequency discrimination), and so does Markov-PTB (seed 000 §3.1.1): ``tsrnn.lab.data.markov``'s
``write_markov_corpus`` (or ``python -m tsrnn.lab.data.markov PTB_DIR OUT_DIR``) writes a corpus sampled
from the bigram chain (``fit_markov_chain``) of a real one.
"""
from tsrnn.lab.data.vocab import Vocabulary, frequency_bins
from tsrnn.lab.data.corpus import DocumentCorpus, TextCorpus
from tsrnn.lab.data.text import load_text_corpus
from tsrnn.lab.data.brown import is_brown_path, load_brown
from tsrnn.lab.data.default import default_corpus
from tsrnn.lab.data.digits import PixelSplits, load_mnist, load_small_digits, read_idx
from tsrnn.lab.data.imdb import load_imdb
from tsrnn.lab.data.batching import (batchify, bptt_batches, document_batches, num_bptt_batches, sentence_batches,
                                 shard)

__all__ = ["Vocabulary", "frequency_bins", "TextCorpus", "DocumentCorpus", "load_text_corpus", "load_brown",
           "default_corpus", "batchify", "bptt_batches", "num_bptt_batches", "sentence_batches",
           "document_batches", "shard", "PixelSplits", "load_mnist", "load_small_digits", "read_idx",
           "load_imdb", "is_brown_path"]
