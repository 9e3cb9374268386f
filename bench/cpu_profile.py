"""Where the C++ engine's time goes in one layer's forward+backward on CPU, part by part.

    python bench/cpu_profile.py [--rounds 15] [--threads 2] [--cells lstm plstm_coupled] [--shapes T,B,H ...]

For each shape (by default bench/cpu_vs_torch.py's "engine" set; H = I) and cell, float32, the
median over rounds of:
- the input projection (one GEMM over all steps, xg = x W_ih^T + b, the engine's
  ``cpu_projection``);
- the forward operator, and inside its time loop, per thread: the per-step recurrent GEMM, the
  cell (pointwise math and the writes of states and saved activations) and the wait at the step's
  barrier (the OpenMP split's imbalance); "outside" is the rest (allocation, packing W_hh);
- the backward operator likewise (cell, wait, the per-step GEMM of dh), with dW_hh and the rest
  outside the loop, and dW_hh's GEMM (the engine's blocked GEMM, csrc/gemm/blocked_gemm.h) timed
  alone;
- the projection's backward (``cpu_projection_backward``: dx = dz W_ih, dW_ih = dz^T x with
  db = sum dz from the same pass);
- the whole tsrnn layer (module, backend="cpu") and torch.nn.LSTM, fwd+bwd.
The loop's phases come from the loops' own clocks (TSRNN_CPU_PROFILE=1, set here before tsrnn is
imported; csrc/recurrence/cpu/phase_clock.h). GFLOP/s counts 2 B G H K per step and GEMM.
Large outputs are fresh pages at every call under glibc's default malloc (above its 32 MB mmap
threshold): run once more with GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295 to see
the part page faults take (it applies to torch.nn.LSTM too).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["TSRNN_CPU_PROFILE"] = "1"  # before tsrnn loads its kernels

import torch  # noqa: E402

import tsrnn  # noqa: E402
from tsrnn.ops.recurrence import cells  # noqa: E402
from cpu_vs_torch import SETS, cpu_name, shape  # noqa: E402

SHAPES = SETS["engine"][0]

PHASES = ("fwd gemm", "fwd cell", "fwd wait", "bwd cell", "bwd wait", "bwd gemm")  # cpu_loop_profile's order


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def profile(cell_name: str, T: int, B: int, H: int, rounds: int) -> dict[str, float]:
    """Median ms per part over ``rounds`` of one layer's fwd+bwd (see the module docstring)."""
    cell = cells.CELLS[cell_name]
    G, S = cell.num_gates, len(cell.states)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T * B, H, generator=g)
    w_ih, w_hh = torch.randn(G * H, H, generator=g) / H**0.5, torch.randn(G * H, H, generator=g) / H**0.5
    bias = torch.randn(G * H, generator=g)
    h0, state0 = torch.zeros(B, H), torch.zeros(S, B, H)
    params = torch.rand(len(cell.params), H, generator=g) + 0.1 if cell.params != () else None
    constants = list(cell.defaults)
    forward, backward = torch.ops.tsrnn.recurrence_forward, torch.ops.tsrnn.recurrence_backward
    project, project_backward = torch.ops.tsrnn.cpu_projection, torch.ops.tsrnn.cpu_projection_backward
    xg = project(x, w_ih, bias).view(T, B, G * H)
    h_all, _, state_all, saved = forward(cell_name, xg, w_hh, h0, state0, params, None, constants, True, None)
    grad_h = torch.randn(T, B, H, generator=g)
    dz = torch.randn(T * B, G * H, generator=g)
    module = (tsrnn.PowerLawLSTM(H, H, input_gate=cell_name.split("_")[1], backend="cpu") if cell.params != ()
              else tsrnn.LSTM(H, H, backend="cpu"))
    theirs, x3 = torch.nn.LSTM(H, H), x.view(T, B, H).clone().requires_grad_()  # dx too, as in the parts

    h_prev, kernel = torch.cat([h0[None], h_all[:-1]]).view(T * B, H), torch.ops.tsrnn.cpu_gemm_in_use()

    def w_hh_grad():  # dz^T [h0, h_1 .. h_{T-1}] on the engine's GEMM, in one call (the op: two, h0's first)
        if kernel == "aten":
            return dz.t().mm(h_prev)
        return torch.ops.tsrnn.cpu_gemm(dz.t(), h_prev, kernel, True)

    parts = {
        "projection": lambda: project(x, w_ih, bias),
        "forward op": lambda: forward(cell_name, xg, w_hh, h0, state0, params, None, constants, True, None),
        "backward op": lambda: backward(cell_name, grad_h, None, w_hh, h0, state0, h_all, state_all, saved, params,
                                        None, constants, None),
        "dW_hh alone": w_hh_grad,
        "projection backward": lambda: project_backward(dz, x, w_ih, [True, True, True]),
        "tsrnn layer": lambda: module(x3)[0].sum().backward(),
        "torch.nn.LSTM": lambda: theirs(x3)[0].sum().backward(),
    }
    for fn in parts.values():  # warm-up
        fn()
    times = {name: [] for name in (*parts, *PHASES)}
    for _ in range(rounds):
        for name, fn in parts.items():
            torch.ops.tsrnn.cpu_loop_profile()  # reset
            times[name].append(timed(fn))
            if name in ("forward op", "backward op"):
                phases = torch.ops.tsrnn.cpu_loop_profile()
                for phase, seconds in zip(PHASES, phases):
                    if phase.startswith(name[0]):  # "f"wd, "b"wd
                        times[phase].append(seconds * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def report(cell_name, T, B, H, m) -> None:
    G = cells.CELLS[cell_name].num_gates
    step_flop = 2 * T * B * G * H * H / 1e9  # one pass of per-step GEMMs, GFLOP
    fwd_loop = m["fwd gemm"] + m["fwd cell"] + m["fwd wait"]
    bwd_loop = m["bwd gemm"] + m["bwd cell"] + m["bwd wait"]
    total = m["projection"] + m["forward op"] + m["backward op"] + m["projection backward"]
    print(f"{cell_name} T={T} B={B} H={H}: parts sum {total:.2f} ms, "
          f"tsrnn layer {m['tsrnn layer']:.2f} ms, torch.nn.LSTM {m['torch.nn.LSTM']:.2f} ms "
          f"(ratio {m['tsrnn layer'] / m['torch.nn.LSTM']:.3f})")
    rows = [
        ("input projection", m["projection"], f"{step_flop / m['projection'] * 1e3:.0f} GFLOP/s"),
        ("forward op", m["forward op"], ""),
        ("  per-step GEMM", m["fwd gemm"], f"{step_flop / m['fwd gemm'] * 1e3:.0f} GFLOP/s"),
        ("  cell", m["fwd cell"], f"{m['fwd cell'] / T * 1e3:.1f} us/step"),
        ("  barrier wait", m["fwd wait"], ""),
        ("  outside the loop", m["forward op"] - fwd_loop, "allocation, packing"),
        ("backward op", m["backward op"], ""),
        ("  cell", m["bwd cell"], f"{m['bwd cell'] / T * 1e3:.1f} us/step"),
        ("  barrier wait", m["bwd wait"], ""),
        ("  per-step GEMM", m["bwd gemm"], f"{step_flop / m['bwd gemm'] * 1e3:.0f} GFLOP/s"),
        ("  outside the loop", m["backward op"] - bwd_loop, f"dW_hh alone {m['dW_hh alone']:.2f} ms"),
        ("projection backward", m["projection backward"], f"{2 * step_flop / m['projection backward'] * 1e3:.0f} GFLOP/s"),
    ]
    for name, ms, note in rows:
        print(f"  {name:<22} {ms:8.2f} ms  {100 * ms / total:5.1f}%  {note}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--cells", nargs="+", default=["lstm", "plstm_coupled"], choices=sorted(cells.CELLS))
    p.add_argument("--shapes", nargs="+", type=shape, default=SHAPES, metavar="T,B,H")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {cpu_name()}, {args.threads} threads, GLIBC_TUNABLES="
          f"{os.environ.get('GLIBC_TUNABLES', '(unset)')}; medians of {args.rounds} rounds")
    for T, B, H in args.shapes:
        for cell_name in args.cells:
            report(cell_name, T, B, H, profile(cell_name, T, B, H, args.rounds))


if __name__ == "__main__":
    main()
