"""IMDB reviews (tsrnn.lab.data.imdb) from an aclImdb-layout folder the test writes, word vectors in
GloVe's format, the sentiment model, and `tsrnn train --task imdb` end to end."""
import pytest
import torch

from tsrnn.lab import cli
from tsrnn.lab.data import imdb
from tsrnn.lab.models import SentimentModel
from tsrnn.lab.training import checkpoint

GOOD = ["A great movie!<br /><br />I loved it, great acting.", "Great fun; wonderful cast, loved the score",
        "wonderful. simply great", "I loved this film's story"]
BAD = ["Awful film. I hated it, awful acting.", "Boring and awful; the plot was bad",
       "bad bad bad... don't watch", "I hated the ending, boring"]


def write_aclimdb(root, copies=3):
    for split in ("train", "test"):
        for polarity, texts in (("pos", GOOD), ("neg", BAD)):
            folder = root / split / polarity
            folder.mkdir(parents=True)
            for i in range(copies):
                for j, text in enumerate(texts):
                    (folder / f"{i}_{j}.txt").write_text(text)
    return root


def test_tokenize():
    assert imdb.tokenize("A great movie!<br /><br />Don't miss it.") == \
        ["a", "great", "movie", "!", "don't", "miss", "it", "."]


def test_load_imdb_splits_dictionary_and_cut(tmp_path):
    data = imdb.load_imdb(write_aclimdb(tmp_path / "aclImdb"), vocab_size=6, max_length=3, valid_fraction=0.25)
    assert len(data.train.labels) == 18 and len(data.valid.labels) == 6 and len(data.test.labels) == 24
    assert data.words[:2] == ["<pad>", "<unk>"] and len(data.words) == 8
    assert all(1 <= len(t) <= 3 for t in data.train.tokens + data.test.tokens)
    assert set(data.test.labels.tolist()) == {0, 1} and data.test.labels.sum() == 12
    first = imdb.tokenize(GOOD[0])[:3]                      # pos/0_0.txt, cut to 3 words
    ids = {w: i for i, w in enumerate(data.words)}
    assert data.test.tokens[0].tolist() == [ids.get(w, imdb.UNK) for w in first]


def test_missing_folders_are_named(tmp_path):
    root = write_aclimdb(tmp_path / "aclImdb")
    for path in sorted((root / "test" / "neg").iterdir()):
        path.unlink()
    (root / "test" / "neg").rmdir()
    with pytest.raises(FileNotFoundError, match="test/neg"):
        imdb.load_imdb(root)


def one_line(text, *parts):
    assert "\n" not in text.strip() and all(str(part) in text for part in parts), text


