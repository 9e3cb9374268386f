"""``tsrnn selftest``: every fused op against its reference on default shapes.

For each op it prints the max error of the fused path against the float64 reference (forward
and gradients, float64 and float32 inputs) and the forward+backward time of both paths, and
returns a non-zero exit code if any error is above its tolerance or the extension is missing.
"""
from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import torch

import tsrnn
from tsrnn import backend, functional, reference

# max |fused - float64 reference| / max(1, max |reference|), per input dtype
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}


def layer_args(cell: str, T: int, B: int, I: int, H: int, seed: int = 0, dt: bool = False) -> dict:
    """Random float64 keyword arguments for reference/functional ``lstm`` or ``plstm``.

    ``cell`` is "lstm", "plstm_coupled" or "plstm_separate"; weights are scaled by 1/sqrt(fan-in)
    so activations stay in the interesting range; dt, if asked for, lies in [0.1, 2.1).
    """
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    G = 3 if cell == "plstm_coupled" else 4
    args = {
        "x": randn(T, B, I),
        "h0": randn(B, H, scale=0.5),
        "c0": randn(B, H),
        "w_ih": randn(G * H, I, scale=1 / math.sqrt(I)),
        "w_hh": randn(G * H, H, scale=1 / math.sqrt(H)),
        "bias": randn(G * H, scale=0.5),
    }
    if cell != "lstm":
        args["a0"] = torch.rand(B, H, generator=g, dtype=torch.float64) * 3
        args["p"] = torch.rand(H, generator=g, dtype=torch.float64) * 0.9 + 0.05
        args["dt"] = torch.rand(T, B, generator=g, dtype=torch.float64) * 2 + 0.1 if dt else None
        args["input_gate"] = cell.split("_")[1]
    return args


class Case(NamedTuple):
    name: str
    fused: Callable  # (**tensors) -> tuple of outputs
    reference: Callable
    tensors: Callable[[int, int, int, int], dict]  # (T, B, I, H) -> float64 inputs (others fixed)


def _layer_case(cell: str, dt: bool) -> Case:
    fn = functional.lstm if cell == "lstm" else functional.plstm
    ref = reference.lstm if cell == "lstm" else reference.plstm

    def build(T, B, I, H):
        args = layer_args(cell, T, B, I, H, dt=dt)
        return {k: v for k, v in args.items() if isinstance(v, torch.Tensor) and k != "dt"}, \
            {k: v for k, v in args.items() if not (isinstance(v, torch.Tensor) and k != "dt")}

    def fused(tensors, fixed):
        out, state = fn(**tensors, **fixed, backend="native")
        return (out, *state)

    def slow(tensors, fixed):
        out, state, _ = ref(**tensors, **fixed)
        return (out, *state)

    name = {"lstm": "lstm", "plstm_coupled": "plstm coupled", "plstm_separate": "plstm separate"}[cell]
    return Case(name + (" + dt" if dt else ""), fused, slow, build)


def _mts_case() -> Case:
    """The multi-timescale LSTM module (S3-S4 fixed biases, inverse-gamma timescales)."""

    def build(T, B, I, H):
        torch.manual_seed(0)
        model = tsrnn.LSTM(I, H, timescales=[tsrnn.timescales.inverse_gamma_quantiles(H, 0.56)],
                           dtype=torch.float64)
        x = torch.randn(T, B, I, dtype=torch.float64)
        return {"x": x, **dict(model.named_parameters())}, {"model": model}

    def run(tensors, fixed, backend_name):
        model = fixed["model"]
        params = {k: v for k, v in tensors.items() if k != "x"}
        model.backend = backend_name
        out, (h, c) = torch.func.functional_call(model, params, (tensors["x"],))
        return out, h, c

    return Case("mts-lstm module", lambda t, f: run(t, f, "native"), lambda t, f: run(t, f, "reference"), build)


def _scan_case() -> Case:
    def build(T, B, I, H):
        g = torch.Generator().manual_seed(0)
        return {"a": torch.rand(T, B, H, generator=g, dtype=torch.float64),
                "u": torch.randn(T, B, H, generator=g, dtype=torch.float64),
                "x0": torch.randn(B, H, generator=g, dtype=torch.float64)}, {}

    return Case("linear_scan", lambda t, f: (functional.linear_scan(**t, backend="native"),),
                lambda t, f: (reference.linear_scan(**t),), build)


