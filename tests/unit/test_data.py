"""tsrnn.lab.data: vocabulary, corpus loaders (fixtures and, when present, the real corpora of
/work/shared/data checked against its README's counts), the embedded corpus, and batching."""
import hashlib
import json
import os
import zipfile
from importlib import resources

import pytest
import torch

from tsrnn.lab.data import (DocumentCorpus, TextCorpus, Vocabulary, batchify, bptt_batches, default_corpus,
                        document_batches, frequency_bins, load_brown, load_text_corpus, num_bptt_batches,
                        sentence_batches, shard)

DATA = os.environ.get("TSRNN_DATA", "/work/shared/data")
PTB = os.path.join(DATA, "ptb")
WT2 = os.path.join(DATA, "wikitext-2")
BROWN = os.path.join(DATA, "brown", "brown.zip")
SHAKESPEARE = os.path.join(DATA, "tinyshakespeare", "input.txt")


def _needs(path):
    return pytest.mark.skipif(not os.path.exists(path), reason=f"{path} not on disk (set TSRNN_DATA to the corpora)")


def _write(directory, files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return directory


# ---------------------------------------------------------------------------------- Vocabulary

def test_build_puts_specials_first_then_words_by_count_ties_by_first_appearance():
    v = Vocabulary.build("b a b d <eos> b a c <eos>".split())
    assert v.itos == ["<unk>", "<eos>", "b", "a", "d", "c"]
    assert v.stoi == {w: i for i, w in enumerate(v.itos)}
    assert v.counts.dtype == torch.long and v.counts.tolist() == [0, 2, 3, 2, 1, 1]
    assert (v.unk_id, v.eos_id, len(v)) == (0, 1, 6)


def test_min_count_maps_rare_words_to_unk_and_unk_counts_them():
    tokens = "x x x y y z <unk> <eos>".split()  # <unk> in the text, as in PTB: one id with the special
    v = Vocabulary.build(tokens, min_count=2)
    assert v.itos == ["<unk>", "<eos>", "x", "y"]
    assert v.counts.tolist() == [2, 1, 3, 2]  # <unk>: the text's own one + z
    assert v.counts.sum().item() == len(tokens)
    assert v.encode(["z", "<unk>", "never-seen", "x"]).tolist() == [0, 0, 0, 2]
    assert torch.equal(torch.bincount(v.encode(tokens), minlength=len(v)), v.counts)


def test_encode_decode_round_trip_and_bad_arguments():
    v = Vocabulary.build("the cat sat on the mat".split())
    ids = v.encode("the mat sat".split())
    assert ids.dtype == torch.long and ids.tolist() == [2, v.stoi["mat"], v.stoi["sat"]]
    assert v.decode(ids) == ["the", "mat", "sat"] and v.decode(ids.tolist()) == ["the", "mat", "sat"]
    with pytest.raises(TypeError, match="not one str"):
        v.encode("the cat")
    with pytest.raises(ValueError, match=r"id must be in \[0, 7\)"):
        v.decode([7])
    with pytest.raises(TypeError, match="1-D integer"):
        v.decode(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="'<unk>' is not in specials"):
        Vocabulary.build(["a", "b", "a"], min_count=2, specials=("<eos>",))
    no_unk = Vocabulary.build(["a"], specials=("<eos>",))
    assert no_unk.unk_id is None
    with pytest.raises(ValueError, match="'b' is not in the vocabulary"):
        no_unk.encode(["b"])


def test_state_dict_is_json_and_round_trips():
    v = Vocabulary.build("a b b c c c <eos>".split(), min_count=2)
    state = json.loads(json.dumps(v.state_dict()))
    w = Vocabulary.from_state_dict(state)
    assert w == v and w.itos == v.itos and torch.equal(w.counts, v.counts)
    assert (w.unk_id, w.eos_id, w.specials) == (v.unk_id, v.eos_id, v.specials)
    assert torch.equal(w.encode("a c q".split()), v.encode("a c q".split()))
    assert w != Vocabulary.build("a b b c c c <eos>".split(), min_count=1)
    with pytest.raises(ValueError, match="missing"):
        Vocabulary.from_state_dict({"itos": ["a"]})
    with pytest.raises(ValueError, match="'a' twice"):
        Vocabulary.from_state_dict({"itos": ["a", "a"], "counts": [1, 1], "specials": []})
    with pytest.raises(ValueError, match="one entry per word"):
        Vocabulary.from_state_dict({"itos": ["a"], "counts": [1, 1], "specials": []})


def test_frequency_bins_follow_seed_000_table_1():
    counts = torch.tensor([0, 99, 100, 999, 1000, 9999, 10000, 50000])
    assert frequency_bins(counts).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


# ----------------------------------------------------------------------------- text corpora

def test_load_text_corpus_reads_lines_with_eos_and_builds_vocab_from_train(tmp_path):
    d = _write(tmp_path / "toy", {"train.txt": " a b a \n \nc a\n", "valid.txt": "a zz\n", "test.txt": "b\n c"})
    c = load_text_corpus(d)
    assert isinstance(c, TextCorpus) and c.name == "toy"
    v = c.vocab
    assert v.itos == ["<unk>", "<eos>", "a", "b", "c"]  # zz (valid only) is not a word: <unk> is needed
    assert v.decode(c.train) == ["a", "b", "a", "<eos>", "<eos>", "c", "a", "<eos>"]  # empty line: <eos>
    assert v.decode(c.valid) == ["a", "<unk>", "<eos>"]
    assert v.decode(c.test) == ["b", "<eos>", "c", "<eos>"]  # a last line without "\n" still ends in <eos>
    assert v.counts.tolist() == [0, 3, 3, 1, 1]


def test_unk_is_left_out_when_not_needed_and_ptb_names_and_char_level(tmp_path):
    d = _write(tmp_path / "ptbish", {
        "ptb.train.txt": " x y \n", "ptb.valid.txt": " y \n", "ptb.test.txt": " x \n",
        "ptb.char.train.txt": " x _ y \n ", "ptb.char.valid.txt": " y \n ", "ptb.char.test.txt": " x \n "})
    word = load_text_corpus(d)
    assert word.vocab.itos == ["<eos>", "x", "y"] and word.vocab.unk_id is None
    char = load_text_corpus(d, level="char")
    assert char.name == "ptbish-char" and char.vocab.itos == ["<eos>", "x", "_", "y"]
    assert char.train.tolist() == [1, 2, 3, 0]  # the trailing " " after the last "\n" is not a line


def test_text_corpus_errors_name_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no corpus directory.*train\.txt.*ptb\.train\.txt"):
        load_text_corpus(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match=r"holds none of the word-level files"):
        load_text_corpus(_write(tmp_path / "other", {"notes.txt": "a\n"}))
    partial = _write(tmp_path / "partial", {"train.txt": "a\n", "valid.txt": "a\n"})
    with pytest.raises(FileNotFoundError, match=r"lacks .*test\.txt") as err:
        load_text_corpus(partial)
    assert "valid.txt" not in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"ptb\.char\.train\.txt"):
        load_text_corpus(partial, level="char")
    with pytest.raises(ValueError, match="level must be one of"):
        load_text_corpus(partial, level="byte")
    cases = {"latin1": (b"caf\xe9\n", "not UTF-8 text: byte 3"), "nul": (b"a\x00b\n", "NUL bytes"),
             "empty": (b"", "is empty"), "blank": (b" \n\n \n", "is empty")}
    for name, (content, message) in cases.items():
        d = _write(tmp_path / name, {"train.txt": "a\n", "valid.txt": content, "test.txt": "a\n"})
        with pytest.raises(ValueError, match=message) as err:
            load_text_corpus(d)
        assert os.path.join(str(d), "valid.txt") in str(err.value)


