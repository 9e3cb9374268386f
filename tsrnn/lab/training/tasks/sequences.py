"""The synthetic sequence tasks: Dyck-2 bracket prediction (seed 000) and the copy tasks (seed 002)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tsrnn.lab import models
from tsrnn.lab.data import copy, dyck
from tsrnn.lab.training import schedules
from tsrnn.lab.training.tasks.base import Task, register


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
    repr_keys = ("cell", "nhid", "dyck_size")

    def __init__(self, args, device):
        super().__init__(args, device)
        n_train, n_valid, n_test = (int(v) for v in str(args.dyck_size).split(","))
        self.data = dyck.dyck2(n_train, n_valid, n_test, seed=args.seed)

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
        """Shuffled batches of whole sequences, each (tokens, labels, lengths); with --chunk C, each
        batch cut into consecutive chunks of C steps trained one optimizer step each with the
        state carried (the authors' stateful training, seq_length 200), each chunk with the
        lengths left from its first step (lengths - s, <= 0 for a word that has ended) and whether
        it is its batch's first. The model runs each word's own steps only (``train_loss``)."""
        batches = self._batches("train", epoch, rank, world, shuffle=True)
        if not self.args.chunk:
            return batches
        return [(tokens[s:s + self.args.chunk], labels[s:s + self.args.chunk], lengths - s, s == 0)
                for tokens, labels, lengths in batches for s in range(0, tokens.shape[0], self.args.chunk)]

    def train_loss(self, model, batch, carry):
        tokens, labels, lengths = (t.to(self.device) for t in batch[:3])
        if len(batch) == 3:
            pred = model(tokens, lengths=lengths)
            return dyck.dyck_mse(pred, labels, lengths, self.args.dyck_loss), None, len(lengths)
        # A chunk runs each word's steps in it: a word that ended in an earlier chunk runs none and
        # keeps its state (the batch's state restarts at its first chunk).
        lengths = lengths.clamp(0, tokens.shape[0])
        pred, carry = model(tokens, None if batch[3] else carry, return_state=True, lengths=lengths)
        active = lengths > 0  # sequences that have not ended before this chunk
        loss = dyck.dyck_mse(pred[:, active], labels[:, active], lengths[active], self.args.dyck_loss)
        return loss, carry, int(active.sum())

    @torch.no_grad()
    def evaluate(self, model, split):
        model.eval()
        loss = correct = count = 0.0
        for tokens, labels, lengths in self._batches(split):
            tokens, labels, lengths = tokens.to(self.device), labels.to(self.device), lengths.to(self.device)
            pred = model(tokens, lengths=lengths)
            n = len(lengths)
            loss += dyck.dyck_mse(pred, labels, lengths).item() * n
            correct += dyck.whole_sequence_correct(pred, labels, lengths) * n
            count += n
        return {"loss": loss / count, "accuracy": correct / count}

    @torch.no_grad()
    def sequences_correct(self, model, split) -> torch.Tensor:
        """(N,) bool: whether each word of the split, in its order, has every output right (the
        words of ``self.data.<split>``, whose ``max_timescale`` is seed 000 Fig 2's x-axis)."""
        model.eval()
        correct = []
        for tokens, labels, lengths in self._batches(split):
            lengths = lengths.to(self.device)
            pred = model(tokens.to(self.device), lengths=lengths)
            correct.append(dyck.sequences_correct(pred, labels.to(self.device), lengths).cpu())
        return torch.cat(correct)


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
    repr_keys = ("cell", "nhid", "delay")

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
            return copy.variable_copy_task(count, (a.delay_min or max(1, a.delay // 2), a.delay),
                                           generator=generator)
        return copy.copy_task(count, a.delay, generator=generator)

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

    def _lengths(self, y):
        """The variable task's columns' own steps (``copy.copy_lengths``), which the model runs
        alone; None for the fixed task, whose columns have every step."""
        return copy.copy_lengths(y) if self.args.variable else None

    def train_loss(self, model, batch, carry):
        x, y = (t.to(self.device) for t in batch)
        return F.cross_entropy(model(x, self._lengths(y)).transpose(1, 2), y), None, y.shape[1]

    @torch.no_grad()
    def evaluate(self, model, split):
        """Mean over validation batches of the loss, the symbol accuracy and the sequence accuracy
        (all 10 symbols right); baseline_loss is the loss of a memoryless model that outputs blanks
        and then guesses the symbols uniformly (``copy.copy_baseline_loss``): a model that
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
            logits = model(x, self._lengths(y))
            loss += F.cross_entropy(logits.transpose(1, 2), y).item()
            accuracy += copy.copy_accuracy(logits, y)
            sequences += copy.copy_sequence_accuracy(logits, y)
        n = len(batches)
        return {"loss": loss / n, "accuracy": accuracy / n, "sequence_accuracy": sequences / n,
                "baseline_loss": copy.copy_baseline_loss(self.args.delay)}
