"""``tsrnn selftest``: every path of this machine against its float64 reference, and its speed.

It first prints what a bug report needs (versions, CPU, GPU, which extensions loaded). Then, for
each path that runs on this machine (on CPU: the compiled kernels for every cell, oneDNN for the
LSTM, the compiled linear scan; with a GPU also cuDNN, the tensor-core CUDA kernels, the Triton
recurrences and the Triton scan, on CUDA tensors) it prints the worst error of the path against the float64 reference
through the harness of ``tsrnn.testing`` (outputs and gradients, float64 inputs at a small shape,
float32 inputs at the default shape; errors are relative to each tolerance's scale) and the
forward+backward time of the path, timed in interleaved rounds (``tsrnn.lab.speed``) beside
torch.nn.LSTM of the same sizes (for the pLSTM cells a plain LSTM: what the cell costs over torch's
own; none for the scan) and beside the step loop (the reference path: the plain PyTorch loop a user
would otherwise write), as time ratios (below 1: the path is faster). It returns a non-zero exit
code if any error is above its tolerance or the extension is missing.
"""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Callable, NamedTuple

import torch

import tsrnn
from tsrnn import backend, functional, testing
from tsrnn.lab import speed
from tsrnn.ops.recurrence import cells

PATH, TORCH_LSTM, LOOP = "the path", "torch.nn.LSTM", "step loop"  # what a case times, side by side


class Case(NamedTuple):
    name: str
    compare: Callable[[tuple, torch.dtype], testing.Comparison | None]  # (shape, dtype) -> errors, None: not served
    timed: Callable[[str, tuple], Callable[[], None]]  # (path, shape) -> one forward+backward
    torch_lstm: Callable[[tuple], Callable[[], None]] | None = None  # shape -> torch.nn.LSTM's forward+backward there

    @property
    def path(self) -> str:
        return self.name.split()[1]


def _layer_case(cell: str, path: str, device: str) -> Case:
    dt = cells.get(cell).step_input is not None

    def compare(shape, dtype):
        if testing.why_not(path, cell, shape, dtype, device) is not None:
            return None  # e.g. the CUDA kernels in float64
        return testing.compare(path, cell, shape, dtype, device, dt=dt)

    def timed(run_path, shape):
        args = testing.layer_args(cell, *shape, dt=dt)
        names = testing.differentiable(args)
        args = {k: (v.to(device, torch.float32).requires_grad_() if k in names
                    else v.to(device, torch.float32) if isinstance(v, torch.Tensor) else v)
                for k, v in args.items()}

        def step():
            out, state = testing.run_layer(cell, args, run_path)
            (out.sum() + sum(s.sum() for s in state)).backward()

        return step

    return Case(f"{cell} {path}" + (" + dt" if dt else ""), compare, timed, lambda shape: _torch_lstm(shape, device))


def _torch_lstm(shape, device: str) -> Callable[[], None]:
    """torch.nn.LSTM's forward+backward at (T, B, I, H), float32, the input and state differentiable."""
    T, B, I, H = shape
    lstm = torch.nn.LSTM(I, H).to(device)
    x = torch.randn(T, B, I, device=device, requires_grad=True)

    def step():
        out, (h, c) = lstm(x)
        (out.sum() + h.sum() + c.sum()).backward()

    return step


def _scan_case(path: str, device: str) -> Case:
    def timed(run_path, shape):
        T, B, _, H = shape
        a = torch.rand(T, B, H, device=device, requires_grad=True)
        u = torch.randn(T, B, H, device=device, requires_grad=True)
        return lambda: functional.linear_scan(a, u, backend=run_path).sum().backward()

    def compare(shape, dtype):
        return testing.compare_scan(path, shape[:2] + shape[3:], dtype, device)

    return Case(f"linear_scan {path}", compare, timed)