@pytest.fixture(scope="module")
def ptb():
    return load_text_corpus(PTB)


@_needs(PTB)
def test_ptb_word_matches_readme_counts(ptb):
    assert (ptb.train.numel(), ptb.valid.numel(), ptb.test.numel()) == (929_589, 73_760, 82_430)
    v = ptb.vocab
    assert len(v) == 10_000 and v.itos[:2] == ["<unk>", "<eos>"]
    assert v.counts[v.eos_id].item() == 42_068  # one <eos> per line
    assert v.counts.sum().item() == 929_589 and v.encode(["<unk>"]).item() == v.unk_id
    assert v.decode(ptb.train[:4]) == ["aer", "banknote", "berlitz", "calloway"]
    with open(os.path.join(PTB, "ptb.valid.txt")) as f:  # no valid word is missing from train
        assert int((ptb.valid == v.unk_id).sum()) == f.read().split().count("<unk>") > 0


@_needs(PTB)
def test_ptb_char_symbol_set_is_50_with_eos():
    c = load_text_corpus(PTB, level="char")
    assert len(c.vocab) == 50 and c.vocab.eos_id == 0 and c.vocab.unk_id is None
    assert (c.train.numel(), c.valid.numel(), c.test.numel()) == (5_017_482, 393_042, 442_423)
    assert c.vocab.decode(c.train[:4]) == ["a", "e", "r", "_"]


