"""The language-model tasks: AWD-LSTM (seed 000), the Averaging RNN-LM (seed 001) and the MLP LM
(seed 004), over word- or character-level corpora, scored per token."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tsrnn.lab import data as datasets
from tsrnn.lab import models
from tsrnn.lab.training import schedules
from tsrnn.lab.training.tasks.base import Task, register


def _unwrap(model):
    return getattr(model, "module", model)


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(T, B) cross-entropy of (T, B, V) logits against (T, B) targets, computed on the (T B, V)
    rows: at V >= 65 that is 1.5-10x faster on the CPU than ``F.cross_entropy`` over the
    class-in-dimension-1 transpose (whose softmax strides over V), e.g. 7 against 31 ms forward
    and backward at T = 128, B = 1, V = 13,161 (2-vCPU EPYC, one thread)."""
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return flat.view(targets.shape)


class TextTask(Task):
    """Word- or character-level corpora; the embedded default corpus when --data is not given."""

    unit = "tok"
    scoring = ""
    repr_keys = ("cell", "nhid", "bptt")
    validation_scoring: dict = {}

    def __init__(self, args, device, vocab_state=None):
        if getattr(args, "level", None) is None:  # --level's default (None, so that a recipe can set it)
            args.level = "word"
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

    def described(self) -> dict:
        return {"corpus": self.corpus.name, "vocab_size": len(self.vocab), **super().described()}

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
                "freeze": "gates", "batch_size": 20, "bptt": 35, "random_bptt": False, "bptt_std": 5.0, "lr": 3e-3,
                "clip": 0.25, "epochs": 20, "lstm_init": "sqrt"}
    model_keys = ("cell", "emsize", "nhid", "dropout", "dropouth", "dropouti", "dropoute", "wdrop", "alpha", "beta",
                  "mts_alpha", "freeze")

    def build_model(self):
        a = self.args
        return models.AWDLSTMLM(len(self.vocab), embedding_size=a.emsize,
                                hidden_sizes=tuple(int(h) for h in str(a.nhid).split(",")), cell=a.cell,
                                dropout=a.dropout, dropouth=a.dropouth, dropouti=a.dropouti,
                                dropoute=a.dropoute, wdrop=a.wdrop, alpha=a.alpha, beta=a.beta,
                                mts_alpha=a.mts_alpha, mts_freeze=a.freeze, lstm_init=a.lstm_init,
                                backend=a.backend)

    def load(self, args):
        """The corpus, checked when read: train fills --batch-size streams, valid the validation's, 2+ tokens each."""
        corpus = super().load(args)
        for split, streams in (("train", args.batch_size), ("valid", self.validation_scoring["batch_size"])):
            tokens = getattr(corpus, split).numel()
            if tokens < 2 * streams:
                raise ValueError(f"{args.data}: the {split} split holds {tokens} tokens (with <eos>), too few for "
                                 f"its {streams} streams of 2 tokens or more ({2 * streams})")
        return corpus

    def train_batches(self, epoch, rank, world):
        """BPTT windows of --bptt steps, or with --random-bptt of random lengths (``schedules.random_bptt_length``
        with --bptt-std: 5 AWD-LSTM's, 0 seed 000's stated 70 or 35), drawn from the seed, epoch and rank."""
        stream = datasets.batchify(datasets.shard(self.split("train"), rank, world), self.args.batch_size)
        if not self.args.random_bptt:
            return list(datasets.bptt_batches(stream, self.args.bptt))
        g = self.epoch_generator(epoch, rank)
        batches, i = [], 0
        while i < stream.shape[0] - 2:  # AWD-LSTM: while i < len(train_data) - 1 - 1
            length = min(schedules.random_bptt_length(self.args.bptt, g, self.args.bptt_std), stream.shape[0] - 1 - i)
            batches.append((stream[i:i + length], stream[i + 1:i + 1 + length]))
            i += length
        return batches

    def lr_scale(self, batch) -> float:
        return batch[0].shape[0] / self.args.bptt if self.args.random_bptt else 1.0

    def train_loss(self, model, batch, carry):
        x, y = (t.to(self.device) for t in batch)
        logits, carry, extras = model(x, carry)
        loss = token_losses(logits, y).mean()
        return loss + _unwrap(model).regularization(extras), carry, y.numel()

    @torch.no_grad()
    def token_nll(self, model, split, batch_size=1, tokens=None):
        """Per-token negative log-likelihood and target of a split, read as ``batch_size`` streams
        (1: every token after the first is a target, as seed 000 scores its test set); only its
        first ``tokens`` tokens if given."""
        model.eval()
        stream = datasets.batchify(self.split(split)[:tokens], batch_size)
        carry, nll, targets = None, [], []
        for x, y in datasets.bptt_batches(stream, self.args.bptt):
            logits, carry, _ = model(x.to(self.device), carry)
            nll.append(token_losses(logits, y.to(self.device)).cpu())
            targets.append(y)
        return torch.cat(nll).T.reshape(-1), torch.cat(targets).T.reshape(-1)  # stream after stream


