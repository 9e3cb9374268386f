"""tsrnn.lab.data.markov (Markov-PTB, seed 000 §3.1.1): the chain is the corpus's bigram counts, a seed
fixes the sample, a long sample's bigram frequencies reach the chain's probabilities, and the
files it writes are a corpus tsrnn reads."""
from collections import Counter

import pytest
import torch

from tsrnn.lab.data import default_corpus, load_text_corpus
from tsrnn.lab.data.markov import MarkovChain, _lines, fit_markov_chain, main, write_markov_corpus
from tsrnn.lab.data.text import line_tokens


def hand_transitions(ids):
    """P(j | i) from Python counts of the stream read as a loop (the last id followed by the first)."""
    pairs = Counter(zip(ids, ids[1:] + ids[:1]))
    rows = Counter(ids)
    return {(i, j): c / rows[i] for (i, j), c in pairs.items()}


def test_the_chain_is_the_hand_counted_bigrams():
    ids = [1, 2, 1, 0, 2, 1, 0]  # "a b a <eos> b a <eos>" with <eos> = 0
    chain = fit_markov_chain(torch.tensor(ids), 4)
    dense = chain.transition_matrix().to_dense()
    want = torch.zeros(4, 4, dtype=torch.float64)
    for (i, j), p in {(0, 1): 1 / 2, (0, 2): 1 / 2, (1, 0): 2 / 3, (1, 2): 1 / 3, (2, 1): 1.0}.items():
        want[i, j] = p
    torch.testing.assert_close(dense, want, rtol=0, atol=1e-15)
    assert chain.row_counts().tolist() == [2, 3, 2, 0] and chain.tokens == 7 and chain.start == 0
    assert chain.offsets.tolist() == [0, 2, 4, 5, 5]  # state 3 is never seen: an empty row
    with pytest.raises(ValueError, match="never occurs"):
        chain.sample(5, start=3)


def test_the_chain_of_a_real_corpus_matches_python_counts():
    train = default_corpus().train
    chain = MarkovChain.fit(train, int(train.max()) + 1)
    hand = hand_transitions(train.tolist())
    matrix = chain.transition_matrix()
    assert matrix.layout == torch.sparse_coo and chain.successors.numel() == len(hand)
    got = dict(zip(map(tuple, matrix.indices().T.tolist()), matrix.values().tolist()))
    assert got.keys() == hand.keys()
    assert max(abs(got[k] - hand[k]) for k in hand) < 1e-15
    torch.testing.assert_close(chain.row_counts(), torch.bincount(train, minlength=chain.num_states))


def test_a_seed_fixes_the_sample():
    chain = fit_markov_chain(default_corpus().train, 1099)
    first = chain.sample(2000, torch.Generator().manual_seed(3))
    assert torch.equal(first, chain.sample(2000, torch.Generator().manual_seed(3)))
    assert not torch.equal(first, chain.sample(2000, torch.Generator().manual_seed(4)))
    completed = chain.sample(2000, torch.Generator().manual_seed(3), until=1)  # <eos> is id 1
    assert torch.equal(completed[:2000], first) and completed[-1] == 1 and (completed[2000:-1] != 1).all()


def test_a_long_sample_has_the_chains_bigram_frequencies():
    ids = torch.randint(6, (400,), generator=torch.Generator().manual_seed(0))
    chain = fit_markov_chain(ids, 6)
    n = 200_000
    sample = chain.sample(n, torch.Generator().manual_seed(1), start=int(ids[-1]))
    walk = torch.cat([ids[-1:], sample])
    counts = torch.bincount(walk[:-1] * 6 + walk[1:], minlength=36).reshape(6, 6).double()
    empirical = counts / counts.sum(1, keepdim=True)
    # ~33K draws per row: the standard error of a frequency is below 0.003
    assert (empirical - chain.transition_matrix().to_dense()).abs().max() < 0.015
    unigram = torch.bincount(sample, minlength=6).double() / n  # the loop makes the corpus's unigrams stationary
    assert (unigram - torch.bincount(ids, minlength=6).double() / ids.numel()).abs().max() < 0.015


def test_lines_are_ptbs_layout():
    words = ["a", "b", "<eos>", "<eos>", "c", "<eos>"]
    assert _lines(words, "<eos>") == " a b \n\n c \n"
    assert line_tokens(_lines(words, "<eos>")) == words


def test_fit_rejects_bad_ids():
    with pytest.raises(ValueError, match=r"ids must hold ids in \[0, 3\)"):
        fit_markov_chain(torch.tensor([0, 3]), 3)
    with pytest.raises(TypeError, match="integer tensor"):
        fit_markov_chain(torch.tensor([0.0, 1.0]), 3)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The embedded corpus written as a PTB directory."""
    corpus = default_corpus()
    path = tmp_path_factory.mktemp("source")
    for split in ("train", "valid", "test"):
        lines = " ".join(corpus.vocab.decode(getattr(corpus, split))).split("<eos>")[:-1]
        (path / f"ptb.{split}.txt").write_text("".join(f"{line}\n" for line in lines))
    return path


def test_the_written_corpus_is_read_by_the_corpus_loader(source, tmp_path):
    info = write_markov_corpus(source, tmp_path / "a", seed=5)
    original, markov = load_text_corpus(source), load_text_corpus(tmp_path / "a")
    for split in ("train", "valid", "test"):
        ids = getattr(markov, split)
        assert info["tokens"][split] == ids.numel() == len(markov.vocab.decode(ids))
        assert getattr(original, split).numel() <= ids.numel() < getattr(original, split).numel() + 200
    chain = fit_markov_chain(original.train, len(original.vocab))
    words = markov.vocab.decode(markov.train)
    seen = set(zip(chain._rows().tolist(), chain.successors.tolist()))
    ids = original.vocab.encode(["<eos>"] + words)
    assert set(zip(ids[:-1].tolist(), ids[1:].tolist())) <= seen  # only bigrams the source shows
    assert (tmp_path / "a" / "markov.json").exists() and info["seed"] == 5 and info["fitted_on"] == "train"
    write_markov_corpus(source, tmp_path / "b", seed=5)
    write_markov_corpus(source, tmp_path / "c", seed=6)
    same = (tmp_path / "a" / "ptb.train.txt").read_bytes()
    assert same == (tmp_path / "b" / "ptb.train.txt").read_bytes() != (tmp_path / "c" / "ptb.train.txt").read_bytes()


def test_tokens_scales_the_splits(source, tmp_path):
    info = write_markov_corpus(source, tmp_path, seed=0, tokens=3000)
    assert 3000 <= info["tokens"]["train"] < 3200
    ratio = info["source_tokens"]["valid"] / info["source_tokens"]["train"]
    assert round(3000 * ratio) <= info["tokens"]["valid"] < round(3000 * ratio) + 200


def test_the_command_line(source, tmp_path, capsys):
    assert main([str(source), str(tmp_path), "--seed", "2", "--tokens", "500"]) == 0
    assert "wrote Markov-PTB" in capsys.readouterr().out
    assert main([str(source), str(tmp_path), "--tokens", "500"]) == 2
    err = capsys.readouterr().err
    assert "already holds ptb.train.txt" in err and len(err.strip().splitlines()) == 1
    assert main([str(source), str(tmp_path), "--tokens", "500", "--overwrite"]) == 0
    assert main([str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert "no corpus directory" in capsys.readouterr().err
    assert main([str(source), str(tmp_path / "x"), "--tokens", "0"]) == 2
    assert "tokens must be >= 1, got 0" in capsys.readouterr().err
