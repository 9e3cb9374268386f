"""The seeds' variable-length models pass their sequences' lengths to the recurrence
(``lengths=``): padding changes nothing, whether a batch is padded to its longest row or to a
longer T; the batch's forward equals running each row alone; and the training tasks hand the
models their lengths (Dyck-2's chunks with the state carried, the variable copy task,
frequencies, IMDB). Float64 models, so the comparisons are tight; tiny sizes."""
import argparse

import pytest
import torch
import torch.nn.functional as F

from tsrnn.lab.data import copy, dyck
from tsrnn.lab.data.sine_waves import SineBatch, sine_waves
from tsrnn.lab.models import CopyModel, DyckModel, FrequencyModel, SentimentModel, SequenceClassifier
from tsrnn.lab.training.tasks import TASKS

TOL = {"atol": 1e-10, "rtol": 1e-10}
CLASSIFIER_CELLS = ["lstm", "chrono", "plstm"]


def t_max(cell, value=30.0):
    return value if cell == "chrono" else None


def lengths_seen(module):
    """The ``lengths=`` of every call of ``module`` (a recurrent layer), as a list filled in place."""
    seen = []
    module.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs.get("lengths")), with_kwargs=True)
    return seen


def pad_to(x, steps, fill):
    """x (T, B, ...) padded at the end to ``steps`` steps with ``fill`` (a tensor of x's trailing shape
    per step, broadcast, or a callable giving the padding)."""
    extra = steps - x.shape[0]
    pad = fill((extra, *x.shape[1:])) if callable(fill) else torch.full((extra, *x.shape[1:]), fill, dtype=x.dtype)
    return torch.cat([x, pad.to(x.dtype)])


# -- SequenceClassifier, FrequencyModel, SentimentModel ------------------------------------------

@pytest.mark.parametrize("cell", CLASSIFIER_CELLS)
def test_classifier_padding_changes_nothing_and_rows_run_alone(cell):
    torch.manual_seed(0)
    model = SequenceClassifier(cell, 3, 6, 4, t_max=t_max(cell)).double().eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([5, 1, 9, 3, 9])
    x = torch.randn(9, 5, 3, generator=g, dtype=torch.float64)
    dt = torch.rand(9, 5, generator=g, dtype=torch.float64) + 0.1 if cell == "plstm" else None
    seen = lengths_seen(model.rnn)
    logits = model(x, lengths, dt)
    assert seen[-1] is lengths
    noise = lambda shape: torch.randn(shape, generator=g, dtype=torch.float64)  # noqa: E731
    longer = model(pad_to(x, 14, noise), lengths, None if dt is None else pad_to(dt, 14, 2.5))
    torch.testing.assert_close(longer, logits, **TOL)
    for b, n in enumerate(lengths.tolist()):
        alone = model(x[:n, b:b + 1], None, None if dt is None else dt[:n, b:b + 1])
        torch.testing.assert_close(alone[0], logits[b], **TOL)
    # The reading is the state after the last real step: the old h[lengths - 1] reading.
    out, _ = model.rnn(x, dt=dt) if cell == "plstm" else model.rnn(x)
    torch.testing.assert_close(model.output(out[lengths - 1, torch.arange(5)]), logits, **TOL)


@pytest.mark.parametrize("cell", CLASSIFIER_CELLS)
def test_frequency_model_padding_changes_nothing_and_rows_run_alone(cell):
    torch.manual_seed(0)
    model = FrequencyModel(cell, hidden_size=8, time_input=True, t_max=t_max(cell, 125.0)).double().eval()
    b = sine_waves(6, generator=torch.Generator().manual_seed(3))
    logits = model(b)
    steps = b.x.shape[0] + 11
    longer = SineBatch(pad_to(b.x, steps, 0.7), pad_to(b.times, steps, 200.0), pad_to(b.dt, steps, 4.0),
                       b.lengths, b.labels)
    torch.testing.assert_close(model(longer), logits, **TOL)
    for k, n in enumerate(b.lengths.tolist()):
        row = SineBatch(*(t[:n, k:k + 1] for t in (b.x, b.times, b.dt)), b.lengths[k:k + 1], b.labels[k:k + 1])
        torch.testing.assert_close(model(row)[0], logits[k], **TOL)


