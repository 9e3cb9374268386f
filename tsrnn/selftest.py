"""``tsrnn selftest``: every CPU path against its float64 reference, and its speed.

For each path that runs on this machine (the compiled kernels for every cell, oneDNN for the LSTM,
the compiled linear scan) it prints the worst error of the path against the float64 reference
through the harness of ``tsrnn.testing`` (outputs and gradients, float64 inputs at a small shape,
float32 inputs at the default shape; errors are relative to each tolerance's scale) and the
forward+backward time of the path and of the reference loop; it returns a non-zero exit code if
any error is above its tolerance or the extension is missing.
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple

import torch

import tsrnn
from tsrnn import backend, cells, functional, testing


class Case(NamedTuple):
    name: str
    compare: Callable[[tuple, torch.dtype], testing.Comparison]  # (shape, dtype) -> errors
    timed: Callable[[str, tuple], Callable[[], None]]  # (path, shape) -> one forward+backward


def _layer_case(cell: str, path: str) -> Case:
    dt = cells.get(cell).has_p

    def compare(shape, dtype):
        return testing.compare(path, cell, shape, dtype, dt=dt)

    def timed(run_path, shape):
        args = testing.layer_args(cell, *shape, dt=dt)
        names = testing.differentiable(args)
        args = {k: (v.float().requires_grad_() if k in names else v.float() if isinstance(v, torch.Tensor) else v)
                for k, v in args.items()}

        def step():
            out, state = testing.run_layer(cell, args, run_path)
            (out.sum() + sum(s.sum() for s in state)).backward()

        return step

    return Case(f"{cell} {path}" + (" + dt" if dt else ""), compare, timed)


def _scan_case(path: str) -> Case:
    def timed(run_path, shape):
        T, B, _, H = shape
        a = torch.rand(T, B, H, requires_grad=True)
        u = torch.randn(T, B, H, requires_grad=True)
        return lambda: functional.linear_scan(a, u, backend=run_path).sum().backward()

    return Case(f"linear_scan {path}", lambda shape, dtype: testing.compare_scan(path, shape[:2] + shape[3:], dtype),
                timed)


def cases() -> list[Case]:
    """Every (cell, path) of the registry that runs CPU tensors, then the scan's CPU paths."""
    cpu = torch.device("cpu")
    layers = [_layer_case(cell, path) for path in backend.paths_on("cpu", "recurrence") for cell in cells.CELLS
              if backend.why_not(path, backend.Call("recurrence", cpu, torch.float32, (1, 1, 1, 1), cell)) is None]
    return layers + [_scan_case(path) for path in backend.paths_on("cpu", "linear_scan")]


def _time_ms(step: Callable[[], None], repeats: int) -> float:
    """Median forward+backward time in ms, after one warm-up call."""
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def run(steps: int = 70, batch: int = 20, hidden: int = 256, repeats: int = 3, out=print) -> int:
    if not backend.native_available():
        out(f"tsrnn selftest: the compiled extension tsrnn._C did not load ({backend.LOAD_ERROR}).")
        out("Reinstall with `pip install --no-build-isolation -e .`; only the reference loops work now.")
        return 2
    small = testing.SELFTEST_SHAPE
    default = (steps, batch, hidden, hidden)
    out(f"tsrnn {tsrnn.__version__} selftest, torch {torch.__version__}, {torch.get_num_threads()} threads")
    out(f"errors: max|path - float64 reference| over outputs and over gradients, as a fraction of the "
        f"tolerance (<= 1 passes); float64 at T,B,I,H = {small}, float32 and timing (forward+backward, "
        f"median of {repeats}) at {default}")
    header = f"{'path':<30}{'f64 out':>10}{'f64 grad':>10}{'f32 out':>10}{'f32 grad':>10}{'ref ms':>9}{'path ms':>9}{'speed-up':>10}  ok"
    out(header)
    out("-" * len(header))
    failed = []
    for case in cases():
        e64, e32 = case.compare(small, torch.float64), case.compare(default, torch.float32)
        t_ref = _time_ms(case.timed("reference", default), repeats)
        t_path = _time_ms(case.timed(case.name.split()[1], default), repeats)
        ok = e64.ok and e32.ok
        out(f"{case.name:<30}{e64.worst(False):>10.1e}{e64.worst(True):>10.1e}{e32.worst(False):>10.1e}"
            f"{e32.worst(True):>10.1e}{t_ref:>9.1f}{t_path:>9.1f}{t_ref / t_path:>9.1f}x  {'yes' if ok else 'NO'}")
        if not ok:
            failed.append(f"{case.name} ({'; '.join(c.failures() for c in (e64, e32) if not c.ok)})")
    tol, grad_tol = testing.TOLERANCE, testing.GRAD_TOLERANCE
    out(f"tolerances: atol = rtol = {tol[torch.float64]['atol']:.0e} in float64, {tol[torch.float32]['atol']:.0e} "
        f"in float32 (gradients {grad_tol[torch.float32]['atol']:.0e})")
    if failed:
        out(f"MISMATCH in: {', '.join(failed)}")
        return 1
    out("all paths match their references")
    return 0

