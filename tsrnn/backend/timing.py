"""How "auto" times its candidates on a call's own inputs (``tsrnn.backend.choice`` says when).

``fastest`` runs what the call will do (its forward, and its backward when autograd will need
it) on each candidate: one warm-up run each, then rounds that run every candidate once, in turn,
at least ``TUNE_REPEATS`` rounds and until ``TUNE_SECONDS`` have passed, at most ``TUNE_ROUNDS``;
a candidate's time is its fastest run. The first candidate stays unless another is
``TUNE_MARGIN`` faster. A candidate that raises while being timed is dropped with one warning
naming the cause; if every one raises, ``fastest`` raises a RuntimeError. ``can_measure`` says
where nothing may be timed or verified.
"""
from __future__ import annotations

import time
from typing import Sequence

import torch

from tsrnn import _validation as check
from tsrnn.backend.registry import Call, Run, warn_once

TUNE_REPEATS = 3  # timed runs per candidate at least, after one warm-up run; the fastest run counts
TUNE_SECONDS = 0.05  # and rounds of runs until they took this long (tiny calls get more runs) ...
TUNE_ROUNDS = 30  # ... but no more rounds than this
TUNE_MARGIN = 0.05  # another candidate replaces the first only when at least this much faster


def can_measure(device: torch.device, paths: Sequence[str]) -> bool:
    """Whether runs can be timed and verified here: not while torch.compile traces, nor during CUDA
    graph capture, nor under the Triton interpreter (Triton candidates on CPU tensors)."""
    if check.tracing():
        return False
    if device.type == "cpu" and any(p.startswith("triton") for p in paths):
        return False
    return not (device.type == "cuda" and check.capturing())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_once(run: Run, path: str, grad: bool) -> None:
    """One run of what the call does: its forward, and its backward when autograd will need it
    (torch.autograd.grad on the inputs ``run`` returns, detached copies of the call's own)."""
    with torch.set_grad_enabled(grad):
        outputs, inputs = run(path)
        if grad and inputs:
            loss = sum(o.float().sum() for o in outputs.values() if o.requires_grad)
            torch.autograd.grad(loss, list(inputs.values()), allow_unused=True)


def fastest(paths: Sequence[str], call: Call, run: Run) -> str:
    """The fastest of ``paths`` on the call's own inputs (see the module docstring)."""
    times, alive = {}, []
    for path in paths:
        try:
            _run_once(run, path, call.grad)  # warm-up: compiles Triton kernels, plans the CUDA kernel
            alive.append(path)
        except Exception as exc:  # noqa: BLE001  (a broken path must not break "auto"; it is reported)
            _failed_timing(path, exc)
    start, rounds = time.perf_counter(), 0
    while alive and rounds < TUNE_ROUNDS and (rounds < TUNE_REPEATS or time.perf_counter() - start < TUNE_SECONDS):
        rounds += 1
        for path in list(alive):
            try:
                _sync(call.device)
                began = time.perf_counter()
                _run_once(run, path, call.grad)
                _sync(call.device)
            except Exception as exc:  # noqa: BLE001
                _failed_timing(path, exc)
                alive.remove(path)
                times.pop(path, None)
                continue
            times[path] = min(times.get(path, float("inf")), time.perf_counter() - began)
    if not times:
        raise RuntimeError(f"tsrnn: every path failed for this call ({', '.join(paths)}); "
                           "see the warnings, or use backend='reference'")
    first = next(p for p in paths if p in times)
    best = min(times, key=times.get)
    return best if times[best] < (1 - TUNE_MARGIN) * times[first] else first


def _failed_timing(path: str, exc: Exception) -> None:
    warn_once(f"tsrnn: the {path} path failed while being timed ({type(exc).__name__}: {exc}); "
              "'auto' does not use it for this shape")