CASES = (_layer_case("lstm", False), _mts_case(), _layer_case("plstm_coupled", False),
         _layer_case("plstm_separate", True), _scan_case())


def _errors(case: Case, shape, dtype) -> tuple[float, float]:
    """Relative max error of outputs and of input gradients, fused(dtype) vs reference(float64)."""
    tensors, fixed = case.tensors(*shape)
    tensors = {k: v.detach().to(dtype).double() for k, v in tensors.items()}  # values dtype can hold
    low = {k: v.to(dtype).requires_grad_() for k, v in tensors.items()}
    high = {k: v.clone().requires_grad_() for k, v in tensors.items()}
    if "model" in fixed:
        fixed = {"model": fixed["model"].to(dtype)}
    out_low, out_high = case.fused(low, fixed), case.reference(high, fixed)
    weights = [torch.randn(o.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
               for i, o in enumerate(out_high)]
    grads_low = torch.autograd.grad(sum((o.double() * w).sum() for o, w in zip(out_low, weights)), list(low.values()))
    grads_high = torch.autograd.grad(sum((o * w).sum() for o, w in zip(out_high, weights)), list(high.values()))
    if "model" in fixed:
        fixed["model"].double()

    def rel(actual, expected):
        return max(((a.double() - e).abs().max() / max(1.0, e.abs().max().item())).item()
                   for a, e in zip(actual, expected))

    return rel(out_low, out_high), rel(grads_low, grads_high)


def _time_ms(fn: Callable, tensors: dict, fixed: dict, repeats: int) -> float:
    """Median forward+backward time in ms."""
    times = []
    for _ in range(repeats + 1):
        inputs = {k: v.detach().requires_grad_() for k, v in tensors.items()}
        start = time.perf_counter()
        outs = fn(inputs, fixed)
        sum(o.sum() for o in outs).backward()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times[1:])[len(times[1:]) // 2]


def run(steps: int = 70, batch: int = 20, hidden: int = 256, repeats: int = 3, out=print) -> int:
    if not backend.native_available():
        out(f"tsrnn selftest: the compiled extension tsrnn._C did not load ({backend.LOAD_ERROR}).")
        out("Reinstall with `pip install --no-build-isolation -e .`; only the reference loops work now.")
        return 2
    small = (9, 3, 5, 7)
    default = (steps, batch, hidden, hidden)
    out(f"tsrnn {tsrnn.__version__} selftest, torch {torch.__version__}, {torch.get_num_threads()} threads")
    out(f"errors: max|fused - float64 reference| / max(1, max|reference|); float64 at T,B,I,H = {small}, "
        f"float32 and timing (forward+backward, median of {repeats}) at {default}")
    header = f"{'op':<24}{'f64 out':>10}{'f64 grad':>10}{'f32 out':>10}{'f32 grad':>10}{'ref ms':>9}{'fused ms':>10}{'speed-up':>10}  ok"
    out(header)
    out("-" * len(header))
    failed = []
    for case in CASES:
        e64 = _errors(case, small, torch.float64)
        e32 = _errors(case, default, torch.float32)
        ok = max(e64) <= TOLERANCE[torch.float64] and max(e32) <= TOLERANCE[torch.float32]
        tensors, fixed = case.tensors(*default)
        tensors = {k: v.detach().float() for k, v in tensors.items()}
        fixed = {k: v.float() if isinstance(v, (torch.Tensor, torch.nn.Module)) else v for k, v in fixed.items()}
        t_ref = _time_ms(case.reference, tensors, fixed, repeats)
        t_fused = _time_ms(case.fused, tensors, fixed, repeats)
        out(f"{case.name:<24}{e64[0]:>10.1e}{e64[1]:>10.1e}{e32[0]:>10.1e}{e32[1]:>10.1e}"
            f"{t_ref:>9.1f}{t_fused:>10.1f}{t_ref / t_fused:>9.1f}x  {'yes' if ok else 'NO'}")
        if not ok:
            failed.append(case.name)
    out(f"tolerances: float64 {TOLERANCE[torch.float64]:.0e}, float32 {TOLERANCE[torch.float32]:.0e}")
    if failed:
        out(f"MISMATCH in: {', '.join(failed)}")
        return 1
    out("all ops match their references")
    return 0
