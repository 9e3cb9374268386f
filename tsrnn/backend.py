"""Which implementation runs a call: the compiled extension or the reference loop.

``backend="auto"`` takes the TSRNN_BACKEND environment variable if it is set, else the fastest
correct path for the device: the fused C++ kernels (``tsrnn._C``) on the CPU, the Triton kernels
(``tsrnn.kernels``) on CUDA for the ops that have one. If the extension is missing or fails to
load, ``"auto"`` falls back to ``tsrnn.reference`` with one warning naming the cause; ``"native"``
raises. Triton kernels run on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1``
(the test suite's way to run them without a GPU).
"""
from __future__ import annotations

import os
import warnings

import torch

from tsrnn import _validation as check

BACKENDS = ("auto", "reference", "native", "triton")

try:
    from tsrnn import _C  # noqa: F401  (importing it registers torch.ops.tsrnn.*)

    LOAD_ERROR: str | None = None
except (ImportError, OSError) as exc:  # not built, or built against another torch
    LOAD_ERROR = f"{type(exc).__name__}: {exc}"

_warned: set[str] = set()


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


def resolve(backend: str, device: torch.device, has_triton: bool = False) -> str:
    """Map a requested backend to the one that runs on ``device``: "native", "triton" or
    "reference". ``has_triton``: the op has a Triton kernel."""
    check.choice("backend", backend, BACKENDS)
    if backend == "auto":
        backend = os.environ.get("TSRNN_BACKEND", "auto")
        check.choice("TSRNN_BACKEND", backend, BACKENDS)
    if backend == "reference":
        return "reference"
    if backend == "triton":
        if not has_triton:
            raise RuntimeError("backend='triton' has no kernel for this op yet; use 'auto', 'native' or 'reference'")
        if not triton_available():
            raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
        if not _triton_runs_on(device):
            raise RuntimeError(f"backend='triton' runs on CUDA tensors (or CPU tensors with TRITON_INTERPRET=1), "
                               f"got {device.type} tensors")
        return "triton"
    if device.type == "cuda" and has_triton and triton_available():
        return "triton"
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
