"""Which implementation runs a call: the compiled extension or the reference loop.

``backend="auto"`` takes the TSRNN_BACKEND environment variable if it is set, else the fastest
correct path for the device: the fused C++ kernels (``tsrnn._C``) on the CPU. If the extension is
missing or fails to load, ``"auto"`` falls back to ``tsrnn.reference`` with one warning naming
the cause; ``"native"`` raises.
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


def native_available() -> bool:
    """True when the compiled CPU kernels loaded."""
    return LOAD_ERROR is None


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def resolve(backend: str, device: torch.device) -> str:
    """Map a requested backend to the one that runs on ``device``: "native" or "reference"."""
    check.choice("backend", backend, BACKENDS)
    if backend == "auto":
        backend = os.environ.get("TSRNN_BACKEND", "auto")
        check.choice("TSRNN_BACKEND", backend, BACKENDS)
    if backend == "reference":
        return "reference"
    if backend == "triton":
        raise RuntimeError("backend='triton' is not in this release yet; use 'auto', 'native' or 'reference'")
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
