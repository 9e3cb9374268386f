"""The synthetic tasks (tsrnn.lab.data.dyck, tsrnn.lab.data.copy): Dyck-2 words against the
authors' string-rewriting sampler and an independent label oracle, splits, the whole-sequence
metric, and the copy tasks' layout, baseline loss and accuracy."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tsrnn.lab.data import copy as copy_data
from tsrnn.lab.data.copy import IGNORE_INDEX, copy_accuracy, copy_baseline_loss, copy_task, variable_copy_task
from tsrnn.lab.data.dyck import DYCK_PAD, dyck2, dyck_mse, dyck_targets, encode_dyck, sample_dyck, sequences_correct, whole_sequence_correct


@pytest.fixture(scope="module")
def data():
    return dyck2(300, 60, 150, seed=3)


# --------------------------------------------------------------------------------------------
# Dyck-2 words
# --------------------------------------------------------------------------------------------
def authors_dyck2(r, p=0.25, q=0.25, max_length=200, min_length=2):
    """The authors' create_dyckn.dyckn for two bracket types, fed from the draws ``r()``:
    leftmost rewriting of the string 'S'."""
    cum_p, total_p = (p, 2 * p), 2 * p
    seq, cp = "S", 0
    idx = seq.find("S")
    while idx >= 0:
        x = r()
        if x < total_p:
            cp += 2
            j = 0
            while j < 2 and x > cum_p[j]:
                j += 1
            seq = seq[:idx] + "(["[j] + "S" + ")]"[j] + seq[idx + 1:]
        elif x < total_p + q:
            seq = seq[:idx] + "SS" + seq[idx + 1:]
        else:
            seq = seq[:idx] + seq[idx + 1:]
        idx = seq.find("S")
        if cp > max_length:
            return ""
    return "" if cp < min_length else seq


def test_sampler_matches_the_authors_rewriting():
    """Same uniform draws in the same order give the same words (the grammar, the leftmost order,
    the bracket choice r <= p1, the length cut and the rejection of duplicates)."""
    stream = iter(np.random.default_rng(11).random(2_000_000).tolist())
    want = {}
    while len(want) < 400:
        word = authors_dyck2(lambda: next(stream))
        if word:
            want.setdefault(word, None)
    assert sample_dyck(400, seed=np.random.default_rng(11)) == list(want)


def reduce_pairs(prefix):
    """Independent oracle: delete adjacent matching pairs until none is left."""
    while "()" in prefix or "[]" in prefix:
        prefix = prefix.replace("()", "").replace("[]", "")
    return prefix


def test_words_are_complete_dyck2_words(data):
    for split in (data.train, data.valid, data.test):
        for word in split.words:
            assert 2 <= len(word) <= 200 and len(word) % 2 == 0
            assert set(word) <= set("()[]")
            assert reduce_pairs(word) == "", word


def test_labels_match_an_independent_oracle(data):
    split = data.valid
    for b, word in enumerate(split.words):
        n = len(word)
        for t in range(n):
            rest = reduce_pairs(word[: t + 1])       # unmatched opening brackets, innermost last
            want = (float(rest[-1:] == "("), float(rest[-1:] == "["))
            assert tuple(split.labels[t, b].tolist()) == want, (word, t)
        assert split.labels[n - 1, b].sum() == 0                 # complete word: stack empty
        assert torch.all(split.labels[n:, b] == 0)
        assert torch.all(split.tokens[n:, b] == DYCK_PAD)
        assert "".join("()[]"[i] for i in split.tokens[:n, b].tolist()) == word
        assert split.lengths[b] == n


def test_labels_and_timescales_by_hand():
    labels, ts = dyck_targets("([])[]")
    assert labels == [(1, 0), (0, 1), (1, 0), (0, 0), (0, 1), (0, 0)]
    assert ts == [0, 0, 2, 4, 0, 2]
    split = encode_dyck(["([])[]", "()"])
    assert split.tokens[:, 0].tolist() == [0, 2, 3, 1, 2, 3]
    assert split.tokens[:, 1].tolist() == [0, 1, DYCK_PAD, DYCK_PAD, DYCK_PAD, DYCK_PAD]
    assert split.max_timescale.tolist() == [4, 2]
    assert split.labels.shape == (6, 2, 2) and split.labels.dtype == torch.float32
    with pytest.raises(ValueError, match="Dyck-2"):
        dyck_targets("(]")
    with pytest.raises(ValueError, match="only"):
        dyck_targets("(x)")


def test_splits_disjoint_unique_deterministic(data):
    words = [set(s.words) for s in (data.train, data.valid, data.test)]
    assert [len(w) for w in words] == [300, 60, 150]
    assert [len(s) for s in (data.train, data.valid, data.test)] == [300, 60, 150]
    assert not (words[0] & words[1]) and not (words[0] & words[2]) and not (words[1] & words[2])
    again = dyck2(300, 60, 150, seed=3)
    assert again.test.words == data.test.words and torch.equal(again.train.tokens, data.train.tokens)
    assert dyck2(300, 60, 150, seed=4).test.words != data.test.words


def test_grammar_statistics():
    """p1 = p2: both bracket types open about equally often; the length cut holds."""
    words = sample_dyck(3000, seed=5)
    text = "".join(words)
    assert abs(text.count("(") / text.count("[") - 1) < 0.1
    assert max(len(w) for w in words) <= 200
    short = sample_dyck(20, max_length=8, seed=6)
    assert max(len(w) for w in short) <= 8 and len(set(short)) == 20
    with pytest.raises(ValueError, match="distinct"):
        sample_dyck(3, max_length=2, seed=0)               # only "()" and "[]" exist
    with pytest.raises(ValueError, match="p1"):
        sample_dyck(3, p=(0.5, 0.3), q=0.25)


def test_full_size_dataset_shape():
    """The seed's 10k/2k/5k split of words up to 200 symbols, generated in about a second."""
    full = dyck2()
    assert [len(full.train), len(full.valid), len(full.test)] == [10_000, 2_000, 5_000]
    assert full.train.tokens.shape[0] <= 200 and full.train.lengths.max() == full.train.tokens.shape[0]


