"""The compiled extensions, loaded once: ``tsrnn._C`` registers the CPU kernels of
``torch.ops.tsrnn.*`` and ``tsrnn._cuda`` their CUDA kernels. A missing or broken extension is
recorded (why it did not load), never raised: the dispatcher (tsrnn/backend/) then falls back
with a one-time warning or says why a path cannot run.

``tsrnn/_built_with.py``, written by setup.py, names the torch the extensions were built against
and why any of them was not built. An extension built against another torch release is not
imported at all: libtorch's C++ ABI changes between releases, and loading it could fail in
obscure ways or crash.
"""
from __future__ import annotations

import importlib

import torch

REBUILD = "reinstall tsrnn against this torch: pip install --no-build-isolation ."


def _built_with() -> tuple[str | None, dict]:
    """(the torch version the extensions were built against, {extension: why not built}), or
    (None, {}) where setup.py did not record them (a source tree that was never built)."""
    try:
        from tsrnn._built_with import NOT_BUILT, TORCH_VERSION
    except ImportError:
        return None, {}
    return TORCH_VERSION, NOT_BUILT


def _release(version: str) -> str:
    """The public release of a torch version: 2.13.0 for 2.13.0+cpu (its variants share the C++ API)."""
    return version.split("+")[0]


def _load(module: str) -> str | None:
    """Import a compiled extension (which registers its kernels); None, or why it did not load."""
    built_against, not_built = _built_with()
    if module in not_built:
        return f"{module} was not built: {not_built[module]}"
    if built_against is not None and _release(built_against) != _release(torch.__version__):
        return f"{module} was built against torch {built_against}, but torch {torch.__version__} is running; {REBUILD}"
    try:
        importlib.import_module(module)
    except (ImportError, OSError) as exc:  # not built, or built against another torch
        return f"{type(exc).__name__}: {exc}"
    return None


LOAD_ERROR = _load("tsrnn._C")  # the CPU kernels of torch.ops.tsrnn.*
CUDA_LOAD_ERROR = _load("tsrnn._cuda")  # their CUDA kernels; missing when built without CUDA (TSRNN_CUDA=0, CPU torch)
