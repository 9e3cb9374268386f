"""The training tasks of the seeds, as the trainer sees them.

Each task builds its data and model from the command-line arguments, lists the batches of an
epoch (deterministic given the seed, sharded by rank), computes a batch's loss, and evaluates a
split. ``config()`` is what identifies the model: a checkpoint only resumes or evaluates under an
equal config.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from tsrnn import data as datasets
from tsrnn import models
from tsrnn import sine_waves, synthetic
from tsrnn.training import schedules

TASKS: dict[str, type] = {}


def register(cls):
    TASKS[cls.name] = cls
    return cls


def _unwrap(model):
    return getattr(model, "module", model)


class Task:
    name = ""
    unit = "items"
    cells: tuple = ()
    defaults: dict = {}
    model_keys: tuple = ()  # the arguments that define the model

    def __init__(self, args, device):
        for key, value in {**COMMON_DEFAULTS, **self.defaults}.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
        if self.cells and args.cell not in self.cells:
            raise ValueError(f"--cell {args.cell!r} is not available for --task {self.name}; choose from {list(self.cells)}")
        self.args, self.device = args, device

    def config(self) -> dict:
        return {"task": self.name, **{k: getattr(self.args, k) for k in self.model_keys}}

    def vocab_state(self):
        return None

    def loss_metrics(self, loss: float) -> dict:
        """The metrics a mean loss reports: the loss (and, for text, what it means per token)."""
        return {"loss": loss}

    def make_optimizer(self, model, averaged: bool = False):
        """--optimizer's optimizer; ``averaged``: the ASGD that NT-ASGD switches to."""
        a = self.args
        params = [p for p in model.parameters() if p.requires_grad]
        if averaged:
            return schedules.asgd(params, a.lr, a.weight_decay)
        if a.optimizer == "sgd":
            return torch.optim.SGD(params, lr=a.lr, weight_decay=a.weight_decay)
        if a.optimizer == "rmsprop":  # seed 002: RMSprop with moving-average parameter 0.9
            return torch.optim.RMSprop(params, lr=a.lr, alpha=0.9, weight_decay=a.weight_decay)
        return torch.optim.Adam(params, lr=a.lr, weight_decay=a.weight_decay)

    def lr_scale(self, batch) -> float:
        """Factor on the learning rate for this batch's step (AWD-LSTM: window length / bptt)."""
        return 1.0

    def epoch_generator(self, epoch: int, rank: int | None = None) -> torch.Generator:
        """The generator of an epoch's draws, seeded by --seed and the epoch, and by the rank for
        draws each process makes for itself (the same on every run and resume)."""
        seed = self.args.seed * 1000 + epoch
        return torch.Generator().manual_seed(seed if rank is None else seed * 64 + rank)

    def epoch_order(self, n: int, epoch: int) -> torch.Tensor:
        """The epoch's shuffled order of n training items (the same on every rank)."""
        return torch.randperm(n, generator=self.epoch_generator(epoch))

    def solved(self, metrics: dict) -> bool:
        """True when a validation result ends training early (seed 002's copy-task rule)."""
        return False


COMMON_DEFAULTS = {"seed": 0, "optimizer": "adam", "weight_decay": 0.0, "backend": "auto", "nonmono": 0, "lr_decay_after": 0,
                   "lr_decay_factor": 1.0, "patience": 0}