class MaskedTextTask(TextTask):
    """Text tasks whose batches are (x, y, reset, mask): a masked mean of the token losses."""

    scoring = " scored in the training batches' layout, each counted target once"

    def _batches(self, split, epoch=0, rank=0, world=1):
        raise NotImplementedError

    def train_batches(self, epoch, rank, world):
        return self._batches("train", epoch, rank, world)

    def _forward(self, model, x, reset, state):
        """A window's logits and the state its streams' next window starts from (None: every
        window starts afresh)."""
        return model(x, reset=reset), None

    def _nll(self, model, batch, state=None):
        """(T, B) token losses, the (T, B) mask of the targets that count, and the state after the
        window (``_forward``), from ``state``, the state after the previous window."""
        x, y, reset, mask = (None if t is None else t.to(self.device) for t in batch)
        logits, state = self._forward(model, x, reset, state)
        return token_losses(logits, y), mask, state

    def train_loss(self, model, batch, carry):
        """The window's loss (``normalized_loss`` by --loss-norm); the state goes on as the trainer's carry."""
        nll, mask, carry = self._nll(model, batch, carry)
        return normalized_loss(nll, mask, self.args.loss_norm), carry, int(mask.sum())

    @torch.no_grad()
    def token_nll(self, model, split):
        """Per-token negative log-likelihood and target of the counted targets, window after window
        (the state carried from each to the next), column by column."""
        model.eval()
        state, nll, targets = None, [], []
        for batch in self._batches(split):
            values, mask, state = self._nll(model, batch, state)
            keep = mask.T.cpu()
            nll.append(values.T.cpu()[keep])
            targets.append(batch[1].T[keep])
        return torch.cat(nll), torch.cat(targets)


@register
class AveragingLanguageModelTask(MaskedTextTask):
    """LSTM LM reading the running mean of its past states (seed 001), one sentence per column.

    --loss-norm sequence (``normalized_loss``) sums each sentence's loss and averages over the batch:
    seed 001's gradient "normalized by the mini-batch size", at its lr 1 and clip 5.

    Two ablations of seed 001's memory, each recorded in the config when set (a run without them
    keeps the config, and so the checkpoints, of before they existed):

    --no-h0 leaves the initial state h_0 = 0 out of the average (§3 footnote 3, §6.3: counting it
    "improves the performance"): m_t = (1/(t-1)) Σ_{i=1}^{t-1} h_i, m_1 = 0 (``averaging_context``'s
    count_h0).

    --memory-span stream lets the memory span sentences (§6: "permitted the memory buffer to hold
    longer sequences before being reset and the performance ... dipped"). A sentence per column
    cannot hold a longer memory, so the split is read as the lm task reads it: --batch-size
    contiguous streams (``batchify``) in consecutive windows of --bptt steps, the LSTM state and the
    memory (its running sum and count) carried from a window to the next (the trainer's carry,
    detached between windows; cleared at each epoch) and restarted only at each stream's start.
    tsrnn's PTB and WikiText-2 splits are one token stream each (no document marks), so the stream
    is the memory's only boundary. Every token of a stream but its first is a target (the sentence
    layout's truncation to --bptt words does not apply), and --order does not apply (the windows
    come in stream order).
    """

    name = "averaging-lm"
    cells = ("lstm",)
    defaults = {"cell": "lstm", "emsize": 64, "nhid": "128", "nlayers": 2, "dropout": 0.2,
                "batch_size": 32, "bptt": 35, "order": "shuffled", "lr": 3e-3, "clip": 0.25, "epochs": 6,
                "memory": True, "loss_norm": "token", "count_h0": True, "memory_span": "sentence"}
    model_keys = ("emsize", "nhid", "nlayers", "dropout", "memory")

    def config(self) -> dict:
        """The model keys, and ``count_h0`` / ``memory_span`` when not the default (the first changes
        the model, the second how it reads the text)."""
        extra = {} if self.args.count_h0 else {"count_h0": False}
        if self.args.memory_span != "sentence":
            extra["memory_span"] = self.args.memory_span
        return {**super().config(), **extra}

    def build_model(self):
        a = self.args
        return models.AveragingLM(len(self.vocab), embedding_size=a.emsize, hidden_size=int(a.nhid),
                                  num_layers=a.nlayers, dropout=a.dropout, memory=a.memory, count_h0=a.count_h0,
                                  backend=a.backend)

    def _batches(self, split, epoch=0, rank=0, world=1):
        """One sentence per column, padded to --bptt (35); for training in corpus order (seed 001:
        "taken from the dataset in sequence", --order corpus) or shuffled per epoch. --memory-span
        stream: --bptt windows of --batch-size streams, every target counted."""
        ids = datasets.shard(self.split(split), rank, world)
        if self.args.memory_span == "stream":
            windows = datasets.bptt_batches(datasets.batchify(ids, self.args.batch_size), self.args.bptt)
            return [(x, y, None, torch.ones_like(y, dtype=torch.bool)) for x, y in windows]
        shuffle = split == "train" and self.args.order == "shuffled"
        batches = datasets.sentence_batches(ids, self.vocab.eos_id, self.args.batch_size, length=self.args.bptt,
                                            shuffle=shuffle, generator=self.epoch_generator(epoch))
        return [(x, y, None, mask) for x, y, mask in batches]

    def _forward(self, model, x, reset, state):
        """--memory-span stream: the LSTM state and the memory go on from a window to the stream's next."""
        if self.args.memory_span == "sentence":
            return super()._forward(model, x, reset, state)
        return model(x, reset=reset, state=state, return_state=True)


