"""The compiled extensions, loaded once: ``tsrnn._C`` registers the CPU kernels of
``torch.ops.tsrnn.*`` and ``tsrnn._cuda`` their CUDA kernels. A missing or broken extension is
recorded (why it did not load), never raised: the dispatcher (tsrnn/backend.py) then falls back
with a one-time warning or says why a path cannot run.
"""
from __future__ import annotations

import importlib


def _load(module: str) -> str | None:
    """Import a compiled extension (which registers its kernels); None, or why it did not load."""
    try:
        importlib.import_module(module)
    except (ImportError, OSError) as exc:  # not built, or built against another torch
        return f"{type(exc).__name__}: {exc}"
    return None


LOAD_ERROR = _load("tsrnn._C")  # the CPU kernels of torch.ops.tsrnn.*
CUDA_LOAD_ERROR = _load("tsrnn._cuda")  # their CUDA kernels; missing when built without CUDA (TSRNN_CUDA=0, CPU torch)
