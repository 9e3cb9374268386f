"""The mlp-lm options of seed 004's Experiments 2 and 4: --ahead K (predict the word K steps on) and
--drop-taus (train the TILT-MLP without some τ* slots), each against a hand or plain-torch
computation, the defaults bit-identical to the model and batches without them, their one-line CLI
errors, and tiny end-to-end runs."""
import argparse
import math

import pytest
import torch
import torch.nn.functional as F

from tsrnn.lab import cli, data
from tsrnn.memory.contexts import TILTContext
from tsrnn.lab.models import MLPLM
from tsrnn.lab.training import checkpoint, commands
from tsrnn.lab.training.tasks import TASKS
from tsrnn.lab.training.tasks.language import ahead_targets

V, D, H = 50, 4, 6


def documents(lengths, start=1):
    """Documents of the given lengths whose tokens are all distinct, so a token names its position."""
    docs, at = [], start
    for length in lengths:
        docs.append(torch.arange(at, at + length))
        at += length
    return docs


def counted_pairs(batches):
    """{(input token, target token)} of the counted targets of (x, y, reset, mask) windows."""
    return {(int(x[t, b]), int(y[t, b])) for x, y, _, mask in batches for t, b in mask.nonzero().tolist()}


# --------------------------------------------------------------------------------------------
# --ahead K (Experiment 2)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ahead", [2, 3, 7])
def test_ahead_targets_are_the_words_k_on_in_the_same_document(ahead):
    """Every word w_i with i + K inside its document is counted once with target w_{i+K}, across
    window boundaries (bptt 4 < documents); x, reset and the windows are those of the next-word batches."""
    docs = documents([9, 1, 5, 12, 3, 7, 2])
    plain = list(data.document_batches(docs, 3, 4))
    shifted = ahead_targets(plain, ahead)
    want = {(int(d[i]), int(d[i + ahead])) for d in docs for i in range(len(d) - ahead)}
    assert counted_pairs(shifted) == want
    assert sum(int(m.sum()) for *_, m in shifted) == sum(max(0, len(d) - ahead) for d in docs)
    for (x, y, reset, mask), (x0, _, reset0, _) in zip(shifted, plain, strict=True):
        assert torch.equal(x, x0) and torch.equal(reset, reset0)
        assert torch.equal(y[~mask], torch.zeros_like(y[~mask]))


def test_ahead_1_is_the_next_word_batches_themselves():
    docs = documents([9, 1, 5, 12])
    plain = list(data.document_batches(docs, 2, 4))
    assert ahead_targets(plain, 1) is plain
    assert counted_pairs(plain) == {(int(d[i]), int(d[i + 1])) for d in docs for i in range(len(d) - 1)}


def task(ahead=1, drop_taus=None, context="tilt", n=3, rare_words=None):
    """An mlp-lm task on the embedded corpus (16 documents per split), read in one window per split."""
    args = argparse.Namespace(data=None, level="word", ahead=ahead, drop_taus=drop_taus, context=context, n=n,
                              emsize=D, nhid=str(H), batch_size=4, bptt=128, rare_words=rare_words)
    made = TASKS["mlp-lm"](args, torch.device("cpu"))
    made.args.bptt = 10**6  # one window: the context of every step reaches back to its document's start
    return made


@pytest.mark.parametrize("ahead", [1, 4])
def test_scored_losses_and_unigram_baseline_are_those_of_each_document_alone(ahead):
    """token_nll and evaluate against a hand loop: each validation document run alone through the
    model, the loss of w_{i+K} read from step i; the unigram baseline (add-one training counts) over
    the same targets."""
    t = task(ahead)
    torch.manual_seed(0)
    model = t.build_model().eval()
    nll, targets = t.token_nll(model, "valid")
    hand_nll, hand_targets = [], []
    with torch.no_grad():
        for doc in t.split("valid"):
            logits = model(doc[:, None])[:, 0]
            hand_nll.append(F.cross_entropy(logits[: len(doc) - ahead], doc[ahead:], reduction="none"))
            hand_targets.append(doc[ahead:])
    hand_nll, hand_targets = torch.cat(hand_nll), torch.cat(hand_targets)
    assert torch.equal(targets.sort().values, hand_targets.sort().values)
    torch.testing.assert_close(nll.sort().values, hand_nll.sort().values, atol=1e-5, rtol=1e-5)
    counts = t.vocab.counts.double() + 1
    unigram = math.exp(-(counts[hand_targets] / counts.sum()).log().mean().item())
    scores = t.evaluate(model, "valid")
    assert scores["unigram_ppl"] == pytest.approx(unigram, rel=1e-12)
    # seed 004's formula, c_w / sum_v c_v, over the targets seen in training (<unk> among them here)
    seen, mle = _seed_unigram(t.vocab.counts.tolist(), hand_targets.tolist())
    assert scores["unigram_seen_ppl"] == pytest.approx(mle, rel=1e-12)
    assert scores["unseen_targets"] == pytest.approx(1 - len(seen) / len(hand_targets), abs=1e-15)


