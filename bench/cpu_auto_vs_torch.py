"""tsrnn.LSTM ``backend="auto"`` against torch.nn.LSTM on CPU, forward+backward, measured in pairs.

    python bench/cpu_auto_vs_torch.py [--rounds 60] [--threads 2]

This machine's timings drift by tens of percent within minutes, so the two modules are timed
alternately (one fwd+bwd of each per round) and the ratio is taken per round: drift then hits
both sides of a ratio alike. Prints, per shape, the median time of each and the median and
interquartile range of the per-round ratios. Each pair is checked to compute the same thing
first (the MTS LSTM against a torch.nn.LSTM loaded with its effective biases).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import tsrnn

SHAPES = [(70, 20, 64), (70, 20, 256), (70, 20, 512)]  # (T, B, H = I)


def pair(kind: str, hidden: int):
    """(tsrnn module on auto, torch.nn.LSTM computing the same function)."""
    torch.manual_seed(0)
    timescales = [tsrnn.timescales.inverse_gamma_quantiles(hidden, 0.56)] if kind == "mts-lstm" else None
    ours = tsrnn.LSTM(hidden, hidden, timescales=timescales)
    theirs = torch.nn.LSTM(hidden, hidden)
    theirs.load_state_dict(ours.state_dict(), strict=False)  # b_ih + b_hh = the effective bias
    return ours, theirs


def step(module, x):
    module(x)[0].sum().backward()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds; fwd+bwd ms, ratio = tsrnn / torch")
    for kind in ("lstm", "mts-lstm"):
        for T, B, H in SHAPES:
            ours, theirs = pair(kind, H)
            x = torch.randn(T, B, H)
            with torch.no_grad():
                err = (ours(x)[0] - theirs(x)[0]).abs().max().item()
            assert err < 1e-4, f"{kind} H={H}: tsrnn and torch.nn.LSTM differ by {err:.2e}"
            for _ in range(3):  # warm-up; the first call of auto measures its paths
                step(ours, x), step(theirs, x)
            mine, torchs = [], []
            for _ in range(args.rounds):
                for module, times in ((ours, mine), (theirs, torchs)):
                    start = time.perf_counter()
                    step(module, x)
                    times.append((time.perf_counter() - start) * 1e3)
            ratios = sorted(a / b for a, b in zip(mine, torchs))
            q = len(ratios) // 4
            chosen = sorted(set(tsrnn.backend.tuned_choices().values()))
            print(f"{kind:<9} T={T} B={B} H={H:<4} tsrnn auto {statistics.median(mine):7.2f}  torch.nn.LSTM "
                  f"{statistics.median(torchs):7.2f}  ratio median {statistics.median(ratios):.3f} "
                  f"(IQR {ratios[q]:.3f}-{ratios[-q - 1]:.3f})  auto chose {chosen}")
            tsrnn.backend._tuned.clear()


if __name__ == "__main__":
    main()