@_needs(WT2)
def test_wikitext2_vocab_and_counts():
    c = load_text_corpus(WT2)
    assert len(c.vocab) == 33_278
    assert (c.train.numel(), c.valid.numel(), c.test.numel()) == (2_088_628, 217_646, 245_569)


# ---------------------------------------------------------------------------------- Brown

@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_an_empty_split_file_is_named(tmp_path, split):
    d = _write(tmp_path / "toy", {"train.txt": "a b\n", "valid.txt": "a\n", "test.txt": "b\n", f"{split}.txt": "\n"})
    with pytest.raises(ValueError, match="is empty: it holds no token") as err:
        load_text_corpus(d)
    assert str(err.value).startswith(os.path.join(str(d), f"{split}.txt")) and "\n" not in str(err.value)


def test_lm_splits_too_short_for_their_streams_are_named(tmp_path, capsys):
    from tsrnn.lab import cli
    d = _write(tmp_path / "toy", {"train.txt": "a b c d\n" * 20, "valid.txt": "a b\n", "test.txt": "b\n"})
    argv = ["train", "--task", "lm", "--data", str(d), "--max-steps", "1", "--quiet", "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tsrnn train: error: {d}: the valid split holds 3 tokens (with <eos>), too few for its 10 streams "
                   f"of 2 tokens or more (20)"]
    _write(d, {"valid.txt": "a b\n" * 10})
    assert cli.main(argv + ["--batch-size", "60"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tsrnn train: error: {d}: the train split holds 100 tokens (with <eos>), too few for its 60 "
                   f"streams of 2 tokens or more (120)"]


def _brown_docs():
    return {"ca01": "The/at cat/nn sat/vbd ./.\n\n\tThe/at dog/nn ./.\n",
            "ca02": "A/at cat/nn and/or/cc dog/nn\n",
            "cb01": "The/at end/nn\n"}


def test_load_brown_from_zip_and_directory_agree(tmp_path, monkeypatch):
    others = {"README": "about\n", "CONTENTS": "x\n", "cats.txt": "ca01 news\n"}  # not documents
    extracted = _write(tmp_path / "brown", {**_brown_docs(), **others})
    archive = tmp_path / "brown.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in ("README", "cb01", "ca02", "ca01", "cats.txt"):
            z.write(extracted / name, f"brown/{name}")
    import tsrnn.lab.data.brown as brown
    # a document goes where its first token falls: ca01 (tokens 0-6) -> train, ca02 (7-10) -> valid,
    # cb01 (11-12) -> test; both starts sit exactly on a boundary
    monkeypatch.setattr(brown, "TRAIN_TOKENS", 7)
    monkeypatch.setattr(brown, "VALID_TOKENS", 4)
    a, b = load_brown(archive, min_count=2), load_brown(extracted, min_count=2)
    assert isinstance(a, DocumentCorpus) and a.name == "brown"
    assert a.vocab == b.vocab
    for split in ("train", "valid", "test"):
        assert [d.tolist() for d in getattr(a, split)] == [d.tolist() for d in getattr(b, split)]
    v = a.vocab
    assert v.itos == ["<unk>", "The", "."] and v.eos_id is None  # case kept; tags cut at the last "/"
    assert [v.decode(d) for d in a.train] == [["The", "<unk>", "<unk>", ".", "The", "<unk>", "."]]
    assert [len(a.train), len(a.valid), len(a.test)] == [1, 1, 1]
    assert v.counts.tolist() == [3, 2, 2]
    everything = load_brown(archive, min_count=2, vocab_from="all")  # cat, dog seen twice in all docs
    assert everything.vocab.itos == ["<unk>", "The", "cat", ".", "dog"]
    assert everything.vocab.counts.tolist() == [1, 2, 1, 2, 1]  # still train counts
    lower = load_brown(archive, min_count=1, lowercase=True)
    assert lower.vocab.decode(lower.train[0])[:2] == ["the", "cat"] and "The" not in lower.vocab
    full = load_brown(archive, min_count=1, vocab_from="all")
    assert full.vocab.decode(full.valid[0]) == ["A", "cat", "and/or", "dog"]
    assert full.vocab.decode(full.test[0]) == ["The", "end"]
    kept = everything.without_unknown()  # the words outside the vocabulary removed, the counts those of the rest
    assert kept.vocab.itos == everything.vocab.itos and kept.vocab.counts.tolist() == [0, 2, 1, 2, 1]
    assert [kept.vocab.decode(d) for d in kept.train] == [["The", "cat", ".", "The", "dog", "."]]
    assert [kept.vocab.decode(d) for d in kept.valid] == [["cat", "dog"]]
    assert [kept.vocab.decode(d) for d in kept.test] == [["The"]]


def test_without_unknown_leaves_out_emptied_documents_and_refuses_an_emptied_split():
    vocab = Vocabulary(["<unk>", "a", "b"], [3, 2, 1], specials=["<unk>"])
    ids = lambda *values: torch.tensor(values)  # noqa: E731
    corpus = DocumentCorpus("toy", vocab, [ids(1, 0, 2), ids(0, 0), ids(1, 0)], [ids(0), ids(2, 1)], [ids(1)])
    kept = corpus.without_unknown()
    assert [d.tolist() for d in kept.train] == [[1, 2], [1]] and [d.tolist() for d in kept.valid] == [[2, 1]]
    assert [d.tolist() for d in kept.test] == [[1]] and kept.vocab.counts.tolist() == [0, 2, 1]
    assert corpus.vocab.counts.tolist() == [3, 2, 1]  # the corpus itself is unchanged
    with pytest.raises(ValueError, match="every token of the valid split is <unk>"):
        DocumentCorpus("toy", vocab, [ids(1)], [ids(0, 0)], [ids(1)]).without_unknown()
    no_unk = DocumentCorpus("toy", Vocabulary(["a"], [1]), [ids(0)], [ids(0)], [ids(0)])
    assert no_unk.without_unknown() is no_unk


def test_load_brown_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="brown.zip or an extracted brown/ directory"):
        load_brown(tmp_path / "nothing.zip")
    (tmp_path / "fake.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="fake.zip is not a zip archive"):
        load_brown(tmp_path / "fake.zip")
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as z:
        z.writestr("brown/README", "hi")
    with pytest.raises(FileNotFoundError, match="no Brown document"):
        load_brown(tmp_path / "empty.zip")
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as z:
        z.writestr("brown/ca01", b"x/nn caf\xe9/nn")
    with pytest.raises(ValueError, match=r"bad.zip:brown/ca01 is not UTF-8"):
        load_brown(tmp_path / "bad.zip")
    with pytest.raises(ValueError, match=r"ca01 is empty"):
        load_brown(_write(tmp_path / "dir", {"ca01": "\n"}))
    with zipfile.ZipFile(tmp_path / "damaged.zip", "w") as z:
        z.writestr("brown/ca01", "The/at cat/nn\n")
    raw = (tmp_path / "damaged.zip").read_bytes()
    (tmp_path / "damaged.zip").write_bytes(raw.replace(b"cat/nn", b"bat/nn", 1))
    with pytest.raises(ValueError, match=r"damaged.zip:brown/ca01 cannot be read, the archive is damaged: Bad CRC-32"):
        load_brown(tmp_path / "damaged.zip")
    with pytest.raises(FileNotFoundError, match="no Brown document"):
        load_brown(_write(tmp_path / "dir2", {"README": "x"}))


def test_brown_too_small_for_a_split_names_it(tmp_path, monkeypatch, capsys):
    from tsrnn.lab import cli
    import tsrnn.lab.data.brown as brown
    archive = tmp_path / "brown.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, text in _brown_docs().items():
            z.writestr(f"brown/{name}", text)
    with pytest.raises(ValueError, match=r"is too small: its 3 documents \(13 tokens\) leave the valid split empty; "
                                         r"valid takes the documents starting from token 800,000") as err:
        load_brown(archive)
    assert str(err.value).startswith(f"{archive} ") and "\n" not in str(err.value)
    argv = ["train", "--task", "mlp-lm", "--data", str(archive), "--max-steps", "1", "--quiet",
            "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    out = capsys.readouterr().err.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"tsrnn train: error: {archive} is too small")
    assert "valid split" in out[0]
    monkeypatch.setattr(brown, "TRAIN_TOKENS", 7)
    with pytest.raises(ValueError, match=r"leave the test split empty; test takes the documents starting from token "
                                         r"200,007, so the corpus needs more than 200,007 tokens") as err:
        load_brown(archive)
    assert str(err.value).startswith(f"{archive} ")


@_needs(BROWN)
def test_brown_real_counts_split_and_document_batches():
    c = load_brown(BROWN)
    docs = c.train + c.valid + c.test
    assert len(docs) == 500 and sum(d.numel() for d in docs) == 1_161_192
    assert [len(c.train), len(c.valid), len(c.test)] == [348, 85, 67]
    assert [sum(d.numel() for d in s) for s in (c.train, c.valid, c.test)] == [800_223, 199_910, 161_059]
    assert len(c.vocab) == 10_328 and c.vocab.eos_id is None
    assert int(c.vocab.counts.min()) >= 6 or c.vocab.itos[int(c.vocab.counts.argmin())] == "<unk>"
    assert c.vocab.decode(c.train[0][:4]) == ["The", "Fulton", "County", "Grand"]
    mask_total, resets = 0, 0
    for x, y, reset, mask in document_batches(c.train, batch_size=32, bptt=35):
        mask_total += int(mask.sum())
        resets += int(reset.sum())
    assert resets == 348 and mask_total == 800_223 - 348
    # seed 004's reading: words seen 5 times or fewer in the whole corpus removed from the text; the
    # split stays at the raw documents' boundaries
    dropped = load_brown(BROWN, vocab_from="all").without_unknown()
    assert len(dropped.vocab) == 13_161 and [len(dropped.train), len(dropped.valid), len(dropped.test)] == [348, 85, 67]
    sizes = [sum(d.numel() for d in s) for s in (dropped.train, dropped.valid, dropped.test)]
    assert sizes == [745_987, 187_638, 151_396] and int(dropped.vocab.counts.sum()) == 745_987
    assert all(int(d.min()) > 0 for s in (dropped.train, dropped.valid, dropped.test) for d in s)  # no <unk>


# --------------------------------------------------------------------------- default corpus

def test_default_corpus_is_embedded_and_small():
    c = default_corpus()
    assert c.name == "tiny-shakespeare" and len(c.vocab) == 1_099
    assert (c.train.numel(), c.valid.numel(), c.test.numel()) == (38_502, 4_927, 5_250)
    eos = c.vocab.eos_id
    assert [int((s == eos).sum()) for s in (c.train, c.valid, c.test)] == [4_687, 586, 586]  # 80/10/10 of lines
    assert all(int(s[-1]) == eos for s in (c.train, c.valid, c.test))
    assert int(c.vocab.counts[2:].min()) >= 3  # rare words are <unk>
    assert c.vocab.decode(c.train[:5]) == ["first", "citizen", ":", "<eos>", "before"]
    assert len(default_corpus(min_count=1).vocab) == 3_912


def test_default_corpus_file_matches_attribution_and_source():
    data = resources.files("tsrnn.lab.data").joinpath("tiny_shakespeare.txt").read_bytes()
    attribution = resources.files("tsrnn.lab.data").joinpath("ATTRIBUTION.txt").read_text()
    assert 120_000 <= len(data) <= 200_000
    assert hashlib.sha256(data).hexdigest() in attribution and "karpathy/char-rnn" in attribution
    if os.path.exists(SHAKESPEARE):
        with open(SHAKESPEARE, "rb") as f:
            assert f.read(len(data)) == data


# --------------------------------------------------------------------------------- batching

def test_batchify_makes_contiguous_columns_and_drops_the_remainder():
    s = batchify(torch.arange(23), 4)
    assert s.shape == (5, 4) and s.is_contiguous()
    for b in range(4):
        assert s[:, b].tolist() == list(range(5 * b, 5 * b + 5))
    with pytest.raises(ValueError, match="at least 2 tokens"):
        batchify(torch.arange(7), 4)
    with pytest.raises(TypeError, match="integer tensor"):
        batchify(torch.arange(8.0), 4)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        batchify(torch.arange(8), 0)


def test_bptt_windows_shift_targets_by_one_and_cover_the_stream():
    stream = batchify(torch.arange(100), 3)  # (33, 3)
    windows = list(bptt_batches(stream, 10))
    assert [x.shape[0] for x, _ in windows] == [10, 10, 10, 2] == [y.shape[0] for _, y in windows]
    assert num_bptt_batches(stream, 10) == 4 and num_bptt_batches(stream, 32) == 1 and num_bptt_batches(stream, 31) == 2
    assert torch.equal(torch.cat([x for x, _ in windows]), stream[:-1])
    assert torch.equal(torch.cat([y for _, y in windows]), stream[1:])
    assert all(torch.equal(y, x + 1) for x, y in windows)  # ids are consecutive within a column
    short = batchify(torch.arange(64), 2)  # N = 32: a last window of one step
    assert [x.shape[0] for x, _ in bptt_batches(short, 10)] == [10, 10, 10, 1] and num_bptt_batches(short, 10) == 4
    assert torch.equal(torch.cat([y for _, y in bptt_batches(short, 10)]), short[1:])
    with pytest.raises(ValueError, match="stream must have 2 dimensions"):
        bptt_batches(torch.arange(10), 5)  # checked on the call, not at the first next()


def test_sentence_batches_truncate_pad_and_mask():
    eos = 0
    ids = torch.tensor([5, 6, 0, 7, 0, 0, 1, 2, 3, 4, 0, 9])  # "5 6 . 7 . . 1 2 3 4 ." + "9" without eos
    batches = list(sentence_batches(ids, eos, batch_size=3, length=3))
    assert [x.shape for x, _, _ in batches] == [(3, 3), (3, 2)]
    x = torch.cat([b[0] for b in batches], 1)
    y = torch.cat([b[1] for b in batches], 1)
    mask = torch.cat([b[2] for b in batches], 1)
    assert mask.dtype == torch.bool
    assert y.T.tolist() == [[5, 6, 0], [7, 0, 0], [0, 0, 0], [1, 2, 3], [9, 0, 0]]
    assert x.T.tolist() == [[0, 5, 6], [0, 7, 0], [0, 0, 0], [0, 1, 2], [0, 0, 0]]  # eos, then the words
    assert mask.T.int().tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]]
    padded = next(iter(sentence_batches(ids, eos, 5, length=3, pad_id=8)))
    assert padded[1][2, 1].item() == 8 and padded[0][2, 2].item() == 8