class TextTask(Task):
    """Word- or character-level corpora; the embedded default corpus when --data is not given."""

    unit = "tok"
    scoring = ""
    validation_scoring: dict = {}

    def __init__(self, args, device, vocab_state=None):
        super().__init__(args, device)
        self.corpus = self.load(args)
        if vocab_state is not None and vocab_state != self.corpus.vocab.state_dict():
            raise ValueError("the data's vocabulary differs from the one the checkpoint was trained with")

    def load(self, args):
        if args.data is None:
            return datasets.default_corpus()
        return datasets.load_text_corpus(args.data, level=args.level)

    @property
    def vocab(self):
        return self.corpus.vocab

    def vocab_state(self):
        return self.vocab.state_dict()

    def split(self, name):
        return getattr(self.corpus, name)

    def config(self) -> dict:
        return {**super().config(), "vocab_size": len(self.vocab)}

    @property
    def char_level(self) -> bool:
        return self.args.data is not None and self.args.level == "char"

    def loss_metrics(self, loss: float) -> dict:
        """loss (nats per token), perplexity, and bits per character (loss / ln 2) at character level."""
        ppl = math.exp(loss) if loss < 700 else math.inf  # a diverged run reports inf, not OverflowError
        return {"loss": loss, "ppl": ppl, **({"bpc": loss / math.log(2)} if self.char_level else {})}

    def evaluate(self, model, split):
        nll, _ = self.token_nll(model, split, **self.validation_scoring)
        return self.loss_metrics(nll.double().mean().item())


@register
class LanguageModelTask(TextTask):
    """AWD-LSTM-style LM (seed 000) with --cell lstm | mts | plstm, truncated BPTT."""

    name = "lm"
    scoring = " scored as one stream (batch size 1, the state carried across windows)"
    validation_scoring = {"batch_size": 10}  # AWD-LSTM's validation batch size; test (tsrnn eval) uses 1
    cells = ("lstm", "mts", "plstm")
    defaults = {"cell": "mts", "emsize": 64, "nhid": "128,128,64", "dropout": 0.2, "dropouth": 0.1,
                "dropouti": 0.2, "dropoute": 0.05, "wdrop": 0.2, "alpha": 2.0, "beta": 1.0, "mts_alpha": 0.56,
                "freeze": "gates", "batch_size": 20, "bptt": 35, "random_bptt": False, "lr": 3e-3, "clip": 0.25,
                "epochs": 20}
    model_keys = ("cell", "emsize", "nhid", "dropout", "dropouth", "dropouti", "dropoute", "wdrop", "alpha", "beta",
                  "mts_alpha", "freeze")

    def build_model(self):
        a = self.args
        return models.AWDLSTMLM(len(self.vocab), embedding_size=a.emsize,
                                hidden_sizes=tuple(int(h) for h in str(a.nhid).split(",")), cell=a.cell,
                                dropout=a.dropout, dropouth=a.dropouth, dropouti=a.dropouti,
                                dropoute=a.dropoute, wdrop=a.wdrop, alpha=a.alpha, beta=a.beta,
                                mts_alpha=a.mts_alpha, mts_freeze=a.freeze, backend=a.backend)

    def train_batches(self, epoch, rank, world):
        """BPTT windows of --bptt steps, or with --random-bptt of AWD-LSTM's random lengths
        (``schedules.random_bptt_length``, drawn from the seed, epoch and rank)."""
        stream = datasets.batchify(datasets.shard(self.split("train"), rank, world), self.args.batch_size)
        if not self.args.random_bptt:
            return list(datasets.bptt_batches(stream, self.args.bptt))
        g = self.epoch_generator(epoch, rank)
        batches, i = [], 0
        while i < stream.shape[0] - 2:  # AWD-LSTM: while i < len(train_data) - 1 - 1
            length = min(schedules.random_bptt_length(self.args.bptt, g), stream.shape[0] - 1 - i)
            batches.append((stream[i:i + length], stream[i + 1:i + 1 + length]))
            i += length
        return batches

    def lr_scale(self, batch) -> float:
        return batch[0].shape[0] / self.args.bptt if self.args.random_bptt else 1.0

    def train_loss(self, model, batch, carry):
        x, y = (t.to(self.device) for t in batch)
        logits, carry, extras = model(x, carry)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return loss + _unwrap(model).regularization(extras), carry, y.numel()

    @torch.no_grad()
    def token_nll(self, model, split, batch_size=1):
        """Per-token negative log-likelihood and target of a split, read as ``batch_size`` streams
        (1: every token after the first is a target, as seed 000 scores its test set)."""
        model.eval()
        stream = datasets.batchify(self.split(split), batch_size)
        carry, nll, targets = None, [], []
        for x, y in datasets.bptt_batches(stream, self.args.bptt):
            logits, carry, _ = model(x.to(self.device), carry)
            nll.append(F.cross_entropy(logits.transpose(1, 2), y.to(self.device), reduction="none").cpu())
            targets.append(y)
        return torch.cat(nll).T.reshape(-1), torch.cat(targets).T.reshape(-1)  # stream after stream


