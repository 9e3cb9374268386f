"""A power-law forget-gate LSTM (pLSTM) classifying irregularly sampled sine waves of different lengths.

Chien et al. (2021) make each unit's forget gate a power law of the time since its last reset,
f_t = ((a_{t-1} + Δt + 1) / (a_{t-1} + 1 + ε))^(-p) for a unit not reset (r = 0, age a), with a
learned decay exponent p per unit; the step length Δt enters the gate, so samples taken at
irregular times need no resampling. tsrnn.PowerLawLSTM takes Δt as ``dt=`` and the length of each
padded sequence as ``lengths=``: no step runs past a sequence's end, and h_n holds each
sequence's state after its own last sample.

The task: a sine wave sampled at 20 to 100 random times is fast (period 3 to 6) or slow (period
12 to 24); the model sees only the sampled values and their Δt. It prints the test accuracy.

    python examples/plstm_irregular_series.py          # 1000 steps: 10-20 s on 2 CPU cores
    python examples/plstm_irregular_series.py --toy    # a few seconds, end to end
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

import tsrnn

PERIODS = {0: (8.0, 16.0), 1: (4.0, 8.0)}    # label: range of the period (slow, fast)
MIN_SAMPLES, MAX_SAMPLES = 20, 100


def sine_waves(batch_size, generator):
    """x, dt (T, B) padded with 0 and 1 past each sequence's end, lengths (B,), labels (B,).

    Sequence b has lengths[b] samples at sorted uniform times in [0, lengths[b]) (one sample per
    time unit on average), of sin(2π t / period + phase); dt is the gap to the previous sample
    (the first sample's: 1)."""
    def uniform(low, high, *shape):
        return low + (high - low) * torch.rand(*shape, generator=generator)

    labels = torch.randint(0, 2, (batch_size,), generator=generator)
    lengths = torch.randint(MIN_SAMPLES, MAX_SAMPLES + 1, (batch_size,), generator=generator)
    low = torch.tensor([PERIODS[int(y)][0] for y in labels])
    high = torch.tensor([PERIODS[int(y)][1] for y in labels])
    period = uniform(low, high, batch_size)
    steps = int(lengths.max())
    inside = torch.arange(steps)[:, None] < lengths                       # (T, B)
    times = torch.where(inside, uniform(0, 1, steps, batch_size), 2.0).sort(dim=0).values * lengths
    x = torch.sin(2 * math.pi * times / period + uniform(0, 2 * math.pi, batch_size))
    dt = torch.cat([torch.ones(1, batch_size), times.diff(dim=0)]).clamp(min=1e-3)
    return torch.where(inside, x, 0.0), torch.where(inside, dt, 1.0), lengths, labels


class Classifier(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.rnn = tsrnn.PowerLawLSTM(1, hidden_size)
        self.output = nn.Linear(hidden_size, 2)

    def forward(self, x, dt, lengths):
        _, (h_n, _, _) = self.rnn(x.unsqueeze(-1), dt=dt, lengths=lengths)  # (h, c, age) after each last sample
        return self.output(h_n[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="tiny model, a few steps: checks the script runs")
    parser.add_argument("--steps", type=int, default=1000, help="training steps (batches of 32 fresh sequences)")
    parser.add_argument("--size", type=int, default=64, help="hidden units")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    data = torch.Generator().manual_seed(args.seed)
    steps, size = (5, 4) if args.toy else (args.steps, args.size)

    model = Classifier(size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = time.time()
    for step in range(1, steps + 1):
        x, dt, lengths, labels = sine_waves(32, data)
        loss = F.cross_entropy(model(x, dt, lengths), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % max(1, steps // 5) == 0:
            print(f"step {step:4d}  train loss {loss.item():.3f}  ({time.time() - start:.0f} s)")

    with torch.no_grad():
        x, dt, lengths, labels = sine_waves(1000, data)
        accuracy = (model(x, dt, lengths).argmax(-1) == labels).float().mean().item()
    p = model.rnn.p(0)
    print(f"decay exponents p: {p.min():.2f} to {p.max():.2f}")
    print(f"test accuracy {accuracy:.1%} (chance: 50%)")
    if args.toy:
        print("toy run: checks that the script runs end to end; it trains too briefly to beat chance")
    elif accuracy < 0.8:
        raise SystemExit("the pLSTM did not learn the task")


if __name__ == "__main__":
    main()
