"""Which implementation runs a call: a compiled kernel, a Triton kernel, cuDNN or the reference loop.

``backend="auto"`` takes the TSRNN_BACKEND environment variable if it is set, else the fastest
correct path for the device:
- CPU: the fused C++ kernels (``tsrnn._C``);
- CUDA: cuDNN for the plain and multi-timescale LSTM (the fixed biases are composed into its bias
  vector, so no optimizer moves them); for the pLSTM, the persistent CUDA kernel
  (``tsrnn._cuda``) where the shape fits on chip, else the Triton kernels (``tsrnn.kernels``).
  Where more than one of these can run a layer, the first call of each shape (device, cell,
  dtype, batch, sizes, a power-of-two bucket of T, grad mode) times each candidate's forward on
  the call's own inputs and keeps the fastest for that shape; ``TSRNN_AUTOTUNE=0``, tracing by
  ``torch.compile`` and CUDA graph capture use the order above instead.
If ``tsrnn._C`` is missing or fails to load, ``"auto"`` on the CPU falls back to
``tsrnn.reference`` with one warning naming the cause; ``"native"`` raises. Triton kernels run on
CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` (the test suite's way to run them
without a GPU).
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Callable, Hashable

import torch

from tsrnn import _validation as check

BACKENDS = ("auto", "reference", "native", "triton")

try:
    from tsrnn import _C  # noqa: F401  (importing it registers torch.ops.tsrnn.*)

    LOAD_ERROR: str | None = None
except (ImportError, OSError) as exc:  # not built, or built against another torch
    LOAD_ERROR = f"{type(exc).__name__}: {exc}"

try:
    from tsrnn import _cuda  # noqa: F401  (registers the CUDA kernels of torch.ops.tsrnn.recurrence_*)

    CUDA_LOAD_ERROR: str | None = None
except (ImportError, OSError) as exc:  # built without CUDA (TSRNN_CUDA=0, no nvcc, CPU torch)
    CUDA_LOAD_ERROR = f"{type(exc).__name__}: {exc}"

_warned: set[str] = set()
_tuned: dict[Hashable, str] = {}  # shape key -> the fastest measured path
TUNE_REPEATS = 2  # timed forward calls per candidate, after one warm-up call


def triton_available() -> bool:
    """True when Triton imports (the kernels still need CUDA or TRITON_INTERPRET=1)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _triton_runs_on(device: torch.device) -> bool:
    return device.type == "cuda" or (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")


def native_available() -> bool:
    """True when the compiled CPU kernels loaded."""
    return LOAD_ERROR is None


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def resolve(backend: str, device: torch.device, op: str = "recurrence", cudnn: bool = False,
            fits: Callable[[], bool] | None = None,
            tune: tuple[Hashable, Callable[[str], object]] | None = None) -> str:
    """Map a requested backend to the one that runs on ``device``: "native", "triton", "cudnn" or
    "reference". ``op``: "recurrence" or "linear_scan". ``cudnn``: the call is an LSTM that cuDNN
    can run. ``fits()``: whether the persistent CUDA kernel takes this call's shape.
    ``tune = (key, run)``: ``run(path)`` runs this call on a path; with it, ``"auto"`` on CUDA
    measures the candidate paths once per ``key`` and returns the fastest."""
    check.choice("backend", backend, BACKENDS)
    if backend == "auto":
        backend = os.environ.get("TSRNN_BACKEND", "auto")
        check.choice("TSRNN_BACKEND", backend, BACKENDS)
    if backend == "reference":
        return "reference"
    if backend == "triton":
        if not triton_available():
            raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
        if not _triton_runs_on(device):
            raise RuntimeError(f"backend='triton' runs on CUDA tensors (or CPU tensors with TRITON_INTERPRET=1), "
                               f"got {device.type} tensors")
        return "triton"
    if device.type == "cuda":
        return _resolve_cuda(backend, op, cudnn, fits, tune)
    if device.type != "cpu":
        if backend == "native":
            raise RuntimeError(
                f"backend='native' has no kernel for {device.type} tensors in this build; "
                "use backend='auto' or 'reference'"
            )
        _warn_once(f"tsrnn: no fused kernel for {device.type} tensors yet; using the reference loop")
        return "reference"
    if LOAD_ERROR is not None:
        if backend == "native":
            raise RuntimeError(
                f"backend='native' needs the compiled extension tsrnn._C, which did not load "
                f"({LOAD_ERROR}); reinstall with `pip install --no-build-isolation -e .`"
            )
        _warn_once(
            f"tsrnn: compiled extension tsrnn._C did not load ({LOAD_ERROR}); "
            "falling back to the reference loops"
        )
        return "reference"
    return "native"


def _resolve_cuda(backend: str, op: str, cudnn: bool, fits: Callable[[], bool] | None,
                  tune: tuple[Hashable, Callable[[str], object]] | None) -> str:
    fallback = "triton" if triton_available() else "reference"
    if backend == "native":
        if CUDA_LOAD_ERROR is not None:
            raise RuntimeError(
                f"backend='native' on CUDA tensors needs the extension tsrnn._cuda, which did not load "
                f"({CUDA_LOAD_ERROR}); build it with `TSRNN_CUDA=1 pip install --no-build-isolation -e .`"
            )
        if op != "recurrence":
            raise RuntimeError(f"backend='native' has no CUDA kernel for {op}; use backend='auto' or 'triton'")
        if fits is not None and fits():
            return "native"
        _warn_once("tsrnn: the persistent CUDA kernel does not take this shape on this GPU (W_hh does not fit "
                   f"in shared memory, or no cooperative launch, or not float32); using {fallback}")
        return fallback
    candidates = ["cudnn"] if cudnn else []
    if CUDA_LOAD_ERROR is None and op == "recurrence" and fits is not None and fits():
        candidates.append("native")
    if fallback == "triton":
        candidates.append("triton")
    if len(candidates) > 1 and tune is not None and _can_measure():
        return _fastest(candidates, *tune)
    if candidates:
        return candidates[0]
    _warn_once("tsrnn: no fused kernel for this call on CUDA (triton is not installed); using the reference loop")
    return "reference"


def _can_measure() -> bool:
    if os.environ.get("TSRNN_AUTOTUNE", "1") == "0" or torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _fastest(candidates: list[str], key: Hashable, run: Callable[[str], object]) -> str:
    """The candidate whose ``run`` is fastest (one warm-up, then TUNE_REPEATS timed calls), measured
    once per key. A candidate that fails is dropped with one warning naming the cause."""
    if key in _tuned:
        return _tuned[key]
    times = {}
    for path in candidates:
        try:
            run(path)  # warm-up: compiles Triton kernels, plans the CUDA kernel
            _sync()
            start = time.perf_counter()
            for _ in range(TUNE_REPEATS):
                run(path)
            _sync()
        except Exception as exc:  # noqa: BLE001  (a broken path must not break "auto"; it is reported)
            _warn_once(f"tsrnn: the {path} path failed while being timed ({type(exc).__name__}: {exc}); "
                       "'auto' does not use it for this shape")
            continue
        times[path] = time.perf_counter() - start
    if not times:
        raise RuntimeError(f"tsrnn: every CUDA path failed for this call ({', '.join(candidates)}); "
                           "see the warnings, or use backend='reference'")
    _tuned[key] = min(times, key=times.get)
    return _tuned[key]