class MaskedTextTask(TextTask):
    """Text tasks whose batches are (x, y, reset, mask): a masked mean of the token losses."""

    scoring = " scored in the training batches' layout, each counted target once"

    def _batches(self, split, epoch=0, rank=0, world=1):
        raise NotImplementedError

    def train_batches(self, epoch, rank, world):
        return self._batches("train", epoch, rank, world)

    def _nll(self, model, batch):
        """(T, B) token losses and the (T, B) mask of the targets that count."""
        x, y, reset, mask = (None if t is None else t.to(self.device) for t in batch)
        logits = model(x, reset=reset)
        return F.cross_entropy(logits.transpose(1, 2), y, reduction="none"), mask

    def train_loss(self, model, batch, carry):
        nll, mask = self._nll(model, batch)
        count = mask.sum()
        return (nll * mask).sum() / count.clamp(min=1), None, int(count)

    @torch.no_grad()
    def token_nll(self, model, split):
        """Per-token negative log-likelihood and target of the counted targets, column by column."""
        model.eval()
        nll, targets = [], []
        for batch in self._batches(split):
            values, mask = self._nll(model, batch)
            keep = mask.T.cpu()
            nll.append(values.T.cpu()[keep])
            targets.append(batch[1].T[keep])
        return torch.cat(nll), torch.cat(targets)


@register
class AveragingLanguageModelTask(MaskedTextTask):
    """LSTM LM reading the running mean of its past states (seed 001), one sentence per column."""

    name = "averaging-lm"
    cells = ("lstm",)
    defaults = {"cell": "lstm", "emsize": 64, "nhid": "128", "nlayers": 2, "dropout": 0.2,
                "batch_size": 32, "bptt": 35, "order": "shuffled", "lr": 3e-3, "clip": 0.25, "epochs": 6,
                "memory": True}
    model_keys = ("emsize", "nhid", "nlayers", "dropout", "memory")

    def build_model(self):
        a = self.args
        return models.AveragingLM(len(self.vocab), embedding_size=a.emsize, hidden_size=int(a.nhid),
                                  num_layers=a.nlayers, dropout=a.dropout, memory=a.memory, backend=a.backend)

    def _batches(self, split, epoch=0, rank=0, world=1):
        """One sentence per column, padded to --bptt (35); for training in corpus order (seed 001:
        "taken from the dataset in sequence", --order corpus) or shuffled per epoch."""
        g = self.epoch_generator(epoch)
        ids = datasets.shard(self.split(split), rank, world)
        shuffle = split == "train" and self.args.order == "shuffled"
        batches = datasets.sentence_batches(ids, self.vocab.eos_id, self.args.batch_size, length=self.args.bptt,
                                            shuffle=shuffle, generator=g)
        return [(x, y, None, mask) for x, y, mask in batches]


