"""tsrnn: fused kernels for timescale-aware recurrent networks.

    import tsrnn
    lstm = tsrnn.LSTM(400, 1150, timescales=[tsrnn.timescales.inverse_gamma_quantiles(1150, 0.56)])
    plstm = tsrnn.PowerLawLSTM(10, 128)

tsrnn/reference.py states the equations (S1-S12) as plain step loops; README.md covers the
backends and benchmarks.

``import tsrnn`` loads the kernels and the modules built on them only (extensions, backend,
cells, functional, ops, reference, timescales, LSTM, PowerLawLSTM, and the kernels' checks and
capacity; the Triton kernels themselves load on their first call). The rest loads on first use
(PEP 562): the submodules analysis, data, models, training, synthetic, plot, convert, contexts,
averaging, tilt, laplace, selftest and cli, and the names TILT, averaging_context,
BufferContext, TILTContext and TILTBufferContext re-exported from them.
"""
import importlib

from tsrnn import backend, cells, functional, ops, reference, timescales
from tsrnn.modules import LSTM, PowerLawLSTM

__version__ = "0.1.0"

# Submodules imported on first attribute access (``tsrnn.data``, ``tsrnn.models``, ...).
_LAZY_SUBMODULES = frozenset({
    "analysis", "averaging", "cli", "contexts", "convert", "data", "laplace", "models", "plot", "selftest",
    "synthetic", "tilt", "training",
})
# Names re-exported from a lazily imported submodule: name -> module.
_LAZY_ATTRS = {
    "TILT": "tsrnn.tilt",
    "averaging_context": "tsrnn.averaging",
    "BufferContext": "tsrnn.contexts",
    "TILTContext": "tsrnn.contexts",
    "TILTBufferContext": "tsrnn.contexts",
}

__all__ = ["LSTM", "PowerLawLSTM", "TILT", "averaging_context", "BufferContext", "TILTContext",
           "TILTBufferContext", "averaging", "contexts", "plot", "convert", "data", "models", "synthetic",
           "training", "backend", "cells", "functional", "ops", "reference", "timescales"]


def __getattr__(name):
    if name in _LAZY_ATTRS:
        value = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
    elif name in _LAZY_SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value   # later accesses skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | _LAZY_SUBMODULES | set(_LAZY_ATTRS))