@pytest.mark.parametrize("cell", CLASSIFIER_CELLS)
def test_sentiment_model_padding_changes_nothing_and_rows_run_alone(cell):
    torch.manual_seed(0)
    model = SentimentModel(cell, 6, vocab_size=20, embedding_size=4, t_max=t_max(cell, 400.0)).double().eval()
    g = torch.Generator().manual_seed(4)
    lengths = torch.tensor([3, 8, 1, 6])
    tokens = torch.randint(1, 20, (8, 4), generator=g) * (torch.arange(8)[:, None] < lengths)  # 0 is padding
    logits = model(tokens, lengths)
    torch.testing.assert_close(model(pad_to(tokens, 13, 0), lengths), logits, **TOL)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(model(tokens[:n, b:b + 1], lengths[b:b + 1])[0], logits[b], **TOL)


# -- DyckModel, CopyModel -------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["lstm", "mts"])
def test_dyck_model_padding_changes_nothing_and_rows_run_alone(cell):
    torch.manual_seed(0)
    model = DyckModel(cell, hidden_size=8).double().eval()
    split = dyck.encode_dyck(["([])", "[]", "(()[])[]", "()"])
    tokens, lengths = split.tokens, split.lengths
    probs, (h_n, c_n) = model(tokens, return_state=True, lengths=lengths)
    valid = torch.arange(tokens.shape[0])[:, None] < lengths
    longer, (h_l, c_l) = model(pad_to(tokens, 12, dyck.DYCK_PAD), return_state=True, lengths=lengths)
    torch.testing.assert_close(longer[:tokens.shape[0]], probs, **TOL)
    torch.testing.assert_close((h_l, c_l), (h_n, c_n), **TOL)
    for b, n in enumerate(lengths.tolist()):
        alone, (h, c) = model(tokens[:n, b:b + 1], return_state=True)
        torch.testing.assert_close(alone[:, 0], probs[:n, b], **TOL)
        torch.testing.assert_close((h[:, 0], c[:, 0]), (h_n[:, b], c_n[:, b]), **TOL)
    # Where the words run, the predictions are the padded batch's (the padding came after them).
    torch.testing.assert_close(model(tokens)[valid], probs[valid], **TOL)


@pytest.mark.parametrize("cell", ["lstm", "chrono", "plstm"])
def test_copy_model_padding_changes_nothing_and_rows_run_alone(cell):
    torch.manual_seed(0)
    model = CopyModel(cell, hidden_size=8, t_max=t_max(cell)).double().eval()
    x, y = copy.variable_copy_task(5, (2, 9), n_copy=3, generator=torch.Generator().manual_seed(5))
    lengths = copy.copy_lengths(y)
    assert torch.equal(lengths, (x.shape[0] - (y == copy.IGNORE_INDEX).sum(0)))
    seen = lengths_seen(model.rnn)
    logits = model(x, lengths)
    assert seen[-1] is lengths
    longer = model(pad_to(x, x.shape[0] + 7, 8), lengths)
    torch.testing.assert_close(longer[:x.shape[0]], logits, **TOL)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(model(x[:n, b:b + 1])[:, 0], logits[:n, b], **TOL)
    valid = y != copy.IGNORE_INDEX
    torch.testing.assert_close(F.cross_entropy(logits.transpose(1, 2), y),
                               F.cross_entropy(model(x).transpose(1, 2), y), **TOL)
    torch.testing.assert_close(model(x)[valid], logits[valid], **TOL)


def test_copy_lengths():
    x, y = copy.copy_task(3, 4, n_copy=2)
    assert copy.copy_lengths(y).tolist() == [8, 8, 8]
    with pytest.raises(TypeError, match="2-D integer"):
        copy.copy_lengths(y.double())


