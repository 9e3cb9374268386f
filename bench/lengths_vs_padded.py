"""Variable-length batches: fwd+bwd with ``lengths=`` against the same batch padded to T, per path.

    python bench/lengths_vs_padded.py [--rounds 15] [--device cpu] [--paths cpu onednn]

Lengths are drawn U(T/4, T) (the frequency task: U(15, 125), its own range) and the longest set to
T; "padded" runs all T steps of every row (the old way: one call without lengths), "lengths" the
same batch with ``lengths=`` (the fused paths run each step over the rows still active). The two
are timed alternately, one fwd+bwd each per round, and the ratio taken per round (this machine's
timings drift within minutes). Prints, per shape and path, the median times, the median speed-up
padded / lengths with its interquartile range, the fraction of real steps f = sum(lengths) / (T B),
and the speed-up's target 1 / (1.1 f): within 10% of the padded time times f.
bench/gpu_report.py runs ``measure`` on a GPU.
"""
from __future__ import annotations

import argparse
import statistics

import torch

import tsrnn
from tsrnn import testing
from tsrnn.lab import speed

# name: (T, B, I, H, shortest length)
SHAPES = {"T=200 B=64 I=H=256": (200, 64, 256, 256, 50), "frequency T=125 B=32 I=1 H=110": (125, 32, 1, 110, 15)}
CELLS = ("lstm", "plstm")


def batch(shape, device, seed=0):
    """(x (T, B, I), lengths (B,)) of one shape, lengths U(shortest, T) with the longest T."""
    T, B, I, _, shortest = shape
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(shortest, T + 1, (B,), generator=g)
    lengths[0] = T
    return torch.randn(T, B, I, generator=g).to(device), lengths


def module(cell, shape, path, device):
    torch.manual_seed(0)
    _, _, I, H, _ = shape
    make = tsrnn.LSTM if cell == "lstm" else tsrnn.PowerLawLSTM
    return make(I, H, backend=path).to(device)


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _step(m, x, lengths, device):
    m(x, lengths=lengths)[0].sum().backward()
    _sync(device)


def measure(device, paths, rounds, shapes=SHAPES, cells=CELLS) -> list[dict]:
    """One row per (shape, cell, path) that runs: median ms padded and with lengths, the median
    and quartiles of the per-round speed-up, and the fraction of real steps."""
    rows = []
    for name, shape in shapes.items():
        x, lengths = batch(shape, device)
        fraction = lengths.sum().item() / lengths.numel() / shape[0]
        for cell in cells:
            for path in paths:
                cell_name = "lstm" if cell == "lstm" else "plstm_coupled"
                if path != "auto" and testing.why_not(path, cell_name, shape[:4], torch.float32, device):
                    continue
                m = module(cell, shape, path, device)
                # interleaved rounds after two warm-up calls each ("auto" tunes each call key once)
                times = speed.time_rounds({"padded": lambda: _step(m, x, None, device),
                                           "lengths": lambda: _step(m, x, lengths, device)}, rounds)
                padded, packed = times["padded"], times["lengths"]
                speedups = sorted(a / b for a, b in zip(padded, packed))
                q = statistics.quantiles(speedups, n=4) if len(speedups) > 1 else speedups * 3
                rows.append({"shape": name, "cell": cell, "path": path, "padded_ms": statistics.median(padded),
                             "lengths_ms": statistics.median(packed), "speedup": statistics.median(speedups),
                             "speedup_q1": q[0], "speedup_q3": q[-1], "real_fraction": fraction,
                             "target": 1 / (1.1 * fraction)})
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--device", default="cpu")
    p.add_argument("--paths", nargs="+", default=["auto", *tsrnn.backend.paths_on("cpu", "recurrence")])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds, fwd+bwd float32")
    print("| shape | cell | path | padded ms | lengths ms | speed-up (IQR) | real steps f | target 1/(1.1 f) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in measure(args.device, args.paths, args.rounds):
        print(f"| {r['shape']} | {r['cell']} | {r['path']} | {r['padded_ms']:.1f} | {r['lengths_ms']:.1f} | "
              f"{r['speedup']:.2f} ({r['speedup_q1']:.2f}-{r['speedup_q3']:.2f}) | {r['real_fraction']:.3f} | "
              f"{r['target']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
