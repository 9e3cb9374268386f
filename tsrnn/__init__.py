"""tsrnn: fused kernels for timescale-aware recurrent networks.

    import tsrnn
    lstm = tsrnn.LSTM(400, 1150, timescales=[tsrnn.memory.timescales.inverse_gamma_quantiles(1150, 0.56)])
    plstm = tsrnn.PowerLawLSTM(10, 128)

ARCHITECTURE.md says what each folder holds: the engine (modules, functional, ops, backend), the
memory science (tsrnn.memory) and the research application (tsrnn.lab), which imports the engine
and is never imported by it. Each module has one import path, its home there.

``import tsrnn`` loads the engine only (the modules, the functional API, the ops and the
dispatcher; the Triton kernels load on their first call). The rest loads on first use (PEP 562):
the packages ``memory`` and ``lab``, ``timescales`` (the module tsrnn.memory.timescales by a short
name, an attribute only: import statements take its home), and the names TILT, averaging_context,
BufferContext, TILTContext, TILTBufferContext and load (``tsrnn.load(path)``: a checkpoint or run
folder of ``tsrnn train`` as a ready model, tsrnn.lab.loading).
"""
import importlib

from tsrnn import backend, functional, ops, reference
from tsrnn._version import VERSION as __version__
from tsrnn.modules import LSTM, PowerLawLSTM, Recurrent

# Names re-exported from a lazily imported module: name -> module.
_LAZY_ATTRS = {
    "TILT": "tsrnn.memory.tilt",
    "averaging_context": "tsrnn.memory.averaging",
    "BufferContext": "tsrnn.memory.contexts",
    "TILTContext": "tsrnn.memory.contexts",
    "TILTBufferContext": "tsrnn.memory.contexts",
    "load": "tsrnn.lab.loading",
}

# Modules loaded on first use: attribute name -> module.
_LAZY_MODULES = {
    "memory": "tsrnn.memory",
    "lab": "tsrnn.lab",
    "timescales": "tsrnn.memory.timescales",
}

# Not memory and lab: pdoc documents those packages on their own pages (docs/build_api.py).
__all__ = ["LSTM", "PowerLawLSTM", "Recurrent", "load", "TILT", "averaging_context", "BufferContext", "TILTContext",
           "TILTBufferContext", "backend", "functional", "ops", "reference", "timescales"]


def __getattr__(name):
    if name in _LAZY_ATTRS:
        value = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
    elif name in _LAZY_MODULES:
        value = importlib.import_module(_LAZY_MODULES[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value   # later accesses skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_LAZY_ATTRS) | set(_LAZY_MODULES))
