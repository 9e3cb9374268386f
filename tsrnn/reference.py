"""The pure-PyTorch references, in one place: the plain step loops that state tsrnn's equations
(docs/equations.md, S1-S13) and the oracle every fused kernel is tested against. They live with
their ops (tsrnn/ops/recurrence/reference.py, tsrnn/ops/linear_scan/reference.py) and TILT's with
the memory science (tsrnn/memory/tilt_reference.py); this module hands them on."""
from tsrnn.memory.tilt_reference import tilt
from tsrnn.ops.linear_scan.reference import linear_scan
from tsrnn.ops.recurrence.cells.plstm import plstm_literal
from tsrnn.ops.recurrence.reference import layer, lstm, lstm_step, plstm, plstm_step

__all__ = ["layer", "linear_scan", "lstm", "lstm_step", "plstm", "plstm_literal", "plstm_step", "tilt"]
