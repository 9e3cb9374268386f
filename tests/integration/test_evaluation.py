"""tsrnn eval's statistics against hand computations and a literal transcription of seed 000's
evaluation script (blocks, draws, bins, intervals)."""
from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tsrnn.lab.data import Vocabulary, load_text_corpus
from tsrnn.lab.training import evaluation

PTB = os.path.join(os.environ.get("TSRNN_DATA", "/work/shared/data"), "ptb")


def corpus(train, valid, test, vocab_size):
    vocab = Vocabulary([f"w{i}" for i in range(vocab_size)], [0] * vocab_size)
    return SimpleNamespace(vocab=vocab, train=torch.tensor(train), valid=torch.tensor(valid), test=torch.tensor(test))


def test_word_counts_cover_all_splits_or_train_only():
    c = corpus([0, 0, 1], [1, 2], [2, 2, 3], vocab_size=5)
    assert evaluation.word_counts(c).tolist() == [2, 2, 3, 1, 0]
    assert evaluation.word_counts(c, "train").tolist() == [2, 1, 0, 0, 0]
    docs = SimpleNamespace(vocab=c.vocab, train=[torch.tensor([0, 1]), torch.tensor([1])], valid=[torch.tensor([4])],
                           test=[torch.tensor([3])])
    assert evaluation.word_counts(docs).tolist() == [1, 2, 0, 1, 1]
    with pytest.raises(ValueError, match="counts must be one of"):
        evaluation.word_counts(c, "valid")


def test_bins_at_the_authors_edges():
    counts = torch.tensor([99, 100, 999, 1_000, 9_999, 10_000, 0, 250_000])
    bins = evaluation.target_bins(torch.arange(8), counts)
    assert [evaluation.BINS[i] for i in bins] == ["<100", "100-1K", "100-1K", "1K-10K", "1K-10K", ">=10K", "<100",
                                                   ">=10K"]


@pytest.mark.parametrize("n, expected", [(1_000, 9), (1_029, 10), (1_100, 10), (101, 1), (82_429, 824)])
def test_bootstrap_blocks_drop_the_last_start(n, expected):
    starts = evaluation.bootstrap_starts(n, 100)
    assert starts.tolist() == list(range(0, n, 100))[:-1]
    assert len(starts) == expected


def test_too_few_targets_for_a_block_is_a_clear_error():
    with pytest.raises(ValueError, match="need more than 100"):
        evaluation.bootstrap_starts(100, 100)


def test_authors_interval_is_sorted_4_and_9995_of_10001():
    values = torch.randperm(10_001, generator=torch.Generator().manual_seed(0)).double()
    assert evaluation.authors_interval(values) == (4.0, 9995.0)
    assert evaluation.authors_interval(torch.tensor([3.0, float("nan"), 1.0, 2.0])) == (1.0, 2.0)


def test_point_perplexities_count_every_target():
    # 250 targets: the blocks cover the first 200, the point estimates all 250
    g = torch.Generator().manual_seed(1)
    nll = torch.rand(250, generator=g, dtype=torch.float64) * 5
    targets = torch.randint(4, (250,), generator=g)
    counts = torch.tensor([20_000, 5_000, 100, 7])  # one word per bin, most frequent first
    rows = evaluation.perplexity_table(nll, targets, counts, resamples=0)
    assert [r["bin"] for r in rows] == ["all", *evaluation.BINS]
    assert rows[0]["tokens"] == 250 and rows[0]["ppl"] == pytest.approx(math.exp(nll.mean().item()))
    for i, row in enumerate(rows[1:]):
        assert row["tokens"] == int((targets == i).sum())
        assert row["ppl"] == pytest.approx(math.exp(nll[targets == i].mean().item()))
    # no resample: the identity draw alone, over the 200 targets of the two blocks
    assert rows[0]["mean"] == pytest.approx(math.exp(nll[:200].mean().item()))
    assert rows[0]["low"] == rows[0]["high"] == pytest.approx(rows[0]["mean"])


def test_bin_perplexities_are_the_tables_point_estimates_and_nan_for_an_empty_bin():
    g = torch.Generator().manual_seed(2)
    nll = torch.rand(300, generator=g, dtype=torch.float64) * 4
    targets = torch.randint(3, (300,), generator=g)  # no target in the <100 bin
    counts = torch.tensor([20_000, 5_000, 100, 7])
    ppl = evaluation.bin_perplexities(nll, targets, counts)
    rows = evaluation.perplexity_table(nll, targets, counts, resamples=0)
    assert list(ppl) == [r["bin"] for r in rows]
    assert [ppl[r["bin"]] for r in rows[:-1]] == pytest.approx([r["ppl"] for r in rows[:-1]])
    assert ppl[">=10K"] == pytest.approx(math.exp(nll[targets == 0].mean().item()))
    assert math.isnan(ppl["<100"])