def test_sentence_batches_split_shuffle_and_drop_last():
    ids = torch.tensor([5, 6, 0, 7, 0, 0, 1, 2, 3, 4, 0])
    x, y, mask = next(iter(sentence_batches(ids, 0, batch_size=10, length=3, long="split")))
    assert y.T.tolist() == [[5, 6, 0], [7, 0, 0], [0, 0, 0], [1, 2, 3], [4, 0, 0]]
    assert x.T.tolist()[3:] == [[0, 1, 2], [3, 4, 0]]  # a piece's first input is the word before it
    assert torch.equal(y.T[mask.T], ids)  # split mode: every token is a target exactly once
    g = torch.Generator().manual_seed(3)
    shuffled = [b[1] for b in sentence_batches(ids, 0, 2, length=4, shuffle=True, generator=g)]
    plain = next(iter(sentence_batches(ids, 0, 4, length=4)))[1]
    columns = sorted(tuple(c) for b in shuffled for c in b.T.tolist())
    assert columns == sorted(tuple(c) for c in plain.T.tolist())
    g.manual_seed(3)
    again = [b[1] for b in sentence_batches(ids, 0, 2, length=4, shuffle=True, generator=g)]
    assert all(torch.equal(a, b) for a, b in zip(shuffled, again))
    assert [b[0].shape[1] for b in sentence_batches(ids, 0, 3, drop_last=True)] == [3]
    assert [b[0].shape[1] for b in sentence_batches(ids, 0, 3)] == [3, 1]
    with pytest.raises(ValueError, match="long must be one of"):
        sentence_batches(ids, 0, 3, long="wrap")


