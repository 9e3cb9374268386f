"""The classification tasks, one label per sequence (seed 002): frequency discrimination, pixel-by-pixel
digits and IMDB sentiment."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tsrnn.lab import data as datasets
from tsrnn.lab import models
from tsrnn.lab.data import sine_waves
from tsrnn.lab.training.tasks.base import Task, register


class ClassificationTask(Task):
    """One label per sequence: cross-entropy on ``logits_and_labels(model, batch)``; evaluation over
    ``eval_batches(split)`` reports loss, accuracy, and ``majority``, the accuracy of always
    answering the split's most frequent class."""

    unit = "seq"
    cells = ("lstm", "chrono", "plstm")

    def logits_and_labels(self, model, batch):
        raise NotImplementedError

    def eval_batches(self, split):
        raise NotImplementedError

    def train_loss(self, model, batch, carry):
        logits, labels = self.logits_and_labels(model, batch)
        return F.cross_entropy(logits, labels), None, len(labels)

    @torch.no_grad()
    def evaluate(self, model, split):
        model.eval()
        loss = correct = 0.0
        counts = None
        for batch in self.eval_batches(split):
            logits, labels = self.logits_and_labels(model, batch)
            loss += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            n = torch.bincount(labels.cpu(), minlength=logits.shape[-1])
            counts = n if counts is None else counts + n
        total = counts.sum().item()
        return {"loss": loss / total, "accuracy": correct / total, "majority": counts.max().item() / total}


