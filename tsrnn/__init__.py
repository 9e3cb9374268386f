"""tsrnn: fused kernels for timescale-aware recurrent networks.

    import tsrnn
    lstm = tsrnn.LSTM(400, 1150, timescales=[tsrnn.timescales.inverse_gamma_quantiles(1150, 0.56)])
    plstm = tsrnn.PowerLawLSTM(10, 128)

See SPEC.md for the equations (S1-S12) and README.md for backends and benchmarks.
"""
from tsrnn import backend, functional, ops, reference, timescales
from tsrnn.modules import LSTM, PowerLawLSTM
from tsrnn.tilt import TILT
from tsrnn import averaging, contexts, plot  # noqa: E402  (contexts needs TILT)
from tsrnn.averaging import averaging_context
from tsrnn.contexts import BufferContext, TILTBufferContext, TILTContext
from tsrnn import convert, data, models, tasks  # noqa: E402

__version__ = "0.1.0"
__all__ = ["LSTM", "PowerLawLSTM", "TILT", "averaging_context", "BufferContext", "TILTContext",
           "TILTBufferContext", "averaging", "contexts", "plot", "convert", "data", "models", "tasks", "backend", "functional", "ops", "reference", "timescales"]