def _seed_unigram(train_counts: list, targets: list) -> tuple[list, float]:
    """The targets seen in training and seed 004's unigram perplexity over them, by hand."""
    seen = [w for w in targets if train_counts[w] > 0]
    return seen, math.exp(-sum(math.log(train_counts[w] / sum(train_counts)) for w in seen) / len(seen))


def test_seed_unigram_leaves_out_the_targets_unseen_in_training():
    """unigram_seen_ppl skips a target whose training count is 0 (a word of the vocabulary that
    --vocab-from all keeps but train lacks) and counts the fraction it skipped."""
    t = task()
    target = int(t.split("valid")[0][1])
    t.vocab.counts = t.vocab.counts.clone().index_fill_(0, torch.tensor([target]), 0)
    model = t.build_model().eval()
    scores = t.evaluate(model, "valid")
    targets = t.token_nll(model, "valid")[1].tolist()
    seen, mle = _seed_unigram(t.vocab.counts.tolist(), targets)
    assert 0 < len(seen) < len(targets) and target not in seen
    assert scores["unseen_targets"] == pytest.approx(1 - len(seen) / len(targets))
    assert scores["unigram_seen_ppl"] == pytest.approx(mle, rel=1e-12)


def test_rare_words_drop_removes_the_unk_tokens_and_is_recorded():
    """--rare-words drop: the task's documents hold no <unk>, its count is 0, and the config records
    it (a checkpoint of the other text is another run); unk, the default, keeps the old config."""
    kept, dropped = task(), task(rare_words="drop")
    unk = kept.vocab.unk_id
    assert any(int((doc == unk).sum()) for doc in kept.split("train"))
    assert not any(int((doc == unk).sum()) for split in ("train", "valid", "test") for doc in dropped.split(split))
    assert int(dropped.vocab.counts[unk]) == 0 and dropped.vocab.itos == kept.vocab.itos
    assert dropped.config() == {**kept.config(), "rare_words": "drop"} and "rare_words" not in kept.config()
    assert dropped.vocab_state() != kept.vocab_state()  # so a resume on the other text is refused


def test_ahead_beyond_every_document_is_one_clear_error():
    t = task(ahead=10**5)
    with pytest.raises(ValueError, match="--ahead 100000 leaves the train split no target"):
        t.train_batches(0, 0, 1)


