"""The averaging-lm ablations of seed 001's memory: --no-h0 (h_0 left out of the average, §6.3) and
--memory-span stream (a memory that spans sentences, §6), each against a hand or plain-torch
computation, the defaults unchanged, their one-line CLI errors, tiny end-to-end runs and checkpoints
made before the options existed."""
import argparse

import pytest
import torch

from tsrnn.lab import cli, data
from tsrnn.lab.models import AveragingLM
from tsrnn.lab.training import checkpoint, commands
from tsrnn.lab.training.tasks import TASKS
from conftest import corpus_folder

V, D, H = 30, 8, 12


def model(**kw):
    torch.manual_seed(0)
    return AveragingLM(V, embedding_size=D, hidden_size=H, **kw).eval()


def tokens(steps=17, batch=3, seed=1):
    return torch.randint(V, (steps, batch), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------
def test_model_without_h0_averages_the_earlier_outputs_alone():
    """count_h0=False: m_t = mean(h[r:t]) after the last reset r, and 0 at r itself, by a loop."""
    net, x = model(count_h0=False), tokens()
    reset = torch.zeros_like(x, dtype=torch.bool)
    reset[6, 1] = True
    with torch.no_grad():
        h, _ = net.rnn(net.encoder(x))
        m = torch.zeros_like(h)
        for b in range(x.shape[1]):
            start = 0
            for t in range(x.shape[0]):
                start = t if reset[t, b] else start
                if t > start:
                    m[t, b] = h[start:t, b].mean(0)
        want = net.decoder(torch.tanh(net.concat(torch.cat([h, m], -1))))
        torch.testing.assert_close(net(x, reset), want, atol=1e-6, rtol=1e-5)
        assert not torch.allclose(net(x, reset), model()(x, reset))  # h_0 counted: another m
    assert "count_h0=False" in repr(net)


@pytest.mark.parametrize("count_h0", [True, False])
@pytest.mark.parametrize("memory", [True, False])
def test_windows_with_the_carried_state_are_the_whole_stream(count_h0, memory):
    """Windows of 5, 1 and 11 steps, each from the state the previous returned, give the logits of
    the 17 steps read at once: neither the LSTM nor the memory restarts at a window."""
    net, x = model(count_h0=count_h0, memory=memory), tokens()
    with torch.no_grad():
        whole, state, parts = net(x), None, []
        for lo, hi in ((0, 5), (5, 6), (6, 17)):
            logits, state = net(x[lo:hi], state=state, return_state=True)
            parts.append(logits)
    torch.testing.assert_close(torch.cat(parts), whole, atol=1e-5, rtol=1e-5)
    (h, c), memory_state = state
    assert h.shape == c.shape == (2, 3, H)
    if memory:
        assert memory_state[1].tolist() == [17 + count_h0] * 3  # entries: h_1 .. h_17, and h_0 if counted
    else:
        assert memory_state is None


# --------------------------------------------------------------------------------------------
# the task
# --------------------------------------------------------------------------------------------
def task(path=None, **given):
    values = dict(task="averaging-lm", data=path, level=None, seed=0, batch_size=2, bptt=3, cell=None, emsize=D,
                  nhid=str(H), dropout=0.0, backend=None, optimizer=None, weight_decay=None, order="corpus",
                  count_h0=None, memory_span=None)
    values.update(given)
    return TASKS["averaging-lm"](argparse.Namespace(**values), torch.device("cpu"))


def corpus(tmp_path):
    """A WikiText-2-layout folder whose train split is 14 ids: 'a b <eos> c d e <eos>' twice."""
    return corpus_folder(tmp_path / "corpus", "a b\nc d e\n" * 2)


def test_stream_batches_span_sentences_by_hand(tmp_path):
    """--memory-span stream, batch 2, bptt 3 on 14 ids: two streams of 7 (batchify), windows of 3, 3
    (its 6 targets a column); every target counted; the memory after each window holds h_0 and every
    step read so far (4, then 7 entries), across the sentence ends, and the LSTM state goes on."""
    t = task(corpus(tmp_path), memory_span="stream")
    ids = t.split("train")
    assert ids.numel() == 14
    batches = t.train_batches(0, 0, 1)
    stream = data.batchify(ids, 2)
    assert [b[0].shape for b in batches] == [(3, 2), (3, 2)]
    for (x, y, reset, mask), (x0, y0) in zip(batches, data.bptt_batches(stream, 3), strict=True):
        assert torch.equal(x, x0) and torch.equal(y, y0) and reset is None and mask.all()
    torch.manual_seed(0)
    net = t.build_model().eval()
    state, counts = None, []
    with torch.no_grad():
        for batch in batches:
            _, _, state = t._nll(net, batch, state)
            counts.append(state[1][1].tolist())
    assert counts == [[4, 4], [7, 7]]
    with torch.no_grad():  # the windows' losses are those of each whole stream read at once
        nll, _ = t.token_nll(net, "train")
        whole = torch.nn.functional.cross_entropy(net(stream[:-1]).transpose(1, 2), stream[1:], reduction="none")
    torch.testing.assert_close(nll, whole.T.reshape(-1))
    without_h0 = task(corpus(tmp_path), memory_span="stream", count_h0=False)
    _, _, state = without_h0._nll(without_h0.build_model().eval(), batches[0], None)
    assert state[1][1].tolist() == [3, 3]


def test_sentence_span_is_the_default_and_unchanged():
    """Without the options: the sentence batches of before (one sentence a column, no carried
    state), the config of before, the model that counts h_0."""
    t = task(order=None)
    assert (t.args.memory_span, t.args.count_h0) == ("sentence", True)
    want = data.sentence_batches(t.split("train"), t.vocab.eos_id, 2, length=3, shuffle=True,
                                 generator=t.epoch_generator(0))
    for (x, y, reset, mask), (x0, y0, mask0) in zip(t.train_batches(0, 0, 1), want, strict=True):
        assert torch.equal(x, x0) and torch.equal(y, y0) and torch.equal(mask, mask0) and reset is None
    torch.manual_seed(0)
    net = t.build_model()
    assert net.count_h0 is True
    _, _, state = t._nll(net, t.train_batches(0, 0, 1)[0], None)
    assert state is None
    assert "count_h0" not in t.config() and "memory_span" not in t.config()
    assert task(count_h0=False, memory_span="stream").config() == {**t.config(), "count_h0": False,
                                                                   "memory_span": "stream"}


# --------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["--no-h0", "--no-memory"], "--no-h0 changes the averaging memory that --no-memory removes"),
    (["--memory-span", "stream", "--order", "shuffled"], "--memory-span stream reads each stream's windows in order"),
    (["--no-h0", "--task", "lm"], "--no-h0 is an option of --task averaging-lm, not of --task lm"),
    (["--memory-span", "stream", "--task", "mlp-lm"], "--memory-span is an option of --task averaging-lm"),
])
def test_bad_combinations_are_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.setattr(commands, "train", lambda args: pytest.fail("train ran despite a bad value"))
    assert cli.main(["train", "--task", "averaging-lm", "--out", str(tmp_path / "run"), *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tsrnn train: error: ") and message in lines[0], lines


TINY = ["--task", "averaging-lm", "--emsize", "16", "--nhid", "24", "--batch-size", "8", "--bptt", "12",
        "--max-steps", "2", "--quiet"]


@pytest.mark.parametrize("options, recorded", [
    (["--no-h0"], {"count_h0": False}),
    (["--memory-span", "stream"], {"memory_span": "stream"}),
    (["--no-h0", "--memory-span", "stream"], {"count_h0": False, "memory_span": "stream"}),
])
def test_train_eval_and_resume(tmp_path, capsys, options, recorded):
    """Two steps; the checkpoint's config records the option; eval and a resume rebuild that model."""
    run = tmp_path / "run"
    assert cli.main(["train", *TINY, *options, "--out", str(run)]) == 0
    state = checkpoint.load(run / "last.pt")
    assert {key: state["config"].get(key) for key in recorded} == recorded
    if "stream" in options:
        assert state["carry"] is not None  # the LSTM state and the memory, carried to the next window
    capsys.readouterr()
    assert cli.main(["eval", str(run / "last.pt"), "--resamples", "20"]) == 0
    assert "test perplexity" in capsys.readouterr().out
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", "3", "--quiet"]) == 0
    assert checkpoint.load(run / "last.pt")["progress"]["step"] == 3


def test_a_checkpoint_older_than_the_options_loads_as_it_was_trained(tmp_path, capsys):
    """A run saved before --no-h0 and --memory-span existed (its args lack them) evaluates and
    resumes as the sentence-span model with h_0; given --no-h0 it is another model."""
    run = tmp_path / "run"
    assert cli.main(["train", *TINY, "--out", str(run)]) == 0
    state = checkpoint.load(run / "last.pt")
    old = {key: value for key, value in state.items() if key not in ("format", "tsrnn_version", "checksum")}
    for key in ("count_h0", "memory_span"):
        del old["args"][key]
    checkpoint.save(run / "old.pt", old)
    capsys.readouterr()
    assert cli.main(["eval", str(run / "old.pt"), "--resamples", "20"]) == 0
    assert cli.main(["train", "--resume", str(run / "old.pt"), "--max-steps", "3", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run / "old.pt"), "--max-steps", "3", "--quiet", "--no-h0"]) == 2
    assert "holds another model" in capsys.readouterr().err
