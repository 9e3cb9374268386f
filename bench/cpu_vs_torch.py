"""tsrnn's layers against torch.nn.LSTM on CPU, forward+backward, measured in pairs.

    python bench/cpu_vs_torch.py                       # `auto`, LSTM and MTS-LSTM, T=70 B=20 H in {64, 256, 512}
    python bench/cpu_vs_torch.py --set engine --backend cpu --rounds 20
                                                       # the C++ engine, every cell, four shapes
    python bench/cpu_vs_torch.py --set engine --backend cpu --shapes 70,1,1024 100,8,32
                                                       # the same layers at other shapes

This machine's timings drift by tens of percent within minutes, so the modules of one shape are
timed alternately (one fwd+bwd of each per round, ``tsrnn.lab.speed.time_rounds``) and each ratio
to torch.nn.LSTM is taken per round: drift then hits both sides of a ratio alike. Prints, per shape and layer, the median time
and the median and interquartile range of the per-round ratios. Each layer is first checked to
compute what it should: the LSTM and MTS-LSTM against a torch.nn.LSTM loaded with their
effective biases, the pLSTM against its reference loop.

Sets: "awd" (the default) times `tsrnn.LSTM` and the MTS-LSTM at the AWD-LSTM's T=70, B=20,
H = I in {64, 256, 512}; "engine" times the LSTM, the MTS-LSTM with its gate traces recorded (as
`tsrnn analyze` and `watch` run it), and the coupled and separate pLSTM at (T, B, H) = (70, 20,
256), (70, 20, 1150), (200, 128, 128) and (70, 80, 400), H = I.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import platform
import statistics

import torch

import tsrnn
from tsrnn.backend import choice
from tsrnn.lab import speed

SETS = {
    "awd": ([(70, 20, 64), (70, 20, 256), (70, 20, 512)], ["lstm", "mts-lstm"]),
    "engine": ([(70, 20, 256), (70, 20, 1150), (200, 128, 128), (70, 80, 400)],
               ["lstm", "mts-lstm+traces", "plstm-coupled", "plstm-separate"]),
}


def layer(kind: str, hidden: int, backend: str):
    """A tsrnn layer of ``kind`` and a module computing the same function to check it against."""
    torch.manual_seed(0)
    if kind.startswith("plstm"):
        ours = tsrnn.PowerLawLSTM(hidden, hidden, input_gate=kind.split("-")[1], backend=backend)
        reference = copy.deepcopy(ours)
        reference.backend = "reference"
        return ours, reference
    timescales = [tsrnn.memory.timescales.inverse_gamma_quantiles(hidden, 0.56)] if kind.startswith("mts") else None
    ours = tsrnn.LSTM(hidden, hidden, timescales=timescales, backend=backend)
    theirs = torch.nn.LSTM(hidden, hidden)
    theirs.load_state_dict(ours.state_dict(), strict=False)  # b_ih + b_hh = the effective bias
    return ours, theirs


def checked_layer(kind: str, x, backend: str):
    """``layer(kind, ...)`` for x (T, B, H), checked against its check module on x; returns the
    layer, whether its fwd+bwd records traces (``step``'s ``traces``) and the check module."""
    ours, check = layer(kind, x.shape[-1], backend)
    with torch.no_grad():
        err = (ours(x)[0] - check(x)[0]).abs().max().item()
    assert err < 1e-4, f"{kind} {tuple(x.shape)}: tsrnn and its check differ by {err:.2e}"
    return ours, kind.endswith("+traces"), check


def step(module, x, traces=False):
    """One fwd+bwd; with ``traces``, inside ``watch`` (the gate traces computed and handed over)."""
    with module.watch(lambda _: None) if traces else contextlib.nullcontext():
        out = module(x)[0]
    out.sum().backward()


def cpu_name() -> str:
    """The CPU model and the per-step GEMM kernel tsrnn's CPU loops use on it."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    kernel = torch.ops.tsrnn.cpu_gemm_in_use() if tsrnn.backend.native_available() else "none (no tsrnn._C)"
    return f"{model}, per-step GEMM kernel {kernel}"


SAME_FUNCTION = "torch.nn.LSTM as "  # the run of torch.nn.LSTM loaded with a multi-timescale layer's weights


def measure(shape, kinds, backend, rounds, input_grad=False):
    """{name: per-round times in ms} for torch.nn.LSTM (and, beside each multi-timescale kind,
    torch.nn.LSTM loaded with its weights: the same function, whose saturated gates may run at
    another speed) and each kind at ``shape``, alternated; with ``input_grad`` the input needs a
    gradient too (dx, as in a stacked layer)."""
    T, B, H = shape
    x = torch.randn(T, B, H).requires_grad_(input_grad)
    torch.manual_seed(0)
    runs = {"torch.nn.LSTM": (torch.nn.LSTM(H, H), False)}
    for kind in kinds:
        ours, traces, check = checked_layer(kind, x, backend)
        runs[kind] = ours, traces
        if kind.startswith("mts"):  # the same function in torch.nn.LSTM: its fixed biases' gates alike
            runs[SAME_FUNCTION + kind] = check, False
    # two warm-up calls each (the first call of auto measures its paths), then the rounds
    return speed.time_rounds({name: functools.partial(step, module, x, traces) for name, (module, traces) in runs.items()},
                             rounds)


def shape(text: str) -> tuple[int, int, int]:
    """"T,B,H" -> (T, B, H), for --shapes."""
    try:
        T, B, H = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is T,B,H (three integers), got {text!r}") from None
    if T < 1 or min(B, H) < 2:
        raise argparse.ArgumentTypeError(f"T must be at least 1, B and H at least 2, got {text!r}")
    return T, B, H


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", choices=sorted(SETS), default="awd")
    p.add_argument("--backend", default="auto", help="tsrnn's backend= for its layers (auto, cpu, ...)")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--input-grad", action="store_true", help="the input needs a gradient too (dx)")
    p.add_argument("--shapes", nargs="+", type=shape, metavar="T,B,H", help="in place of the set's shapes")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    shapes, kinds = SETS[args.set]
    shapes = args.shapes or shapes
    print(f"torch {torch.__version__}, {cpu_name()}, {args.threads} threads, {args.rounds} rounds, "
          f"backend={args.backend}, input grad {args.input_grad}; fwd+bwd ms, ratio = tsrnn / torch.nn.LSTM per round")
    for T, B, H in shapes:
        times = measure((T, B, H), kinds, args.backend, args.rounds, args.input_grad)
        torchs = times.pop("torch.nn.LSTM")
        print(f"T={T} B={B} H={H}: torch.nn.LSTM {statistics.median(torchs):.2f}")
        same = {name: times.pop(SAME_FUNCTION + name) for name in list(times) if SAME_FUNCTION + name in times}
        for name, mine in times.items():
            base = same.get(name, torchs)
            if name in same:
                print(f"  {'torch.nn.LSTM as ' + name:<16} {statistics.median(base):8.2f}  (the ratio below is to this)")
            ratios = sorted(a / b for a, b in zip(mine, base))
            q = len(ratios) // 4
            chosen = sorted(set(tsrnn.backend.tuned_choices().values())) if args.backend == "auto" else ""
            print(f"  {name:<16} {statistics.median(mine):8.2f}  ratio median {statistics.median(ratios):.3f} "
                  f"(IQR {ratios[q]:.3f}-{ratios[-q - 1]:.3f}) {chosen}")
        choice._tuned.clear()
        choice.forget()


if __name__ == "__main__":
    main()