def test_empty_splits_are_named(tmp_path, capsys):
    root = write_aclimdb(tmp_path / "aclImdb", copies=1)
    for path in [*(root / "train" / "pos").iterdir(), *(root / "train" / "neg").iterdir()][2:]:
        path.unlink()                                       # 2 training reviews: 10% of them is none
    with pytest.raises(ValueError, match=r"the valid split is empty: valid takes 0.1 of the 2 reviews") as err:
        imdb.load_imdb(root)
    one_line(str(err.value), root)
    with pytest.raises(ValueError, match=r"the train split is empty: valid takes 1 of the 2 reviews") as err:
        imdb.load_imdb(root, valid_fraction=1.0)
    one_line(str(err.value), root)
    argv = ["train", "--task", "imdb", "--data", str(root), "--max-steps", "1", "--quiet", "--out", str(tmp_path / "r")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tsrnn train: error: ") and "the valid split is empty" in err
    one_line(err, root)
    for path in [*(root / "test" / "pos").iterdir(), *(root / "test" / "neg").iterdir()]:
        path.unlink()
    with pytest.raises(ValueError, match="holds no reviews") as err:
        imdb.load_imdb(root, valid_fraction=0.5)
    one_line(str(err.value), root / "test")


@pytest.mark.parametrize("line, message", [
    ("awful 1 x", "value 2 of 'awful' is 'x', not a finite number"),
    ("awful nan 2", "value 1 of 'awful' is 'nan', not a finite number"),
    ("awful 1 inf", "value 2 of 'awful' is 'inf', not a finite number"),
    ("awful -Infinity 2", "value 1 of 'awful' is '-Infinity', not a finite number"),
    ("awful 1 2 3", "3 numbers, expected 2 (as on line 2)"),
    ("awful", "'awful' has no numbers")])
def test_bad_vector_lines_name_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "vectors.txt"
    path.write_text(f"unused 1 2 3\ngreat 1 2\nother x y\n{line}\n")   # lines of other words are not read
    with pytest.raises(ValueError, match="^" + str(path) + ":4: ") as err:
        imdb.load_vectors(path, ["<pad>", "great", "awful"])
    one_line(str(err.value), message)


def test_vectors_file_must_be_utf8(tmp_path, capsys):
    path = tmp_path / "vectors.txt"
    path.write_bytes("great 1 2\ncaf\u00e9 3 4\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"not UTF-8 text \(byte 3 of the line is b'\\xe9'\)") as err:
        imdb.load_vectors(path, ["<pad>", "great"])
    one_line(str(err.value), f"{path}:2: ")
    argv = ["train", "--task", "imdb", "--data", str(write_aclimdb(tmp_path / "aclImdb")), "--embeddings", str(path),
            "--max-steps", "1", "--quiet", "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tsrnn train: error: ") and "not UTF-8 text" in err
    one_line(err, f"{path}:2: ")


def test_load_vectors(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("great 1 2 3\nawful -1 -2 -3\nunused 9 9 9\n")
    vectors, found = imdb.load_vectors(path, ["<pad>", "<unk>", "great", "awful", "rare"])
    assert found == 2 and vectors.shape == (5, 3)
    assert vectors[2].tolist() == [1, 2, 3] and vectors[0].abs().sum() == 0
    path.write_text("great 1 2 3\nawful 1 2\n")
    with pytest.raises(ValueError, match="expected 3"):
        imdb.load_vectors(path, ["<pad>", "great", "awful"])


@pytest.mark.parametrize("cell", ["lstm", "chrono", "plstm"])
def test_sentiment_model_frozen_vectors_and_last_word(cell):
    torch.manual_seed(0)
    vectors = torch.randn(10, 6)
    vectors[0] = 0
    model = SentimentModel(cell, 5, vectors=vectors, t_max=400.0 if cell == "chrono" else None).eval()
    assert not model.embedding.weight.requires_grad and torch.equal(model.embedding.weight, vectors)
    tokens = torch.randint(1, 10, (7, 3))
    lengths = torch.tensor([7, 4, 1])
    logits = model(tokens, lengths)
    assert logits.shape == (3, 2)
    padded = tokens.clone()
    padded[4:, 1] = 0
    padded[1:, 2] = 0
    assert torch.allclose(model(padded, lengths), logits, atol=1e-6)


def test_imdb_trains_from_the_cli_and_needs_its_folder(tmp_path, capsys):
    root = write_aclimdb(tmp_path / "aclImdb")
    (tmp_path / "glove.txt").write_text("great 1 0\nawful -1 0\nloved 1 1\n")
    argv = ["train", "--task", "imdb", "--data", str(root), "--nhid", "6", "--batch-size", "8", "--epochs", "1",
            "--quiet", "--embeddings", str(tmp_path / "glove.txt"), "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 0
    state = checkpoint.load(tmp_path / "run" / "best.pt")
    assert state["config"]["emsize"] == 2 and state["args"]["lr"] == 5e-4   # the seed's pLSTM rate
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "run" / "best.pt")]) == 0
    assert "accuracy" in capsys.readouterr().out
    assert cli.main(["train", "--task", "imdb", "--data", str(tmp_path / "nowhere"), "--quiet",
                     "--out", str(tmp_path / "run2")]) == 2
    assert "lacks train/pos" in capsys.readouterr().err
    assert cli.main(["train", "--task", "imdb", "--quiet", "--out", str(tmp_path / "run3")]) == 2
    assert "needs --data" in capsys.readouterr().err


def test_imdb_recipe_runs_a_short_epoch(tmp_path):
    root = write_aclimdb(tmp_path / "aclImdb")
    argv = ["train", "--recipe", "seed002", "--task", "imdb", "--data", str(root), "--cell", "lstm", "--epochs", "1",
            "--quiet", "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 0
    args = checkpoint.load(tmp_path / "run" / "last.pt")["args"]
    assert (args["nhid"], args["lr"], args["batch_size"], args["dropout"]) == ("128", 1e-3, 64, 0.2)