@register
class MLPLanguageModelTask(MaskedTextTask):
    """Bengio MLP LM over a Buffer / TILT / TILT-Buffer context (seed 004), documents kept."""

    name = "mlp-lm"
    cells = ()
    defaults = {"cell": None, "context": "tilt", "n": 5, "emsize": 30, "nhid": "100", "batch_size": 32,
                "bptt": 128, "lr": 3e-3, "clip": 1.0, "epochs": 4, "vocab_from": "train"}
    model_keys = ("context", "n", "emsize", "nhid", "vocab_from")

    def load(self, args):
        if args.data is not None and (Path(args.data).suffix == ".zip" or Path(args.data).name == "brown"):
            return datasets.load_brown(args.data, vocab_from=args.vocab_from)
        corpus = super().load(args)  # a text corpus, cut into equal "documents" (4 per batch column)
        pieces = lambda ids: list(torch.tensor_split(ids, max(1, min(4 * args.batch_size, len(ids) // args.bptt))))  # noqa: E731
        return datasets.DocumentCorpus(corpus.name, corpus.vocab, pieces(corpus.train), pieces(corpus.valid),
                                       pieces(corpus.test))

    def build_model(self):
        a = self.args
        return models.MLPLM(len(self.vocab), embedding_size=a.emsize, hidden_size=int(a.nhid),
                            context=a.context, n=a.n)

    def _batches(self, split, epoch=0, rank=0, world=1):
        docs = datasets.shard(self.split(split), rank, world)
        return list(datasets.document_batches(docs, self.args.batch_size, self.args.bptt))

    def evaluate(self, model, split):
        """Loss and perplexity, and the perplexity of the unigram model of the training counts
        (add-one smoothed), the baseline seed 004 reports beside its MLPs."""
        nll, targets = self.token_nll(model, split)
        counts = self.vocab.counts.double() + 1
        unigram = -(counts[targets] / counts.sum()).log().mean().item()
        return {**self.loss_metrics(nll.double().mean().item()), "unigram_ppl": math.exp(unigram)}


@register
class DyckTask(Task):
    """Dyck-2 next-closing-bracket prediction (seed 000 §3.1.2): MSE, whole-sequence accuracy.

    The defaults are a small CPU setting (64 units, Adam 1e-2, 4 epochs: about a minute on 2 cores,
    validation accuracy near 0.6); ``--recipe seed000 --task dyck`` is the seed's."""

    name = "dyck"
    unit = "seq"
    cells = ("lstm", "mts")
    defaults = {"cell": "mts", "nhid": "64", "mts_alpha": 1.5, "freeze": "gates", "batch_size": 32, "lr": 1e-2,
                "clip": 1.0, "epochs": 4, "dyck_size": "10000,2000,5000", "chunk": 0, "dyck_loss": "mean"}
    model_keys = ("cell", "nhid", "mts_alpha", "freeze", "dyck_size")

    def __init__(self, args, device):
        super().__init__(args, device)
        n_train, n_valid, n_test = (int(v) for v in str(args.dyck_size).split(","))
        self.data = synthetic.dyck2(n_train, n_valid, n_test, seed=args.seed)

    def build_model(self):
        a = self.args
        return models.DyckModel(a.cell, hidden_size=int(a.nhid), alpha=a.mts_alpha, freeze=a.freeze,
                                backend=a.backend)

    def _batches(self, split, epoch=0, rank=0, world=1, shuffle=False):
        part = getattr(self.data, split)
        order = torch.arange(len(part))
        if shuffle:
            order = self.epoch_order(len(part), epoch)
        order = order[rank::world]
        batches = []
        for start in range(0, len(order), self.args.batch_size):
            idx = order[start:start + self.args.batch_size]
            steps = int(part.lengths[idx].max())
            batches.append((part.tokens[:steps, idx], part.labels[:steps, idx], part.lengths[idx]))
        return batches

    def train_batches(self, epoch, rank, world):
        """Shuffled batches of whole sequences; with --chunk C, each batch cut into consecutive
        chunks of C steps trained one optimizer step each with the state carried (the authors'
        stateful training, seq_length 200)."""
        batches = self._batches("train", epoch, rank, world, shuffle=True)
        if not self.args.chunk:
            return batches
        return [(tokens[s:s + self.args.chunk], labels[s:s + self.args.chunk], lengths - s, s == 0)
                for tokens, labels, lengths in batches for s in range(0, tokens.shape[0], self.args.chunk)]

    def train_loss(self, model, batch, carry):
        tokens, labels, lengths = (t.to(self.device) for t in batch[:3])
        if len(batch) == 3:
            return synthetic.dyck_mse(model(tokens), labels, lengths, self.args.dyck_loss), None, len(lengths)
        pred, carry = model(tokens, None if batch[3] else carry, return_state=True)
        active = lengths > 0  # sequences that have not ended before this chunk
        lengths = lengths.clamp(max=tokens.shape[0])[active]
        loss = synthetic.dyck_mse(pred[:, active], labels[:, active], lengths, self.args.dyck_loss)
        return loss, carry, int(active.sum())

    @torch.no_grad()
    def evaluate(self, model, split):
        model.eval()
        loss = correct = count = 0.0
        for tokens, labels, lengths in self._batches(split):
            tokens, labels, lengths = tokens.to(self.device), labels.to(self.device), lengths.to(self.device)
            pred = model(tokens)
            n = len(lengths)
            loss += synthetic.dyck_mse(pred, labels, lengths).item() * n
            correct += synthetic.whole_sequence_correct(pred, labels, lengths) * n
            count += n
        return {"loss": loss / count, "accuracy": correct / count}

    @torch.no_grad()
    def sequences_correct(self, model, split) -> torch.Tensor:
        """(N,) bool: whether each word of the split, in its order, has every output right (the
        words of ``self.data.<split>``, whose ``max_timescale`` is seed 000 Fig 2's x-axis)."""
        model.eval()
        return torch.cat([synthetic.sequences_correct(model(tokens.to(self.device)), labels.to(self.device),
                                                      lengths.to(self.device)).cpu()
                          for tokens, labels, lengths in self._batches(split)])


@register
class CopyTask(Task):
    """Copy and variable copy tasks (seed 002 §4.1): 10 symbols recalled after a delay T.

    The defaults are a small CPU setting (delay 20, Adam 1e-2, 2,500 steps of 32: under a minute on
    2 cores, symbol accuracy 0.7-0.85 for the pLSTM); ``--recipe seed002`` is the seed's."""

    name = "copy"
    unit = "seq"
    cells = ("lstm", "chrono", "plstm")
    defaults = {"cell": "plstm", "nhid": "128", "delay": 20, "batch_size": 32, "lr": 1e-2, "clip": 1.0,
                "epochs": 25, "steps_per_epoch": 100, "valid_batches": 8, "copy_size": None, "stop_accuracy": 0.0,
                "fixed_p": None}
    model_keys = ("cell", "nhid", "delay", "variable", "delay_min", "fixed_p")

    def __init__(self, args, device):
        super().__init__(args, device)
        self.sets = None
        if args.copy_size:  # seed 002: fixed training and validation sets drawn from the seed
            g = torch.Generator().manual_seed(args.seed)
            self.sets = {split: self._draw(int(n), g) for split, n in zip(("train", "valid"), str(args.copy_size).split(","))}

    def build_model(self):
        a = self.args
        t_max = 1.5 * a.delay if a.cell == "chrono" else None  # seed 002: T_max = 3T/2
        return models.CopyModel(a.cell, hidden_size=int(a.nhid), t_max=t_max, fixed_p=a.fixed_p,
                                generator=torch.Generator().manual_seed(a.seed), backend=a.backend)

    def _draw(self, count, generator):
        a = self.args
        if a.variable:  # delays drawn per sequence from [--delay-min, --delay] (seed 002: 200..500, 200..1000)
            return synthetic.variable_copy_task(count, (a.delay_min or max(1, a.delay // 2), a.delay),
                                                generator=generator)
        return synthetic.copy_task(count, a.delay, generator=generator)

    def _batch(self, generator):
        return self._draw(self.args.batch_size, generator)

    def train_batches(self, epoch, rank, world):
        g = self.epoch_generator(epoch, rank)
        if self.sets is None:
            return [self._batch(g) for _ in range(self.args.steps_per_epoch)]
        x, y = self.sets["train"]
        order = self.epoch_order(x.shape[1], epoch)[rank::world]
        return [(x[:, idx], y[:, idx]) for idx in order.split(self.args.batch_size)]

    def solved(self, metrics: dict) -> bool:
        return bool(self.args.stop_accuracy) and schedules.copy_solved(metrics, self.args.stop_accuracy)

    def train_loss(self, model, batch, carry):
        x, y = (t.to(self.device) for t in batch)
        return F.cross_entropy(model(x).transpose(1, 2), y), None, y.shape[1]

    @torch.no_grad()
    def evaluate(self, model, split):
        """Mean over validation batches of the loss, the symbol accuracy and the sequence accuracy
        (all 10 symbols right); baseline_loss is the loss of a memoryless model that outputs blanks
        and then guesses the symbols uniformly (``synthetic.copy_baseline_loss``): a model that
        learned nothing sits there."""
        model.eval()
        if self.sets is not None and split == "valid":
            x, y = self.sets["valid"]
            batches = list(zip(x.split(self.args.batch_size, 1), y.split(self.args.batch_size, 1)))
        else:
            g = torch.Generator().manual_seed(10_000 + self.args.seed + (split == "test"))
            batches = [self._batch(g) for _ in range(self.args.valid_batches)]
        loss = accuracy = sequences = 0.0
        for x, y in batches:
            x, y = x.to(self.device), y.to(self.device)
            logits = model(x)
            loss += F.cross_entropy(logits.transpose(1, 2), y).item()
            accuracy += synthetic.copy_accuracy(logits, y)
            sequences += synthetic.copy_sequence_accuracy(logits, y)
        n = len(batches)
        return {"loss": loss / n, "accuracy": accuracy / n, "sequence_accuracy": sequences / n,
                "baseline_loss": synthetic.copy_baseline_loss(self.args.delay)}


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
    feeds the sample time as a second input. The defaults are the seed's model and data (110 units,
    Adam 1e-3, batch 32, 5,000 training and 500 validation sequences, Neil et al.'s sizes) for
    15 epochs instead of Neil et al.'s 70 (``--recipe seed002 --task freq`` runs 70). Measured on
    2 cores (one thread per run, seed 0), async without time input, validation accuracy after
    15 epochs (about 2.5 min): pLSTM 0.87, LSTM 0.58, chrono 0.64, majority class 0.52."""

    name = "freq"
    defaults = {"cell": "plstm", "nhid": "110", "batch_size": 32, "lr": 1e-3, "clip": 1.0, "epochs": 15,
                "resolution": 1.0, "freq_size": "5000,500"}
    model_keys = ("cell", "nhid", "asynchronous", "resolution", "time_input")

    def __init__(self, args, device):
        super().__init__(args, device)
        self.n_train, self.n_valid = (int(v) for v in str(args.freq_size).split(","))
        self.resolution = None if args.asynchronous else args.resolution

    def build_model(self):
        a = self.args
        t_max = float(sine_waves.longest(self.resolution)) if a.cell == "chrono" else None
        return models.FrequencyModel(a.cell, hidden_size=int(a.nhid), time_input=a.time_input, t_max=t_max,
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

    def __init__(self, args, device):
        super().__init__(args, device)
        splits = datasets.load_mnist(args.data) if args.data else datasets.load_small_digits()
        self.splits = splits.permuted(0) if args.permute else splits
        args.steps = self.splits.steps

    def build_model(self):
        a = self.args
        t_max = float(self.splits.steps) if a.cell == "chrono" else None
        return models.SequenceClassifier(a.cell, 1, int(a.nhid), 10, t_max=t_max,
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
