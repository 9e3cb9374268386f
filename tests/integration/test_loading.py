"""``tsrnn.load``: a run folder or checkpoint of ``tsrnn train`` to a ready model, its data, and
the score of a text under an lm checkpoint, equal to what ``tsrnn eval`` computes."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

import tsrnn
from tsrnn.lab import cli
from tsrnn.lab.data.text import line_tokens
from tsrnn.lab.data.vocab import EOS
from tsrnn.lab.training.checkpoint import CheckpointError
from conftest import corpus_folder


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm")
    assert cli.main(["train", "--task", "lm", "--emsize", "8", "--nhid", "16,8", "--bptt", "10",
                     "--batch-size", "4", "--max-steps", "4", "--valid-every", "2", "--out", str(out), "--quiet"]) == 0
    return out


def test_a_run_folder_loads_its_best_checkpoint_ready_to_use(lm_run):
    trained = tsrnn.load(lm_run)
    assert trained.path == lm_run / "best.pt" and trained.name == "lm"
    assert not trained.model.training and all(p.device.type == "cpu" for p in trained.model.parameters())
    assert tsrnn.load(lm_run, which="last").path == lm_run / "last.pt"
    state = torch.load(lm_run / "best.pt", weights_only=True)
    for name, value in trained.model.state_dict().items():
        assert torch.equal(value, state["model"][name]), name
    assert trained.vocab.state_dict() == state["vocab"]
    records = [json.loads(line) for line in (lm_run / "metrics.jsonl").read_text().splitlines()]
    best = min(r["loss"] for r in records if r["event"] == "valid")
    assert trained.evaluate("valid")["loss"] == pytest.approx(best, rel=1e-9)


def test_eval_and_analyze_take_a_run_folder_as_load_does(lm_run, capsys):
    assert cli.main(["eval", str(lm_run), str(lm_run / "last.pt"), "--resamples", "10"]) == 0
    assert f"test perplexity of {lm_run / 'best.pt'} vs baseline {lm_run / 'last.pt'}" in capsys.readouterr().out
    assert cli.main(["analyze", str(lm_run), "--only", "timescales", "--windows", "2", "--quiet"]) == 0
    summary = json.loads((lm_run / "analysis" / "summary.json").read_text())  # analysis/ in the run folder
    assert summary["checkpoint"] == str(lm_run / "best.pt") and "timescales" in summary["analyses"]


def test_score_is_every_tokens_loss_after_an_eos(lm_run):
    trained = tsrnn.load(lm_run / "last.pt")
    corpus_text = "\n".join(" ".join(trained.vocab.decode(trained.task.split("test")[:40].tolist())).split(EOS))
    text = corpus_text + "\nwords never seen zyzzyva\n"
    score = trained.score(text)
    tokens = line_tokens(text)
    assert score.tokens == tokens and score.nll.shape == (len(tokens),) and score.nll.dtype == torch.float64
    ids = trained.vocab.encode([EOS, *tokens])
    with torch.no_grad():  # the whole text in one window: the same losses as windows of --bptt with the state carried
        logits, _, _ = trained.model(ids[:-1].view(-1, 1), None)
    expected = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]).double(), ids[1:], reduction="none")
    torch.testing.assert_close(score.nll, expected, rtol=1e-5, atol=1e-5)
    assert score.loss == pytest.approx(expected.mean().item(), rel=1e-5)
    assert score.ppl == pytest.approx(math.exp(score.loss), rel=1e-12)


def test_bad_paths_and_uses_are_clear_errors(lm_run, tmp_path):
    with pytest.raises(CheckpointError, match="holds no best.pt or last.pt"):
        tsrnn.load(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        tsrnn.load(tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="which must be 'best' or 'last'"):
        tsrnn.load(lm_run, which="first")
    trained = tsrnn.load(lm_run)
    with pytest.raises(ValueError, match="holds no token"):
        trained.score(" \n ")
    with pytest.raises(TypeError, match="text must be a str"):
        trained.score(["a", "b"])
    with pytest.raises(ValueError, match="split must be 'valid' or 'test'"):
        trained.evaluate("train")


def test_data_moved_is_named_with_the_way_out(tmp_path):
    corpus = corpus_folder(tmp_path / "corpus", "a b c d e f g h\n" * 30)
    run = tmp_path / "run"
    assert cli.main(["train", "--task", "lm", "--data", str(corpus), "--emsize", "4", "--nhid", "6,4", "--bptt", "5",
                     "--batch-size", "2", "--max-steps", "1", "--out", str(run), "--quiet"]) == 0
    moved = tmp_path / "moved"
    shutil.move(corpus, moved)
    with pytest.raises(FileNotFoundError, match="pass data= the folder or file"):
        tsrnn.load(run)
    assert tsrnn.load(run, data=str(moved)).score("a b c\n").tokens == ["a", "b", "c", EOS]


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("copy")
    assert cli.main(["train", "--task", "copy", "--nhid", "8", "--delay", "3", "--batch-size", "4", "--max-steps", "1",
                     "--out", str(out), "--quiet"]) == 0
    return out


def test_what_load_returns_prints_its_task_by_name_and_sizes(lm_run, copy_run):
    lm, copy = tsrnn.load(lm_run), tsrnn.load(copy_run)
    assert repr(lm.task) == "LanguageModelTask('lm', corpus='tiny-shakespeare', vocab_size=1099, cell='mts', " \
                            "nhid='16,8', bptt=10)"
    assert repr(copy.task) == "CopyTask('copy', cell='plstm', nhid='8', delay=3)"
    for trained in (lm, copy):
        printed = repr(trained)
        assert "object at 0x" not in printed, printed
        assert f"task={trained.task!r}" in printed and f"model={trained.model!r}" in printed
        assert str(trained.path) in printed


def test_score_is_for_language_models(copy_run):
    trained = tsrnn.load(copy_run)
    assert trained.vocab is None and set(trained.evaluate("valid")) >= {"loss"}
    with pytest.raises(ValueError, match="scores text under an lm checkpoint"):
        trained.score("a b")