def devices() -> list[str]:
    """The device types whose paths the self-test checks: the CPU, and CUDA where a GPU is visible."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def cases() -> list[Case]:
    """Every (cell, path) of the registry that runs on this machine, then the scan's paths."""
    layers, scans = [], []
    for device in devices():
        call = lambda cell: backend.Call("recurrence", torch.device(device), torch.float32, (1, 1, 1, 1), cell)  # noqa: E731
        layers += [_layer_case(cell, path, device) for path in backend.paths_on(device, "recurrence")
                   for cell in cells.CELLS if backend.why_not(path, call(cell)) is None]
        scans += [_scan_case(path, device) for path in backend.paths_on(device, "linear_scan")]
    return layers + scans


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment() -> list[str]:
    """What a bug report needs: versions, the CPU, the GPUs, and which extensions loaded."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    lines = [f"tsrnn {tsrnn.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton_version}, "
             f"Python {platform.python_version()}, {platform.platform()}",
             f"CPU: {_cpu_model()}, {torch.get_num_threads()} threads, "
             f"{torch.backends.cpu.get_cpu_capability()}"]
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        lines.append(f"GPU {index}: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
                     f"{props.total_memory / 2**30:.0f} GiB")
    lines.append(f"tsrnn._C: {'loaded' if backend.LOAD_ERROR is None else backend.LOAD_ERROR}; tsrnn._cuda: "
                 f"{'loaded' if backend.CUDA_LOAD_ERROR is None else backend.CUDA_LOAD_ERROR}")
    return lines


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timing(case: Case, shape: tuple, rounds: int) -> tuple[str, str | None]:
    """The timing columns of a case (the path's median ms, its time over torch.nn.LSTM's and over
    the step loop's, medians of per-round ratios) and why its rounds disagree (None if they agree)."""
    calls = {PATH: case.timed(case.path, shape), LOOP: case.timed("reference", shape)}
    if case.torch_lstm is not None:
        calls[TORCH_LSTM] = case.torch_lstm(shape)
    times = speed.time_rounds(calls, rounds, synchronize=_synchronize, warmup=1)
    ratios = {name: speed.ratio(times[PATH], times[name]) for name in (TORCH_LSTM, LOOP) if name in times}
    versus_torch = f"{ratios[TORCH_LSTM].median:>10.2f}x" if TORCH_LSTM in ratios else f"{'n/a':>11}"
    columns = f"{sorted(times[PATH])[rounds // 2]:>9.1f}{versus_torch}{ratios[LOOP].median:>10.2f}x"
    return columns, speed.disagreement(times, ratios)


def run(steps: int = 70, batch: int = 20, hidden: int = 256, repeats: int = 3, out=print) -> int:
    if not backend.native_available():
        out(f"tsrnn selftest: the compiled extension tsrnn._C did not load ({backend.LOAD_ERROR}).")
        out("Reinstall with `pip install --no-build-isolation -e .`; only the reference loops work now.")
        return 2
    small = testing.SELFTEST_SHAPE
    default = (steps, batch, hidden, hidden)
    out("tsrnn selftest")
    for line in environment():
        out(line)
    out(f"errors: max|path - float64 reference| over outputs and over gradients, as a fraction of the "
        f"tolerance (<= 1 passes); float64 at T,B,I,H = {small}, float32 at {default}")
    out(f"time: the path's forward+backward in ms at {default}, float32 (median of {repeats} interleaved rounds), "
        f"and its time over the time of {TORCH_LSTM} of the same sizes (for the other cells a plain LSTM; n/a: no "
        f"counterpart) and over the {LOOP} (tsrnn's reference: plain PyTorch over the time steps); "
        "below 1x the path is faster")
    header = (f"{'path':<30}{'f64 out':>10}{'f64 grad':>10}{'f32 out':>10}{'f32 grad':>10}{'ms':>9}"
              f"{'/ torch':>11}{'/ loop':>11}  ok")
    out(header)
    out("-" * len(header))
    failed, noisy = [], []
    for case in cases():
        e64, e32 = case.compare(small, torch.float64), case.compare(default, torch.float32)
        served = [c for c in (e64, e32) if c is not None]  # "n/a": the path does not take this dtype/shape
        errors = "".join(f"{c.worst(False):>10.1e}{c.worst(True):>10.1e}" if c else f"{'n/a':>10}{'n/a':>10}"
                         for c in (e64, e32))
        timing = f"{'n/a':>9}{'n/a':>11}{'n/a':>11}"
        if e32 is not None:
            timing, disagreement = _timing(case, default, repeats)
            if disagreement:
                noisy.append(f"{case.name}: {disagreement}")
        ok = all(c.ok for c in served)
        out(f"{case.name:<30}{errors}{timing}  {'yes' if ok else 'NO'}")
        if not ok:
            failed.append(f"{case.name} ({'; '.join(c.failures() for c in served if not c.ok)})")
    tol, grad_tol = testing.TOLERANCE, testing.GRAD_TOLERANCE
    out(f"tolerances: atol = rtol = {tol[torch.float64]['atol']:.0e} in float64, {tol[torch.float32]['atol']:.0e} "
        f"in float32 (gradients {grad_tol[torch.float32]['atol']:.0e})")
    if noisy:
        out("the timed rounds disagree (a busy machine?), so these times are rough:")
        for line in noisy:
            out(f"  {line}")
    if failed:
        out(f"MISMATCH in: {', '.join(failed)}")
        return 1
    out("all paths match their references")
    return 0