# --------------------------------------------------------------------------------------------
# Dyck-2 metric and loss
# --------------------------------------------------------------------------------------------
def test_whole_sequence_correct_and_mse():
    split = encode_dyck(["([])", "[]", "(()[])"])
    labels, lengths = split.labels, split.lengths
    pred = labels * 0.8 + 0.1                                  # right on every step
    assert whole_sequence_correct(pred, labels, lengths) == 1.0
    wrong = pred.clone()
    wrong[1, 0, 0] = 0.9                                       # word 0, "([": ")" is not allowed
    assert whole_sequence_correct(wrong, labels, lengths) == pytest.approx(2 / 3)
    assert sequences_correct(wrong, labels, lengths).tolist() == [False, True, True]
    padded = pred.clone()
    padded[3:, 1] = 0.9                                        # garbage after word 1 ends
    assert whole_sequence_correct(padded, labels, lengths) == 1.0
    assert whole_sequence_correct(torch.full_like(pred, 0.5), labels, lengths) == 0.0   # strict >
    assert whole_sequence_correct(torch.full_like(pred, 0.5), labels, lengths, threshold=0.4) == 0.0
    # MSE over valid steps only: 0.1^2 everywhere valid, padding ignored.
    assert dyck_mse(padded, labels, lengths).item() == pytest.approx(0.01)
    with pytest.raises(ValueError, match="lengths"):
        whole_sequence_correct(pred, labels, torch.tensor([4, 2, 7]))
    with pytest.raises(ValueError, match="labels"):
        whole_sequence_correct(pred, labels[:, :2], lengths[:2])


# --------------------------------------------------------------------------------------------
# Copy tasks
# --------------------------------------------------------------------------------------------
def test_copy_task_layout():
    n, m, delay, batch = 10, 8, 30, 5
    x, y = copy_task(batch, delay, generator=torch.Generator().manual_seed(0))
    blank, signal = m, m + 1
    assert x.shape == y.shape == (delay + 2 * n, batch) and x.dtype == y.dtype == torch.int64
    symbols = x[:n]
    assert bool(((symbols >= 0) & (symbols < m)).all())
    assert torch.all(x[n:n + delay] == blank)
    assert torch.all(x[n + delay] == signal)
    assert torch.all(x[n + delay + 1:] == blank)
    assert torch.all(y[:n + delay] == blank)
    assert torch.equal(y[n + delay:], symbols)
    assert len(symbols.unique()) == m                          # all symbols get drawn
    again, _ = copy_task(batch, delay, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, x)