def normalized_loss(nll: torch.Tensor, mask: torch.Tensor, norm: str) -> torch.Tensor:
    """The training loss of (T, B) token losses ``nll`` over the targets ``mask`` counts:

        token:    sum_{t,b} mask nll / sum_{t,b} mask     (the mean over the batch's targets)
        sequence: (1 / B) sum_b sum_t mask[t, b] nll[t, b]  (each column's sum, averaged over the B columns)

    With "sequence" a gradient step at rate lr moves the weights as one step of lr per target of a
    column would, to first order: SGD per word (Bengio et al. 2003) or per sentence (seed 001) at the
    paper's rate. Validation and test are per token either way; the train loss lines are then nats
    per column."""
    total = (nll * mask).sum()
    return total / mask.sum().clamp(min=1) if norm == "token" else total / mask.shape[1]


def ahead_targets(batches, ahead: int) -> list:
    """Seed 004's Experiment 2, "trained to predict what word would occur some number of words into
    the future": ``document_batches`` windows (x, y, reset, mask) with the target of step t moved from
    the next word to the word K = ``ahead`` steps on, in the same document:

        y_t = x_{t+K},   counted (mask) iff x_t, ..., x_{t+K} lie in one document,
                         i.e. mask^1_t and mask^1_{t+K-1} and no document starts in t+1 .. t+K-1

    (mask^1, the next-word mask, is true on a document's words but its last), so a document of L words
    has max(0, L - K) targets. x, reset and the window sizes are unchanged, so the context of step t
    still holds words <= t only; a target may lie in a later window. K = 1 returns ``batches`` itself."""
    if ahead == 1:
        return batches
    x, _, reset, mask = (torch.cat([b[i] for b in batches]) for i in range(4))
    steps, last = x.shape[0], ahead - 1
    counted = torch.zeros_like(mask)
    if last < steps:
        document = reset.long().cumsum(0)
        counted[: steps - last] = mask[: steps - last] & mask[last:] & (document[: steps - last] == document[last:])
    shifted = torch.cat([x[ahead:], x.new_zeros((min(ahead, steps),) + x.shape[1:])])
    y = torch.where(counted, shifted, torch.zeros_like(x))
    sizes = [b[0].shape[0] for b in batches]
    return list(zip(*(t.split(sizes) for t in (x, y, reset, counted))))