def literal_draw_perplexities(nll, bins, starts, picks):
    """seed 000's statistics_significance, per draw: the drawn blocks' targets, then per bin."""
    out = []
    for row in picks.tolist():
        tokens = [k for s in row for k in range(starts[s], starts[s] + 100)]
        values = [math.exp(sum(nll[k] for k in tokens) / len(tokens))]
        for b in range(len(evaluation.BINS)):
            in_bin = [nll[k] for k in tokens if bins[k] == b]
            values.append(math.exp(sum(in_bin) / len(in_bin)) if in_bin else math.nan)
        out.append(values)
    return torch.tensor(out, dtype=torch.float64)


def test_draws_match_a_literal_transcription_of_the_authors_loop():
    g = torch.Generator().manual_seed(2)
    n = 700  # a multiple of 100: 6 blocks, the last full block left out as the authors do
    nll = (torch.rand(n, generator=g, dtype=torch.float64) * 6).tolist()
    targets = torch.randint(4, (n,), generator=g)
    counts = torch.tensor([12_000, 1_000, 999, 99])
    bins = evaluation.target_bins(targets, counts).tolist()
    starts = evaluation.bootstrap_starts(n)
    assert starts.tolist() == [0, 100, 200, 300, 400, 500]
    picks = torch.cat([torch.randint(len(starts), (40, len(starts)), generator=g), torch.arange(len(starts))[None]])
    index = starts[:, None] + torch.arange(100)
    groups = evaluation.target_bins(targets, counts)
    ones = torch.ones(n, dtype=torch.float64)
    ours = evaluation._draw_perplexities(evaluation._group_sums(torch.tensor(nll, dtype=torch.float64)[index], groups[index]),
                                         evaluation._group_sums(ones[index], groups[index]), picks)
    torch.testing.assert_close(ours, literal_draw_perplexities(nll, bins, starts.tolist(), picks), equal_nan=True)


def test_paired_difference_is_baseline_minus_model_on_the_same_draws():
    g = torch.Generator().manual_seed(3)
    nll = torch.rand(1_234, generator=g, dtype=torch.float64) * 4
    targets = torch.randint(3, (1_234,), generator=g)
    counts = torch.tensor([50_000, 2_000, 10])
    rows = evaluation.perplexity_table(nll, targets, counts, baseline_nll=nll + 0.1, resamples=300, seed=4)
    for row in rows:
        if row["tokens"] == 0:
            continue
        assert row["diff"] == pytest.approx(row["baseline_ppl"] - row["ppl"])
        assert row["baseline_ppl"] == pytest.approx(row["ppl"] * math.exp(0.1))
        assert row["diff_low"] <= row["diff"] <= row["diff_high"]
        assert row["diff_low"] <= row["diff_low95"] <= row["diff_high95"] <= row["diff_high"]
        assert row["diff_low"] > 0  # every draw: the baseline is worse on every token
    same = evaluation.perplexity_table(nll, targets, counts, baseline_nll=nll + 0.1, resamples=300, seed=4)
    assert str(same) == str(rows)  # seeded draws: a run is repeatable (str: NaN == NaN)
    empty = [r for r in rows if r["bin"] == "100-1K"]
    assert empty[0]["tokens"] == 0 and "no target word" in evaluation.format_table(rows)


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="nll has 3 values but targets 4"):
        evaluation.perplexity_table(torch.zeros(3), torch.zeros(4, dtype=torch.long), torch.ones(1, dtype=torch.long))


@pytest.mark.skipif(not os.path.isdir(PTB), reason=f"{PTB} not on disk (set TSRNN_DATA to the corpora)")
def test_ptb_test_targets_per_bin_are_the_authors():
    c = load_text_corpus(PTB)
    targets = c.test[1:]
    rows = evaluation.perplexity_table(torch.zeros(targets.numel()), targets, evaluation.word_counts(c),
                                       resamples=10)
    assert {r["bin"]: r["tokens"] for r in rows} == {"all": 82_429, ">=10K": 27_361, "1K-10K": 18_744,
                                                     "100-1K": 22_311, "<100": 14_013}
    train_only = evaluation.perplexity_table(torch.zeros(targets.numel()), targets, evaluation.word_counts(c, "train"),
                                             resamples=10)
    assert train_only[1]["tokens"] == 24_844  # training counts alone move targets between bins


@pytest.mark.parametrize("shape", [(1, 1, 3), (7, 1, 65), (5, 3, 101)])
def test_token_losses_equal_cross_entropy_over_the_class_dimension(shape):
    """token_losses (the flat rows) against F.cross_entropy with the classes in dimension 1, in
    float64, forward and backward, on transposed (non-contiguous) logits and targets."""
    from tsrnn.lab.training.tasks import language

    T, B, V = shape
    g = torch.Generator().manual_seed(T * B * V)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64).transpose(0, 1).requires_grad_()
    targets = torch.randint(V, (B, T), generator=g).T
    weights = torch.randn(T, B, generator=g, dtype=torch.float64)
    ours = language.token_losses(logits, targets)
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), logits)
    theirs = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    (grad_theirs,) = torch.autograd.grad((theirs * weights).sum(), logits)
    assert ours.shape == (T, B)
    torch.testing.assert_close(ours, theirs, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-13, atol=1e-13)