def test_defaults_keep_the_batches_and_config_of_before():
    t = task()
    for got, want in zip(t.train_batches(0, 0, 1),
                         data.document_batches(t.split("train"), t.args.batch_size, t.args.bptt), strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert "ahead" not in t.config() and "drop_taus" not in t.config()
    assert task(2, "0").config() == {**t.config(), "ahead": 2, "drop_taus": "0"}


# --------------------------------------------------------------------------------------------
# --drop-taus (Experiment 4)
# --------------------------------------------------------------------------------------------
def inputs(steps=30, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(steps, batch, D, generator=g, dtype=torch.float64), torch.rand(steps, batch, generator=g) < 0.1


@pytest.mark.parametrize("drop", [(0,), (0, 1), (0, 1, 2, 3), (3, 1)])
def test_dropped_context_is_the_full_context_without_those_slots(drop):
    u, reset = inputs()
    keep = [i for i in range(5) if i not in drop]
    full, dropped = TILTContext(5), TILTContext(5, drop=drop)
    assert dropped.slots == len(keep) and full.slots == 5
    assert torch.equal(dropped(u, reset), full(u, reset)[:, :, keep])
    assert torch.equal(dropped.kernels(40), full.kernels(40)[keep])
    assert torch.equal(dropped.tau_star, full.tau_star[keep])


def test_default_context_is_every_sixth_tau_of_its_tilt():
    """drop=() reads TILT's fine grid as before: slots every-th τ*, the first n of them."""
    u, reset = inputs(seed=1)
    context = TILTContext(5)
    y, _ = context.tilt(u, reset=reset)
    assert torch.equal(context(u, reset), y[:, :, ::6][:, :, :5])


def plain_forward(model, tokens, keep):
    """The MLP by hand: embed, TILT, keep the slots, concatenate, tanh hidden layer, output."""
    y, _ = model.context.tilt(model.embedding(tokens))
    x = y[:, :, [model.context.every * i for i in keep]].flatten(2)
    return model.output(torch.tanh(model.hidden(x)))


@pytest.mark.parametrize("drop", [(), (0, 1)])
def test_mlp_reads_the_kept_slots_only(drop):
    """The hidden layer has (n - dropped) D inputs, and its input is the full context without the
    dropped slots; without drop the model (weights drawn from the same seed, outputs) is that of before."""
    tokens = torch.randint(V, (25, 3), generator=torch.Generator().manual_seed(2))
    keep = [i for i in range(5) if i not in drop]
    torch.manual_seed(0)
    model = MLPLM(V, D, H, context="tilt", n=5, context_kwargs={"drop": drop} if drop else None)
    assert model.hidden.in_features == len(keep) * D
    seen = []
    model.hidden.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    with torch.no_grad():
        logits = model(tokens)
        full = TILTContext(5)(model.embedding(tokens))
        assert torch.equal(seen[0], full[:, :, keep].flatten(2))
        assert torch.equal(logits, plain_forward(model, tokens, keep))
    if not drop:
        torch.manual_seed(0)
        before = MLPLM(V, D, H, context="tilt", n=5)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), before.state_dict().values()))


def test_dropped_slots_keep_the_model_causal():
    """Changing the words after step t leaves the logits of steps <= t as they were."""
    model = MLPLM(V, D, H, context="tilt", n=5, context_kwargs={"drop": (0, 2)}).eval()
    tokens = torch.randint(V, (20, 2), generator=torch.Generator().manual_seed(3))
    later = tokens.clone()
    later[11:] = (later[11:] + 1) % V
    with torch.no_grad():
        assert torch.equal(model(tokens)[:11], model(later)[:11])
        assert not torch.equal(model(tokens)[11:], model(later)[11:])


@pytest.mark.parametrize("drop,error,match", [
    ((5,), ValueError, r"drop\[0\] must be in \[0, 5\)"), ((0, 0), ValueError, "names a slot twice"),
    ((0, 1, 2, 3, 4), ValueError, "removes all 5 slots"), ("0", TypeError, "sequence of slot indices"),
    ((1.0,), TypeError, "must be an int")])
def test_bad_drop_is_refused(drop, error, match):
    with pytest.raises(error, match=match):
        TILTContext(5, drop=drop)


