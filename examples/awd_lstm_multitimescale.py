"""A multi-timescale AWD-LSTM language model: torch.nn.LSTM swapped for tsrnn.LSTM.

Mahto et al. (ICLR 2021) fix the forget and input gate biases of each LSTM unit j by a timescale
T_j, b_f = -log(exp(1/T_j) - 1) and b_i = -b_f, so that the unit's forget gate starts at
exp(-1/T_j) and its memory decays as exp(-t/T_j); with the T_j drawn from an inverse-gamma law,
the mixture of these decays is a power law, as the dependencies of natural language are. Here
layer 1 has T = 3 and 4, layer 2 inverse-gamma quantiles and layer 3 learned biases, in an
AWD-LSTM (Merity et al., 2018: weight drop on W_hh, locked and embedding dropout, tied weights).
The model is the usual one with one line changed:

    rnn = torch.nn.LSTM(n_in, n_out)                              # before
    rnn = tsrnn.LSTM(n_in, n_out, timescales=[layer_timescales])  # after (None: learned biases)

It trains on the tiny-shakespeare excerpt shipped in the package and prints the training loss
and the validation perplexity, with a unigram model's for comparison.

    python examples/awd_lstm_multitimescale.py          # 880 steps: about a minute on 2 CPU cores
    python examples/awd_lstm_multitimescale.py --toy    # a few seconds, end to end
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

import tsrnn
from tsrnn.lab.data import batchify, bptt_batches, default_corpus
from tsrnn.lab.models import embedded_dropout, locked_dropout
from tsrnn.memory.timescales import lm_timescales


class MultiTimescaleAWDLSTM(nn.Module):
    """Embedding, one single-layer LSTM per layer, tied decoder; AWD-LSTM's dropouts."""

    def __init__(self, vocab_size, sizes, wdrop=0.2, dropout=0.2, dropouth=0.1, dropouti=0.2, dropoute=0.05):
        super().__init__()
        inputs = (sizes[-1],) + sizes[:-1]                 # the embedding has the last layer's size (tied)
        timescales = lm_timescales(sizes, alpha=0.56)      # [T = 3|4, inverse-gamma quantiles, None, ...]
        self.encoder = nn.Embedding(vocab_size, sizes[-1])
        self.rnns = nn.ModuleList(
            tsrnn.LSTM(n_in, n_out, timescales=[ts])           # was: torch.nn.LSTM(n_in, n_out)
            for n_in, n_out, ts in zip(inputs, sizes, timescales))
        self.decoder = nn.Linear(sizes[-1], vocab_size)
        self.decoder.weight = self.encoder.weight
        self.wdrop, self.dropoute, self.dropouti = wdrop, dropoute, dropouti
        self.dropouth, self.dropout = dropouth, dropout

    def run_layer(self, rnn, x, state):
        """Weight drop: the layer runs once with a dropped copy of its W_hh; the gradient reaches the raw one."""
        if not self.training or not self.wdrop:
            return rnn(x, state)
        dropped = F.dropout(rnn.weight_hh_l0, self.wdrop)
        return torch.func.functional_call(rnn, {"weight_hh_l0": dropped}, (x, state))

    def forward(self, tokens, states):
        x = embedded_dropout(self.encoder.weight, tokens, self.dropoute, self.training)
        x = locked_dropout(x, self.dropouti, self.training)
        new_states = []
        for k, rnn in enumerate(self.rnns):
            x, state = self.run_layer(rnn, x, states[k])
            new_states.append(state)
            last = k == len(self.rnns) - 1
            x = locked_dropout(x, self.dropout if last else self.dropouth, self.training)
        return self.decoder(x), new_states


def detach(states):
    return [tuple(s.detach() for s in state) for state in states]


@torch.no_grad()
def perplexity(model, stream, bptt):
    model.eval()
    states, total, count = [None] * len(model.rnns), 0.0, 0
    for x, y in bptt_batches(stream, bptt):
        logits, states = model(x, states)
        total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    return math.exp(total / count)


def unigram_perplexity(counts, ids):
    """The perplexity of ``ids`` under the training split's word frequencies."""
    log_p = (counts.double() / counts.sum()).log()
    return math.exp(-log_p[ids].mean().item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny model, a few steps: checks the script runs")
    parser.add_argument("--steps", type=int, default=880, help="training steps (windows of --bptt words)")
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    sizes, steps = ((16, 16, 8), 4) if args.toy else ((128, 128, 64), args.steps)

    corpus = default_corpus()                              # word ids of train / valid / test
    train = batchify(corpus.train, 20)                     # (N, 20): 20 contiguous streams
    valid = batchify(corpus.valid[:500] if args.toy else corpus.valid, 10)
    model = MultiTimescaleAWDLSTM(len(corpus.vocab), sizes)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    print(f"vocabulary {len(corpus.vocab)} words; layer 2's timescales {model.rnns[1].timescales(0).min():.2f} "
          f"to {model.rnns[1].timescales(0).max():.0f} steps")

    start, step, states = time.time(), 0, [None] * len(sizes)
    while step < steps:
        for x, y in bptt_batches(train, args.bptt):      # truncated BPTT: the state carries, detached
            logits, states = model(x, states)
            states = detach(states)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
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
        raise SystemExit("the LSTM did not beat the unigram model")


if __name__ == "__main__":
    main()
