"""The seed-004 contexts and MLP LM read a stream in windows with their state carried: every split of
a stream into windows gives the output of the whole stream at once (float64, tight), resets clear the
carried state, and the mlp-lm task scores and trains with the context of the whole document whatever
its --bptt."""
import argparse

import pytest
import torch

from tsrnn.lab import cli
from tsrnn.memory.contexts import BufferContext, TILTBufferContext, TILTContext
from tsrnn.lab.models import MLPLM
from tsrnn.lab.training import checkpoint
from tsrnn.lab.training.tasks import TASKS
from conftest import assert_close

T, B, D = 23, 3, 2
TIGHT = {"atol": 1e-12, "rtol": 1e-10}
CONTEXTS = {
    "buffer": lambda **kw: BufferContext(4, **kw),
    "tilt": lambda **kw: TILTContext(4, **kw),
    "tilt-buffer": lambda **kw: TILTBufferContext(4, **kw),
    "tilt-drop": lambda **kw: TILTContext(4, drop=(0, 2), **kw),
}


def inputs(seed=0, steps=T):
    """A float64 stream (T, B, D) with document starts at random steps (and none in column 0)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(steps, B, D, generator=g, dtype=torch.float64)
    reset = torch.rand(steps, B, generator=g) < 0.15
    reset[:, 0] = False
    return u, reset


def windowed(run, steps, size):
    """Outputs of ``run(lo, hi, state)`` over windows of ``size`` steps, concatenated, and the last state."""
    outs, state = [], None
    for lo in range(0, steps, size):
        out, state = run(lo, min(lo + size, steps), state)
        outs.append(out)
    return torch.cat(outs), state


def flat(state):
    return torch.cat([s.reshape(-1) for s in state]) if isinstance(state, tuple) else state.reshape(-1)


@pytest.mark.parametrize("kind", CONTEXTS)
@pytest.mark.parametrize("size", [1, 3, 5, 7, T - 1, T])
def test_windows_with_carried_state_equal_the_whole_stream(kind, size):
    context = CONTEXTS[kind]()
    u, reset = inputs()
    whole, final = context(u, reset, return_state=True)
    assert torch.equal(whole, context(u, reset))  # the plain call is unchanged
    got, state = windowed(lambda lo, hi, s: context(u[lo:hi], reset[lo:hi], state=s, return_state=True), T, size)
    assert_close(got, whole, TIGHT, f"{kind} in windows of {size}")
    assert_close(flat(state), flat(final), TIGHT, f"{kind} final state")


@pytest.mark.parametrize("kind", CONTEXTS)
def test_batch_first_carries_the_same_state(kind):
    u, reset = inputs(seed=3)
    whole, first = CONTEXTS[kind]()(u, reset), CONTEXTS[kind](batch_first=True)

    def run(lo, hi, state):
        out, state = first(u[lo:hi].transpose(0, 1), reset[lo:hi].T, state=state, return_state=True)
        return out.transpose(0, 1), state

    assert_close(windowed(run, T, 4)[0], whole, TIGHT, kind)


@pytest.mark.parametrize("kind", CONTEXTS)
def test_a_reset_clears_the_carried_state(kind):
    """A window that starts a document in every column gives the same output from any state."""
    context = CONTEXTS[kind]()
    u, reset = inputs(seed=1)
    _, state = context(u, reset, return_state=True)
    v, restart = inputs(seed=2, steps=6)
    restart[0] = True
    assert_close(context(v, restart, state=state), context(v, restart), TIGHT, kind)
    fresh = context(v, state=state)  # no reset: the state is read
    assert not torch.allclose(fresh, context(v))


def test_buffer_state_is_the_last_inputs_newest_first_zero_before_a_reset():
    u = torch.arange(1.0, 6.0)[:, None, None].expand(5, 2, 1).clone()
    reset = torch.tensor([[0, 0], [0, 0], [0, 0], [0, 1], [0, 0]])
    _, state = BufferContext(4)(u, reset, return_state=True)
    assert torch.equal(state[:, :, 0], torch.tensor([[5.0, 4.0, 3.0], [5.0, 4.0, 0.0]]))


def test_bad_state_is_refused():
    u, _ = inputs()
    with pytest.raises(ValueError, match=r"state must have shape \(3, 3, 2\)"):
        BufferContext(4)(u, state=torch.zeros(3, 4, 2))
    with pytest.raises(TypeError, match="state must be the pair"):
        TILTBufferContext(4)(u, state=torch.zeros(3, 3, 2))


@pytest.mark.parametrize("kind", ["buffer", "tilt", "tilt-buffer"])
def test_mlp_lm_in_windows_equals_the_whole_stream(kind):
    torch.manual_seed(0)
    model = MLPLM(30, 4, 5, context=kind, n=4).double().eval()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(30, (T, B), generator=g)
    reset = torch.rand(T, B, generator=g) < 0.15
    whole = model(tokens, reset=reset)
    for size in (1, 3, 7):
        got, _ = windowed(lambda lo, hi, s: model(tokens[lo:hi], reset[lo:hi], state=s, return_state=True), T, size)
        assert_close(got, whole, TIGHT, f"{kind} in windows of {size}")


def test_carried_state_sends_no_gradient_once_detached():
    """Truncated BPTT: the second window's loss, from the detached state, reaches only its own words."""
    torch.manual_seed(0)
    model = MLPLM(30, 4, 5, context="tilt", n=3)
    tokens = torch.arange(20)[:, None] % 30
    _, state = model(tokens[:10], state=None, return_state=True)
    model(tokens[10:], state=state.detach()).sum().backward()
    grad = model.embedding.weight.grad
    assert grad[:10].abs().sum() == 0 and grad[10:20].abs().sum() > 0