@_needs(PTB)
def test_sentence_batches_on_ptb_valid_keep_every_token(ptb):
    eos = ptb.vocab.eos_id
    kept = sum(int(m.sum()) for _, _, m in sentence_batches(ptb.valid, eos, 32, long="split"))
    assert kept == 73_760
    columns = sum(m.shape[1] for _, _, m in sentence_batches(ptb.valid, eos, 32))
    assert columns == 3_370  # one column per line under truncation


def test_document_batches_resets_masks_and_greedy_packing():
    docs = [torch.arange(10, 15), torch.arange(20, 23), torch.arange(30, 34), torch.arange(40, 42), torch.arange(0)]
    windows = list(document_batches(docs, batch_size=2, bptt=3))
    assert [w[0].shape for w in windows] == [(3, 2), (3, 2), (1, 2)]
    x, y, reset, mask = (torch.cat([w[i] for w in windows]) for i in range(4))
    # greedy: d0 -> s0 (5), d1 -> s1 (3), d2 -> s1 (7), d3 -> s0 (7)
    assert x[:, 0].tolist() == [10, 11, 12, 13, 14, 40, 41]
    assert x[:, 1].tolist() == [20, 21, 22, 30, 31, 32, 33]
    assert reset.T.int().tolist() == [[1, 0, 0, 0, 0, 1, 0], [1, 0, 0, 1, 0, 0, 0]]
    assert mask.T.int().tolist() == [[1, 1, 1, 1, 0, 1, 0], [1, 1, 0, 1, 1, 1, 0]]
    assert torch.equal(y[mask], x[mask] + 1)  # the next token of the same document
    assert int(mask.sum()) == sum(max(d.numel() - 1, 0) for d in docs)
    uneven = list(document_batches(docs[:2], batch_size=3, bptt=8))  # a stream with no document: all padding
    assert uneven[0][0].shape == (5, 3) and not uneven[0][3][:, 2].any() and not uneven[0][2][:, 2].any()
    g = torch.Generator().manual_seed(0)
    shuffled = torch.cat([w[0] for w in document_batches(docs, 1, 50, shuffle=True, generator=g)])
    assert sorted(shuffled[:, 0].tolist()) == sorted(torch.cat(docs).tolist())
    with pytest.raises(TypeError, match="list of 1-D id tensors"):
        document_batches(torch.arange(5), 2, 3)
    with pytest.raises(ValueError, match=r"documents\[1\] must have 1 dimension"):
        document_batches([torch.arange(3), torch.zeros(2, 2, dtype=torch.long)], 2, 3)
    with pytest.raises(ValueError, match="no token"):
        document_batches([torch.arange(0)], 2, 3)


def test_shard_is_disjoint_and_covers():
    ids = torch.arange(103)
    parts = [shard(ids, r, 4) for r in range(4)]
    assert [p.numel() for p in parts] == [25] * 4
    assert torch.equal(torch.cat(parts), ids[:100])  # contiguous, in rank order, remainder dropped
    docs = [torch.tensor([i]) for i in range(7)]
    split = [shard(docs, r, 3) for r in range(3)]
    assert [[int(d) for d in part] for part in split] == [[0, 3, 6], [1, 4], [2, 5]]
    assert torch.equal(shard(ids, 0, 1), ids)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 4\)"):
        shard(ids, 4, 4)
    with pytest.raises(ValueError, match="fewer than world_size"):
        shard(docs, 0, 8)
    with pytest.raises(ValueError, match="fewer than world_size"):
        shard(torch.arange(3), 0, 4)
    with pytest.raises(TypeError, match="1-D id tensor or a list"):
        shard({1, 2}, 0, 1)