# --------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["--ahead", "0"], "--ahead must be >= 1, got 0"),
    (["--drop-taus", "0,1,2"], "--drop-taus 0,1,2 drops all 3 slots of --n 3; keep at least one"),
    (["--drop-taus", "3"], "--drop-taus 3: slot 3 is outside 0..2 (--n 3)"),
    (["--drop-taus", "1,1"], "--drop-taus 1,1 names a slot twice"),
    (["--drop-taus", "-1"], "--drop-taus expects comma-separated slot indices in 0..2, e.g. 0,1 (got '-1')"),
    (["--drop-taus", "0", "--context", "buffer"], "--context buffer has no τ* to drop"),
    (["--drop-taus", "0", "--context", "tilt-buffer"], "--context tilt-buffer has no τ* to drop"),
    (["--drop-taus", "5", "--n", "5"], "slot 5 is outside 0..4 (--n 5)"),
    (["--ahead", "2", "--task", "lm"], "--ahead is an option of --task mlp-lm, not of --task lm"),
    (["--drop-taus", "0", "--task", "averaging-lm"], "--drop-taus is an option of --task mlp-lm"),
    (["--rare-words", "drop", "--task", "lm"], "--rare-words is an option of --task mlp-lm, not of --task lm"),
])
def test_bad_values_are_one_line_before_anything_runs(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.setattr(commands, "train", lambda args: pytest.fail("train ran despite a bad value"))
    other_task = "--task" in argv  # the last --task counts; --n, an option of mlp-lm, would be refused first
    argv = ["train", "--task", "mlp-lm", *([] if other_task else ["--n", "3"]), "--out", str(tmp_path / "run"), *argv]
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tsrnn train: error: ") and message in lines[0], lines


def test_recipe_n_bounds_the_dropped_slots(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(commands, "train", lambda args: pytest.fail("train ran despite a bad value"))
    assert cli.main(["train", "--recipe", "seed004", "--drop-taus", "0,1,2,3,4", "--out", str(tmp_path / "r")]) == 2
    assert "drops all 5 slots of --n 5" in capsys.readouterr().err


TINY = ["--task", "mlp-lm", "--emsize", "8", "--nhid", "16", "--batch-size", "4", "--bptt", "16", "--n", "3",
        "--max-steps", "2", "--quiet"]


def test_train_and_eval_ahead_and_dropped_taus(tmp_path, capsys):
    """Two steps with --ahead 2 --drop-taus 1,0: the checkpoint records both (sorted), holds a
    one-slot MLP, and eval and resume rebuild that model."""
    run = tmp_path / "run"
    assert cli.main(["train", *TINY, "--out", str(run), "--ahead", "2", "--drop-taus", "1,0"]) == 0
    state = checkpoint.load(run / "last.pt")
    assert state["config"]["ahead"] == 2 and state["config"]["drop_taus"] == "0,1"
    assert state["model"]["hidden.weight"].shape == (16, 8)
    capsys.readouterr()
    assert cli.main(["eval", str(run / "last.pt"), "--resamples", "20"]) == 0
    assert "test perplexity" in capsys.readouterr().out
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", "3", "--quiet"]) == 0
    assert checkpoint.load(run / "last.pt")["progress"]["step"] == 3


@pytest.mark.parametrize("option", [["--ahead", "3"], ["--drop-taus", "0"]])
def test_each_option_trains_two_steps(tmp_path, option):
    assert cli.main(["train", *TINY, "--out", str(tmp_path / "run"), *option]) == 0
    assert checkpoint.load(tmp_path / "run" / "last.pt")["progress"]["step"] == 2


def test_a_checkpoint_older_than_rare_words_resumes_as_it_was_trained(tmp_path, capsys):
    """A seed004 run saved before --rare-words existed (its args lack it; it trained on <unk> text)
    goes on with <unk>, not the recipe's drop; given unk it goes on, given drop it is another run."""
    run = tmp_path / "run"
    assert cli.main(["train", "--recipe", "seed004", *TINY, "--rare-words", "unk", "--out", str(run)]) == 0
    state = checkpoint.load(run / "last.pt")
    assert state["args"]["rare_words"] == "unk" and "rare_words" not in state["config"]
    old = {key: value for key, value in state.items() if key not in ("format", "tsrnn_version", "checksum")}
    del old["args"]["rare_words"]
    checkpoint.save(run / "old.pt", old)
    resumed = ["train", "--resume", str(run / "old.pt"), "--quiet"]
    assert cli.main([*resumed, "--max-steps", "3"]) == 0
    assert checkpoint.load(run / "last.pt")["args"]["rare_words"] == "unk"
    assert cli.main([*resumed, "--max-steps", "3", "--rare-words", "unk"]) == 0
    capsys.readouterr()
    assert cli.main([*resumed, "--max-steps", "3", "--rare-words", "drop"]) == 2
    assert "holds another model" in capsys.readouterr().err
    assert cli.main(["train", "--recipe", "seed004", *TINY, "--out", str(tmp_path / "new")]) == 0
    assert checkpoint.load(tmp_path / "new" / "last.pt")["config"]["rare_words"] == "drop"  # the recipe's, fresh
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "new" / "last.pt"), "--resamples", "20"]) == 0  # restored on its text
    assert "test perplexity" in capsys.readouterr().out