def test_variable_copy_task_layout():
    n, low, high, batch = 3, 2, 9, 64
    x, y = variable_copy_task(batch, (low, high), n_copy=n, n_symbols=4, generator=torch.Generator().manual_seed(1))
    signal_at = (x == 5).int().argmax(0)                       # first signal per column
    assert torch.all((x == 5).sum(0) == 1)
    delays = signal_at - n
    assert delays.min() >= low and delays.max() <= high and len(delays.unique()) > 4
    assert x.shape[0] == int(delays.max()) + 2 * n
    for b in range(batch):
        d = int(delays[b])
        assert torch.all(y[: n + d, b] == 4)
        assert torch.equal(y[n + d: d + 2 * n, b], x[:n, b])
        assert torch.all(y[d + 2 * n:, b] == IGNORE_INDEX)
        assert torch.all(x[n: n + d, b] == 4) and torch.all(x[n + d + 1:, b] == 4)


def memoryless_logits(y, n_symbols):
    """Blank with certainty before the reproduction, uniform over symbols during it."""
    steps, batch = y.shape
    logits = torch.full((steps, batch, n_symbols + 2), -1e4, dtype=torch.float64)
    reproducing = (y >= 0) & (y < n_symbols)
    logits[..., n_symbols] = torch.where(reproducing, -1e4, 0.0)
    logits[..., :n_symbols] = torch.where(reproducing, 0.0, -1e4)[..., None]
    return logits


def test_copy_baseline_loss():
    assert copy_baseline_loss(200) == pytest.approx(10 * math.log(8) / 220)
    assert copy_baseline_loss(1000, n_copy=5, n_symbols=4) == pytest.approx(5 * math.log(4) / 1010)
    x, y = copy_task(6, 17, n_copy=4, n_symbols=5)
    loss = F.cross_entropy(memoryless_logits(y, 5).reshape(-1, 7), y.reshape(-1))
    assert loss.item() == pytest.approx(copy_baseline_loss(17, n_copy=4, n_symbols=5), rel=1e-9)
    # Variable delays: the mean over non-ignored steps, as cross_entropy(ignore_index=-100) takes it.
    x, y = variable_copy_task(8, (3, 20), n_copy=4, n_symbols=5, generator=torch.Generator().manual_seed(2))
    delays = (x == 6).int().argmax(0) - 4
    loss = F.cross_entropy(memoryless_logits(y, 5).reshape(-1, 7), y.reshape(-1), ignore_index=IGNORE_INDEX)
    assert loss.item() == pytest.approx(copy_baseline_loss(delays, n_copy=4, n_symbols=5), rel=1e-9)
    assert copy_baseline_loss([5, 5]) == pytest.approx(copy_baseline_loss(5))


def test_copy_accuracy():
    x, y = copy_task(4, 6, n_copy=5, n_symbols=8, generator=torch.Generator().manual_seed(3))
    perfect = F.one_hot(y, 10).float()
    assert copy_accuracy(perfect, y) == 1.0
    wrong = perfect.clone()
    wrong[:6, :, 9] = 5.0                                      # blank steps wrong: not counted
    assert copy_accuracy(wrong, y) == 1.0
    wrong[6 + 5, 0] = F.one_hot(torch.tensor((int(y[11, 0]) + 1) % 8), 10).float()
    wrong[6 + 6, 2] = F.one_hot(torch.tensor(8), 10).float()   # predicts blank instead
    assert copy_accuracy(wrong, y) == pytest.approx(1 - 2 / 20)
    _, yv = variable_copy_task(3, (1, 6), n_copy=2, n_symbols=8, generator=torch.Generator().manual_seed(4))
    logits = F.one_hot(yv.clamp_min(0), 10).float()
    assert copy_accuracy(logits, yv) == 1.0                    # ignored steps (-100) not counted
    with pytest.raises(ValueError, match="reproduction"):
        copy_accuracy(perfect[:3], y[:3])


def test_copy_bad_arguments():
    with pytest.raises(ValueError, match="delay"):
        copy_task(2, -1)
    with pytest.raises(TypeError, match="generator"):
        copy_task(2, 3, generator=0)
    with pytest.raises(ValueError, match="delay_range"):
        variable_copy_task(2, (5, 3))
    with pytest.raises(ValueError, match="delay_range"):
        variable_copy_task(2, 5)
    assert copy_data.IGNORE_INDEX == -100
