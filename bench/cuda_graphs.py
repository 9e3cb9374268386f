"""Whole training steps of tsrnn's modules captured as CUDA graphs: replayed against eager, timed.

    python bench/cuda_graphs.py [--shape 70,20,400] [--repeats 50] [--paths auto cudnn ...]

A step is forward, backward of a fixed loss and an SGD-with-momentum step over every parameter.
For each model (tsrnn.LSTM, the multi-timescale LSTM, tsrnn.PowerLawLSTM) and path, one copy takes
eager steps and a twin with the same weights replays its step captured under
``torch.cuda.CUDAGraph`` (``captured_step``: three eager warm-up steps on a side stream, as torch's
documentation asks, then the capture on static input tensors); after ``STEPS`` steps each, the
largest difference of their outputs and parameters is recorded (``compare``), then the per-step
time of each (``time_steps``: CUDA events, the median of ``--repeats`` steps after warm-up). A
path that cannot be captured is recorded with its error. The same runs under
``torch.compile(mode="reduce-overhead")`` are in tests/kernels/recurrence/test_cuda_graphs.py.

Without a GPU, ``--device cpu`` times the eager steps only and records that nothing was captured
(bench/gpu_report.py's ``--quick`` run on the CPU).
"""
from __future__ import annotations

import argparse
import json

import torch

import tsrnn
from timing import timer  # bench/, beside this script

SHAPE = (70, 20, 400)  # (T, B, H), H = I: the AWD-LSTM's steps and batch
STEPS = 3  # eager steps against replays before the outputs and parameters are compared
PATHS = {"lstm": ["auto", "cudnn", "cuda_cluster", "cuda_grid", "triton_step"],
         "mts-lstm": ["auto", "cudnn", "cuda_cluster", "cuda_grid", "triton_step"],
         "plstm": ["auto", "cuda_cluster", "cuda_grid", "triton_step"]}


def model(kind: str, hidden: int, backend: str, device) -> torch.nn.Module:
    """A fresh model of ``kind`` (seeded: two calls give the same weights)."""
    torch.manual_seed(0)
    if kind == "plstm":
        return tsrnn.PowerLawLSTM(hidden, hidden, backend=backend).to(device)
    timescales = [tsrnn.memory.timescales.inverse_gamma_quantiles(hidden, 0.56)] if kind == "mts-lstm" else None
    return tsrnn.LSTM(hidden, hidden, timescales=timescales, backend=backend).to(device)


def trainer(module: torch.nn.Module, x: torch.Tensor):
    """One training step of ``module`` on ``x`` (a closure over its optimizer), returning the output."""
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)

    def step() -> torch.Tensor:
        out, state = module(x)
        (out.square().mean() + sum(s.square().mean() for s in state)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # the gradients stay the graph's own tensors
        return out

    return step


def captured_step(step, warmup: int = 3):
    """``step`` captured as a CUDA graph after ``warmup`` eager steps on a side stream; returns
    (replay, the captured step's output tensor, which each replay rewrites)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph.replay, out


def compare(kind: str, path: str, shape, device) -> dict:
    """Eager steps against replays of the captured step, from the same weights: the largest
    absolute difference of the last output and of any parameter after 3 warm-up + ``STEPS`` steps."""
    T, B, H = shape
    x = torch.randn(T, B, H, device=device)
    eager, graphed = model(kind, H, path, device), model(kind, H, path, device)
    eager_step = trainer(eager, x)
    replay, out = captured_step(trainer(graphed, x))  # three eager steps, then the capture (no step)
    for _ in range(3):
        eager_step()
    for _ in range(STEPS):
        want = eager_step()
        replay()
    torch.cuda.synchronize()
    params = max((p - q).abs().max().item() for p, q in zip(eager.parameters(), graphed.parameters()))
    return {"out_max_diff": (out - want).abs().max().item(), "param_max_diff": params}


def time_steps(kind: str, path: str, shape, device, repeats: int, graphs: bool) -> dict:
    """ms per eager step and, with ``graphs``, per replay of the captured step (``timing.timer``:
    the median of ``repeats`` after two warm-up calls, CUDA events on a GPU)."""
    T, B, H = shape
    x = torch.randn(T, B, H, device=device)
    measure = timer(device)
    step = trainer(model(kind, H, path, device), x)
    row = {"eager_ms": round(measure(step, repeats), 4)}
    if graphs:
        replay, _ = captured_step(trainer(model(kind, H, path, device), x))
        row["replay_ms"] = round(measure(replay, repeats), 4)
        row["replay_over_eager"] = round(row["replay_ms"] / row["eager_ms"], 3)
    return row


def run(device, shape=SHAPE, repeats: int = 50, paths: dict | None = None, progress=lambda rows: None) -> list[dict]:
    """One row per model and path: the replay's differences from eager and both times; a path that
    cannot serve the shape or be captured is recorded with its error."""
    graphs = device.type == "cuda"
    rows = []
    for kind, names in (paths or PATHS).items():
        for path in names if graphs else ["auto"]:
            row = {"model": kind, "path": path, "T": shape[0], "B": shape[1], "H": shape[2]}
            rows.append(row)
            try:
                if graphs:
                    row.update(compare(kind, path, shape, device))
                row.update(time_steps(kind, path, shape, device, repeats, graphs))
            except (RuntimeError, ValueError) as exc:  # refused by the path, or not capturable: recorded
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            if not graphs:
                row["graphs"] = "not captured: CUDA graphs need a GPU"
            chosen = sorted(set(tsrnn.backend.tuned_choices().values())) if path == "auto" else None
            if chosen:
                row["auto_chose"] = chosen
            progress(rows)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", default=",".join(map(str, SHAPE)), help="T,B,H")
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split(","))
    device = torch.device(args.device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}, (T, B, H) = {shape}, float32, fwd+bwd+SGD step, ms per step")
    for row in run(device, shape, args.repeats):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