# -- the training tasks hand the models their lengths --------------------------------------------

def task(name, **values):
    keys = ("seed", "cell", "nhid", "backend", "optimizer", "weight_decay", "batch_size", "chunk", "dyck_size",
            "dyck_loss", "delay", "delay_min", "variable", "copy_size", "fixed_p", "asynchronous", "resolution",
            "time_input", "freq_size", "steps_per_epoch", "valid_batches", "data", "embeddings", "emsize",
            "dropout", "lr")
    return TASKS[name](argparse.Namespace(**{k: values.get(k) for k in keys}), torch.device("cpu"))


def test_dyck_chunks_run_each_word_in_them_and_carry_the_state():
    """With --chunk, chunk k gets lengths clamped to [0, chunk]: a word that ended keeps its state,
    and the chunks' predictions and final states are the whole batch's."""
    t = task("dyck", dyck_size="40,8,8", chunk=7, batch_size=8, nhid="8")
    model = t.build_model().double().eval()
    tokens, labels, lengths = t._batches("train", 0, 0, 1, shuffle=True)[0]
    chunks = t.train_batches(0, 0, 1)[:len(range(0, tokens.shape[0], 7))]
    seen = lengths_seen(model.rnn)
    whole, (h_n, c_n) = model(tokens, return_state=True, lengths=lengths)
    carry, preds = None, []
    for chunk in chunks:
        loss, carry, n = t.train_loss(model, chunk, carry)
        assert torch.equal(seen[-1], chunk[2].clamp(0, chunk[0].shape[0]))
        assert n == int((chunk[2] > 0).sum())
        preds.append(model(chunk[0], None if chunk[3] else state, return_state=True, lengths=seen[-1]))
        state = preds[-1][1]
        torch.testing.assert_close(carry, state, **TOL)
    valid = torch.arange(tokens.shape[0])[:, None] < lengths
    torch.testing.assert_close(torch.cat([p for p, _ in preds])[valid], whole[valid], **TOL)
    torch.testing.assert_close(carry, (h_n, c_n), **TOL)
    t.args.chunk = 0
    t.train_loss(model, (tokens, labels, lengths), None)
    assert torch.equal(seen[-1], lengths)
    t.evaluate(model, "valid")
    assert torch.equal(seen[-1], t._batches("valid")[-1][2])


def test_variable_copy_task_passes_each_columns_steps():
    t = task("copy", variable=True, delay=12, delay_min=3, batch_size=6, nhid="8", cell="lstm",
             steps_per_epoch=2, valid_batches=2)
    model = t.build_model()
    seen = lengths_seen(model.rnn)
    x, y = t.train_batches(0, 0, 1)[0]
    t.train_loss(model, (x, y), None)
    assert torch.equal(seen[-1], copy.copy_lengths(y)) and int(seen[-1].min()) < x.shape[0]
    t.evaluate(model, "valid")
    assert seen[-1] is not None
    t.args.variable = False  # the fixed task: every column runs every step
    t.train_loss(model, copy.copy_task(4, 5), None)
    assert seen[-1] is None


def test_frequency_task_passes_the_samples_lengths():
    t = task("freq", freq_size="16,8", batch_size=8, nhid="4", asynchronous=True)
    model = t.build_model()
    seen = lengths_seen(model.rnn)
    batch = t.train_batches(0, 0, 1)[0]
    t.train_loss(model, batch, None)
    assert torch.equal(seen[-1], batch.lengths)


def test_imdb_task_passes_the_reviews_lengths(tmp_path):
    from test_imdb import write_aclimdb

    t = task("imdb", data=str(write_aclimdb(tmp_path / "aclImdb")), batch_size=8, cell="lstm", emsize=4, dropout=0.0)
    model = t.build_model()
    seen = lengths_seen(model.rnn)
    tokens, lengths, labels = t.train_batches(0, 0, 1)[0]
    t.train_loss(model, (tokens, lengths, labels), None)
    assert torch.equal(seen[-1], lengths) and int(lengths.min()) < tokens.shape[0]
