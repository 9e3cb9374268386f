"""tsrnn: fused kernels for timescale-aware recurrent networks.

    import tsrnn
    lstm = tsrnn.LSTM(400, 1150, timescales=[tsrnn.timescales.inverse_gamma_quantiles(1150, 0.56)])
    plstm = tsrnn.PowerLawLSTM(10, 128)

ARCHITECTURE.md says what each folder holds: the engine (modules, functional, ops, backend), the
memory science (tsrnn.memory) and the research application (tsrnn.lab), which imports the engine
and is never imported by it.

``import tsrnn`` loads the engine only (the modules, the functional API, the ops and the
dispatcher; the Triton kernels load on their first call). The rest loads on first use (PEP 562):
the memory science, the lab, and the names TILT, averaging_context, BufferContext, TILTContext,
TILTBufferContext and load (``tsrnn.load(path)``: a checkpoint or run folder of ``tsrnn train`` as a
ready model, tsrnn.lab.loading). The modules' earlier homes (``tsrnn.timescales``, ``tsrnn.data``,
``tsrnn.training``, ``tsrnn.cells``, ...) stay importable, as attributes and in import statements:
``tsrnn._moved`` maps each to its home.
"""
import importlib

from tsrnn import _moved, backend, functional, ops, reference
from tsrnn._version import VERSION as __version__
from tsrnn.modules import LSTM, PowerLawLSTM

# Names re-exported from a lazily imported module: name -> module.
_LAZY_ATTRS = {
    "TILT": "tsrnn.memory.tilt",
    "averaging_context": "tsrnn.memory.averaging",
    "BufferContext": "tsrnn.memory.contexts",
    "TILTContext": "tsrnn.memory.contexts",
    "TILTBufferContext": "tsrnn.memory.contexts",
    "load": "tsrnn.lab.loading",
}

__all__ = ["LSTM", "PowerLawLSTM", "load", "TILT", "averaging_context", "BufferContext", "TILTContext",
           "TILTBufferContext", "averaging", "contexts", "plot", "convert", "data", "models",
           "training", "backend", "cells", "functional", "ops", "reference", "timescales"]


def __getattr__(name):
    if name in _LAZY_ATTRS:
        value = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
    elif name in ("memory", "lab") or f"{__name__}.{name}" in _moved.HOMES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value   # later accesses skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_LAZY_ATTRS) | {n.split(".")[1] for n in _moved.HOMES})
