"""A next-word MLP whose context is TILT's compressed memory of the past words, not the last n words.

Jacques & Sederberg (seed 004) feed Bengio's MLP language model n slots of TILT instead of the last
n word embeddings: leaky integrators F_t(s) = e^{-s} F_{t-1}(s) + β(s) u_t of the embeddings u at
many rates s, read out by Post's inverse Laplace transform f~_t(τ*) ∝ s^{k+1} ∂^k F_t / ∂s^k at
s = k/τ*, so that slot i is a smooth receptive field over the past that peaks about τ*_i words
back (τ* = 1, 1.8, 3.1, 5.6, 9.8 for n = 5): the same n slots reach further back, more coarsely.
``tsrnn.TILTContext(n)`` maps (T, B, D) embeddings to (T, B, n, D) slots and carries its
integrators from one window of a stream to the next (``state=``, ``return_state=True``);
``--context buffer`` runs the plain last-n-words buffer (``tsrnn.BufferContext``) instead.

It trains on the tiny-shakespeare excerpt shipped in the package and prints the training loss
and the validation perplexity, with a unigram model's for comparison.

    python examples/tilt_next_word.py          # 1000 steps: 10-20 s on 2 CPU cores
    python examples/tilt_next_word.py --toy    # a few seconds, end to end
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

import tsrnn
from tsrnn.lab.data import batchify, bptt_batches, default_corpus

CONTEXTS = {"tilt": tsrnn.TILTContext, "buffer": tsrnn.BufferContext}


class ContextMLP(nn.Module):
    """logits_t = U tanh(d + H [slot_0(t); ...; slot_{n-1}(t)]) + b (Bengio et al., 2003)."""

    def __init__(self, vocab_size, context="tilt", n=5, embedding_size=30, hidden_size=100):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.context = CONTEXTS[context](n)
        self.hidden = nn.Linear(n * embedding_size, hidden_size)
        self.output = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens, state):
        u = self.embedding(tokens)                                           # (T, B, D)
        slots, state = self.context(u, state=state, return_state=True)      # (T, B, n, D)
        return self.output(torch.tanh(self.hidden(slots.flatten(2)))), state


@torch.no_grad()
def perplexity(model, stream, bptt):
    state, total, count = None, 0.0, 0
    for x, y in bptt_batches(stream, bptt):
        logits, state = model(x, state)
        total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    return math.exp(total / count)


def unigram_perplexity(counts, ids):
    """The perplexity of ``ids`` under the training split's word frequencies."""
    log_p = (counts.double() / counts.sum()).log()
    return math.exp(-log_p[ids].mean().item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="a few steps: checks the script runs")
    parser.add_argument("--steps", type=int, default=1000, help="training steps (windows of --bptt words)")
    parser.add_argument("--context", choices=sorted(CONTEXTS), default="tilt")
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    steps = 4 if args.toy else args.steps

    corpus = default_corpus()                              # word ids of train / valid / test
    train = batchify(corpus.train, 20)                     # (N, 20): 20 contiguous streams
    valid = batchify(corpus.valid[:500] if args.toy else corpus.valid, 10)
    model = ContextMLP(len(corpus.vocab), args.context)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    if args.context == "tilt":
        peaks = ", ".join(f"{t:.1f}" for t in model.context.tau_star.tolist())
        print(f"TILT's slots peak about tau* = {peaks} words back")

    start, step, state = time.time(), 0, None
    while step < steps:
        for x, y in bptt_batches(train, args.bptt):      # the context's state carries, detached
            logits, state = model(x, state)
            state = state.detach()
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % max(1, steps // 5) == 0 or step == steps:
                print(f"step {step:4d}  train loss {loss.item():.3f}  ({time.time() - start:.0f} s)")
            if step == steps:
                break

    ppl, unigram = perplexity(model, valid, args.bptt), unigram_perplexity(corpus.vocab.counts, valid[1:])
    print(f"validation perplexity {ppl:.1f} (unigram model: {unigram:.1f})")
    if args.toy:
        print("toy run: checks that the script runs end to end; it trains too briefly to beat the unigram model")
    elif ppl >= unigram:
        raise SystemExit("the MLP did not beat the unigram model")


if __name__ == "__main__":
    main()