def task(context, bptt, ahead=1, drop_taus=None):
    args = argparse.Namespace(data=None, level="word", ahead=ahead, drop_taus=drop_taus, context=context, n=3,
                              emsize=4, nhid="6", batch_size=4, bptt=bptt)
    return TASKS["mlp-lm"](args, torch.device("cpu"))


@pytest.mark.parametrize("context, ahead, drop", [("buffer", 1, None), ("tilt", 1, None), ("tilt-buffer", 1, None),
                                                  ("tilt", 3, "0")])
def test_token_nll_is_that_of_the_whole_stream_whatever_bptt(context, ahead, drop):
    """--bptt 7 scores every target as one window over the whole split does (the windows no longer
    restart the context)."""
    short, long = task(context, 7, ahead, drop), task(context, 128, ahead, drop)
    long.args.bptt, long.corpus = 10**6, short.corpus  # one window per split, over the same documents
    assert max(len(d) for d in short.split("valid")) > 7
    torch.manual_seed(0)
    model = short.build_model().double()
    for name in ("valid", "test"):
        nll, targets = short.token_nll(model, name)
        whole, whole_targets = long.token_nll(model, name)
        assert len(list(short._batches(name))) > 1 and len(list(long._batches(name))) == 1
        assert torch.equal(targets.sort().values, whole_targets.sort().values)
        assert_close(nll.sort().values, whole.sort().values, TIGHT, f"{context} {name}")


def test_train_loss_carries_the_context_across_windows():
    """The targets' summed training loss over the --bptt 7 windows, carry threaded, equals that of one window."""
    short, long = task("tilt", 7), task("tilt", 128)
    long.args.bptt, long.corpus = 10**6, short.corpus
    torch.manual_seed(0)
    model = short.build_model().double()
    carry, total, count = None, 0.0, 0
    for batch in short.train_batches(0, 0, 1):
        loss, carry, n = short.train_loss(model, batch, carry)
        total, count = total + loss.item() * n, count + n
    (batch,) = long.train_batches(0, 0, 1)
    loss, _, n = long.train_loss(model, batch, None)
    assert count == n and total == pytest.approx(loss.item() * n, rel=1e-10)


TINY = ["train", "--task", "mlp-lm", "--emsize", "8", "--nhid", "16", "--batch-size", "4", "--bptt", "8", "--n", "3",
        "--quiet"]


@pytest.mark.parametrize("context", ["buffer", "tilt-buffer"])
def test_two_steps_train_and_resume_with_the_carry(tmp_path, context):
    run = tmp_path / "run"
    assert cli.main([*TINY, "--context", context, "--max-steps", "2", "--out", str(run)]) == 0
    state = checkpoint.load(run / "last.pt")
    assert state["progress"]["step"] == 2 and state["carry"] is not None
    assert cli.main(["train", "--resume", str(run / "last.pt"), "--max-steps", "3", "--quiet"]) == 0
    assert checkpoint.load(run / "last.pt")["progress"]["step"] == 3
