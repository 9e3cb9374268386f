"""The large GEMMs of one layer's forward+backward on CPU: the C++ engine's blocked GEMM
(csrc/gemm/blocked_gemm.h) against ATen's (MKL on x86 builds of torch), measured in pairs.

    python bench/cpu_gemms.py [--rounds 25] [--threads 2] [--shapes T,B,H ...]

For each shape (by default bench/cpu_vs_torch.py's "engine" set; H = I, four gates), float32, the
median ms over rounds of, alternately, the engine's op and ATen's calls that compute the same:
- projection: xg = x W_ih^T + b (``cpu_projection``; ATen: addmm);
- dx = dz W_ih (``cpu_projection_backward`` for dx; ATen: mm);
- dW_ih and db = dz^T x and the column sums of dz (the same op for dW and db in one pass; ATen:
  mm and sum);
- dW_hh = dz^T h_prev (``cpu_gemm``, blocked, over all T B rows in one call: the recurrence's
  backward makes two, h0's rows first; ATen: mm).
Each engine result is first checked against ATen's. GFLOP/s counts 2 (T B) (4 H) H per GEMM.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import tsrnn  # noqa: F401  (loads the compiled kernels)
from cpu_vs_torch import SETS, cpu_name, shape


def pairs(T: int, B: int, H: int) -> dict[str, tuple]:
    """{name: (engine call, ATen call)} for one layer's large GEMMs at (T, B, H)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(T * B, H, generator=g), torch.randn(4 * H, H, generator=g) / H**0.5
    bias, dz = torch.randn(4 * H, generator=g), torch.randn(T * B, 4 * H, generator=g)
    h_prev = torch.randn(T * B, H, generator=g)
    project, backward = torch.ops.tsrnn.cpu_projection, torch.ops.tsrnn.cpu_projection_backward
    kernel = torch.ops.tsrnn.cpu_gemm_in_use()
    if kernel == "aten":
        raise SystemExit("TSRNN_CPU_GEMM=aten or no panel kernel on this CPU: the engine runs ATen's GEMMs")
    return {
        "projection": (lambda: project(x, w, bias), lambda: torch.addmm(bias, x, w.t())),
        "dx": (lambda: backward(dz, x, w, [True, False, False])[0], lambda: dz.mm(w)),
        "dW_ih + db": (lambda: backward(dz, x, w, [False, True, True])[1:], lambda: (dz.t().mm(x), dz.sum(0))),
        "dW_hh": (lambda: torch.ops.tsrnn.cpu_gemm(dz.t(), h_prev, kernel, True)[0], lambda: dz.t().mm(h_prev)),
    }


def check(ours, theirs, name: str, depth: int) -> None:
    """Each result within depth * 2^-22 * max|ATen's| of ATen's: two float32 sums of ``depth``
    terms differ by rounding within about that (the terms are O(1) and of mixed signs)."""
    ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
    for a, b in zip(ours, theirs):
        bound = depth * 2.0**-22 * max(1.0, b.abs().max().item())
        torch.testing.assert_close(a, b, rtol=0, atol=bound, msg=lambda m: f"{name}: {m}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--shapes", nargs="+", type=shape, metavar="T,B,H", default=SETS["engine"][0])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {cpu_name()}, kernel {torch.ops.tsrnn.cpu_gemm_in_use()}, {args.threads} threads, "
          f"{args.rounds} rounds; median ms (GFLOP/s), engine vs ATen")
    for T, B, H in args.shapes:
        flop = 2 * T * B * 4 * H * H
        print(f"T={T} B={B} H={H}")
        for name, (ours, theirs) in pairs(T, B, H).items():
            check(ours(), theirs(), name, T * B if name.startswith("dW") else 4 * H if name == "dx" else H)
            times = {"engine": [], "ATen": []}
            for _ in range(args.rounds):
                for side, fn in (("engine", ours), ("ATen", theirs)):
                    start = time.perf_counter()
                    fn()
                    times[side].append(time.perf_counter() - start)
            ms = {side: statistics.median(t) * 1e3 for side, t in times.items()}
            print(f"  {name:12s} engine {ms['engine']:8.2f} ({flop / ms['engine'] / 1e6:4.0f})   "
                  f"ATen {ms['ATen']:8.2f} ({flop / ms['ATen'] / 1e6:4.0f})   ratio {ms['engine'] / ms['ATen']:.3f}")


if __name__ == "__main__":
    main()