@register
class FrequencyTask(ClassificationTask):
    """Frequency discrimination (seed 002 §5.4, A.2; data as Neil et al. 2016): fresh batches each
    epoch, a fixed validation set (seed + 10,000; test: seed + 20,000).

    ``--async`` samples at random times (else every ``--resolution``, 1 or 0.1); ``--time-input``
    feeds the sample time (times ``--time-scale``, default 1: the raw 0 to 125) as a second input. The defaults are the seed's model and data (110 units,
    Adam 1e-3, batch 32, 5,000 training and 500 validation sequences, Neil et al.'s sizes) for
    15 epochs instead of Neil et al.'s 70 (``--recipe seed002 --task freq`` runs 70). Measured on
    2 cores (one thread per run, seed 0), async without time input, validation accuracy after
    15 epochs (about 2.5 min): pLSTM 0.87, LSTM 0.58, chrono 0.64, majority class 0.52."""

    name = "freq"
    defaults = {"cell": "plstm", "nhid": "110", "batch_size": 32, "lr": 1e-3, "clip": 1.0, "epochs": 15,
                "resolution": 1.0, "freq_size": "5000,500", "time_scale": 1.0}
    model_keys = ("cell", "nhid", "asynchronous", "resolution", "time_input", "time_scale")

    def __init__(self, args, device):
        super().__init__(args, device)
        self.n_train, self.n_valid = (int(v) for v in str(args.freq_size).split(","))
        self.resolution = None if args.asynchronous else args.resolution

    def config(self) -> dict:
        """The model's settings; ``time_scale`` only where it is not the raw time's 1, so that a
        checkpoint saved before the option existed still resumes."""
        config = super().config()
        if config["time_scale"] == 1.0:
            del config["time_scale"]
        return config

    def build_model(self):
        a = self.args
        t_max = float(sine_waves.longest(self.resolution)) if a.cell == "chrono" else None
        return models.FrequencyModel(a.cell, hidden_size=int(a.nhid), time_input=a.time_input,
                                     time_scale=a.time_scale, t_max=t_max,
                                     generator=torch.Generator().manual_seed(a.seed), backend=a.backend)

    def _draw(self, count, g):
        sizes = [self.args.batch_size] * (count // self.args.batch_size) + [count % self.args.batch_size]
        return [sine_waves.sine_waves(n, self.resolution, generator=g) for n in sizes if n]

    def train_batches(self, epoch, rank, world):
        return self._draw(self.n_train // world, self.epoch_generator(epoch, rank))

    def eval_batches(self, split):
        return self._draw(self.n_valid, torch.Generator().manual_seed(
            self.args.seed + (20_000 if split == "test" else 10_000)))

    def logits_and_labels(self, model, batch):
        batch = batch.to(self.device)
        return model(batch), batch.labels


@register
class PixelsTask(ClassificationTask):
    """Pixel-by-pixel digit classification (seed 002 §4.2): sequential or, with ``--permute``,
    permuted pixels (one permutation from seed 0 for every run). ``--data DIR`` reads MNIST's IDX
    files (784 steps, 50,000 / 10,000 / 10,000); without it, scikit-learn's 8x8 digits (64 steps,
    1,297 / 250 / 250). chrono's t_max is the sequence length. The defaults are a small CPU setting
    (128 units, batch 32, Adam 3e-3, 20 epochs); ``--recipe seed002 --task pixels`` is the seed's
    (Adam 1e-3, 256 units; ``--nhid 512`` its larger model). Measured on 2 cores (one thread per
    run, seed 0, 8x8 digits), validation accuracy after 20 epochs: pLSTM 0.86 (0.88 with 2 threads,
    25 s), LSTM 0.84."""

    name = "pixels"
    defaults = {"cell": "plstm", "nhid": "128", "batch_size": 32, "lr": 3e-3, "clip": 1.0, "epochs": 20}
    model_keys = ("cell", "nhid", "permute", "steps")
    repr_keys = ("cell", "nhid", "steps")

    def __init__(self, args, device):
        super().__init__(args, device)
        splits = datasets.load_mnist(args.data) if args.data else datasets.load_small_digits()
        self.splits = splits.permuted(0) if args.permute else splits
        args.steps = self.splits.steps

    def build_model(self):
        a = self.args
        t_max = float(self.splits.steps) if a.cell == "chrono" else None
        return models.SequenceClassifier(a.cell, 1, int(a.nhid), datasets.digits.CLASSES, t_max=t_max,
                                         generator=torch.Generator().manual_seed(a.seed), backend=a.backend)

    def _batches(self, split, order=None):
        x, y = getattr(self.splits, split)
        order = torch.arange(len(y)) if order is None else order
        return [(x[idx], y[idx]) for idx in order.split(self.args.batch_size)]

    def train_batches(self, epoch, rank, world):
        return self._batches("train", self.epoch_order(len(self.splits.train[1]), epoch)[rank::world])

    def eval_batches(self, split):
        return self._batches(split)

    def logits_and_labels(self, model, batch):
        x, y = (t.to(self.device) for t in batch)
        return model(x.t().unsqueeze(-1)), y


@register
class SentimentTask(ClassificationTask):
    """IMDB sentiment classification (seed 002 §4.4) from the aclImdb folder (``--data DIR``).

    The seed's setting is the default: 20 epochs, Adam at 1e-3 (LSTM, chrono) or 5e-4 (pLSTM),
    128 units (LSTM, chrono) or 154 (pLSTM), dropout 0.2 on the recurrent output, reviews cut to
    400 words, a 25,000-word dictionary, 100-d embeddings (``--embeddings`` GloVe file, frozen;
    else trained). The seed reports the test accuracy of the epoch with the lowest validation
    loss: ``best.pt``, scored by ``tsrnn eval runs/imdb/best.pt``. It does not state the batch size
    (64 here); chrono's t_max is 400."""

    name = "imdb"
    defaults = {"cell": "plstm", "batch_size": 64, "clip": 0.0, "epochs": 20, "dropout": 0.2, "emsize": 100}
    model_keys = ("cell", "nhid", "emsize", "dropout", "embeddings", "vocab_size")
    repr_keys = ("cell", "nhid", "vocab_size")

    def __init__(self, args, device):
        super().__init__(args, device)
        if args.data is None:
            raise ValueError("--task imdb needs --data DIR, the aclImdb folder (train/ and test/, pos/ and neg/)")
        plstm = args.cell == "plstm"
        args.nhid = args.nhid or ("154" if plstm else "128")   # seed 002: ~118K parameters each
        args.lr = args.lr or (5e-4 if plstm else 1e-3)          # seed 002's grid-searched rates
        self.data = datasets.load_imdb(args.data)
        args.vocab_size = len(self.data.words)
        self.vectors = None
        if args.embeddings:
            self.vectors, found = datasets.imdb.load_vectors(args.embeddings, self.data.words)
            args.emsize = self.vectors.shape[1]
            print(f"tsrnn train: {found} of {len(self.data.words)} words have vectors in {args.embeddings}")

    def build_model(self):
        a = self.args
        return models.SentimentModel(a.cell, int(a.nhid), vocab_size=a.vocab_size, embedding_size=a.emsize,
                                     vectors=self.vectors, dropout=a.dropout,
                                     t_max=400.0 if a.cell == "chrono" else None,
                                     generator=torch.Generator().manual_seed(a.seed), backend=a.backend)

    def _batches(self, reviews, order):
        batches = []
        for idx in order.split(self.args.batch_size):
            seqs = [reviews.tokens[i] for i in idx]
            tokens = torch.nn.utils.rnn.pad_sequence(seqs, padding_value=datasets.imdb.PAD)
            batches.append((tokens, torch.tensor([len(s) for s in seqs]), reviews.labels[idx]))
        return batches

    def train_batches(self, epoch, rank, world):
        reviews = self.data.train
        return self._batches(reviews, self.epoch_order(len(reviews.labels), epoch)[rank::world])

    def eval_batches(self, split):
        reviews = getattr(self.data, split)
        return self._batches(reviews, torch.arange(len(reviews.labels)))

    def logits_and_labels(self, model, batch):
        tokens, lengths, labels = (t.to(self.device) for t in batch)
        return model(tokens, lengths), labels