@register
class MLPLanguageModelTask(MaskedTextTask):
    """Bengio MLP LM over a Buffer / TILT / TILT-Buffer context (seed 004), documents kept.

    --ahead K predicts the word K steps on (Experiment 2, ``ahead_targets``); --drop-taus removes
    τ* slots of the TILT context (Experiment 4, ``tsrnn.memory.contexts.TILTContext``'s drop). Both change
    the model the checkpoint holds, so its config records them when set (K > 1, a non-empty list);
    --rare-words drop (the corpus's ``without_unknown``) changes the text it learns from, and the
    config records it too.

    The --bptt windows of a split are consecutive in each of its streams, and the context's state is
    carried across them (``MLPLM``'s state): training (the trainer's carry, detached between windows,
    cleared at each epoch) and scoring see the context of the whole document, as the seed's TILT
    integrates over the document's whole past; the reset at each document start clears it. Checkpoints
    and results made before this carry scored (and trained) each window from an empty context.
    """

    name = "mlp-lm"
    cells = ()
    defaults = {"cell": None, "context": "tilt", "n": 5, "emsize": 30, "nhid": "100", "batch_size": 32,
                "bptt": 128, "lr": 3e-3, "clip": 1.0, "epochs": 4, "vocab_from": "train", "ahead": 1,
                "loss_norm": "token", "rare_words": "unk"}
    model_keys = ("context", "n", "emsize", "nhid", "vocab_from")
    repr_keys = ("context", "n", "nhid", "bptt")

    def config(self) -> dict:
        """The model keys, and ``ahead`` / ``drop_taus`` / ``rare_words`` when set (the first two change
        the model, the third the text it learns from): a run without them keeps the config (and so the
        checkpoints) of before they existed."""
        extra = {"ahead": self.args.ahead} if self.args.ahead != 1 else {}
        if getattr(self.args, "drop_taus", None):
            extra["drop_taus"] = self.args.drop_taus
        if self.args.rare_words == "drop":
            extra["rare_words"] = "drop"
        return {**super().config(), **extra}

    @property
    def dropped_taus(self) -> tuple:
        """--drop-taus as a tuple of slot indices (empty when not given)."""
        value = getattr(self.args, "drop_taus", None)
        return tuple(int(i) for i in value.split(",")) if value else ()

    def load(self, args):
        """Brown's documents, or a text corpus cut into equal "documents" (4 per batch column); with
        --rare-words drop, their ``<unk>`` tokens removed (``DocumentCorpus.without_unknown``, which
        leaves out a document it empties)."""
        if datasets.is_brown_path(args.data):
            corpus = datasets.load_brown(args.data, vocab_from=args.vocab_from)
        else:
            text = super().load(args)
            splits = (getattr(text, split) for split in ("train", "valid", "test"))
            corpus = datasets.DocumentCorpus(text.name, text.vocab, *(list(torch.tensor_split(
                ids, max(1, min(4 * args.batch_size, len(ids) // args.bptt)))) for ids in splits))
        return corpus.without_unknown() if args.rare_words == "drop" else corpus

    def build_model(self):
        a = self.args
        drop = {"context_kwargs": {"drop": self.dropped_taus}} if self.dropped_taus else {}
        return models.MLPLM(len(self.vocab), embedding_size=a.emsize, hidden_size=int(a.nhid),
                            context=a.context, n=a.n, **drop)

    def _batches(self, split, epoch=0, rank=0, world=1):
        docs = datasets.shard(self.split(split), rank, world)
        batches = ahead_targets(list(datasets.document_batches(docs, self.args.batch_size, self.args.bptt)),
                                self.args.ahead)
        if self.args.ahead > 1 and not any(batch[3].any() for batch in batches):
            raise ValueError(f"--ahead {self.args.ahead} leaves the {split} split no target: its documents are "
                             f"shorter than {self.args.ahead + 1} words")
        return batches

    def _forward(self, model, x, reset, state):
        """The context's state is carried from a window to the stream's next (``MLPLM``'s state)."""
        return model(x, reset=reset, state=state, return_state=True)

    def evaluate(self, model, split):
        """Loss and perplexity, and two unigram baselines of the training counts c_w over the same
        targets (with --ahead K, the words K steps on):

            unigram_ppl       add-one: p(w) = (c_w + 1) / sum_v (c_v + 1), every target scored
            unigram_seen_ppl  seed 004's "occurrences of that word divided by the number of words in
                              the training set", p(w) = c_w / sum_v c_v, over the targets with c_w > 0
                              (infinite on the others: with --vocab-from all, kept words may be absent
                              from train); unseen_targets is the fraction it leaves out
        """
        nll, targets = self.token_nll(model, split)
        counts = self.vocab.counts.double()
        target_counts = counts[targets]
        unigram = -((target_counts + 1) / (counts + 1).sum()).log().mean().item()
        seen = target_counts > 0
        unigram_seen = -(target_counts[seen] / counts.sum()).log().mean().item() if seen.any() else math.inf
        return {**self.loss_metrics(nll.double().mean().item()), "unigram_ppl": math.exp(unigram),
                "unigram_seen_ppl": math.exp(unigram_seen), "unseen_targets": 1 - seen.double().mean().item()}
