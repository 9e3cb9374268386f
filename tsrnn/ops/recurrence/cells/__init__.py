"""The recurrent cells: one file each (its equations, torch step, parameters, step input,
constants, states and traces; ``base.Cell``), and the one list every path reads."""
from __future__ import annotations

from tsrnn.ops.recurrence.cells import janet, lstm, plstm
from tsrnn.ops.recurrence.cells.base import Cell, math_dtype

CELLS = {cell.name: cell for cell in (
    lstm.CELL,
    plstm.COUPLED,
    plstm.SEPARATE,
    janet.CELL,
)}
INPUT_GATES = ("coupled", "separate")  # the pLSTM's two cells, plstm_<input gate>

__all__ = ["CELLS", "Cell", "INPUT_GATES", "get", "math_dtype", "plstm_cell"]


def get(name: str) -> Cell:
    """The cell called ``name``; a ValueError lists the known ones."""
    if name not in CELLS:
        raise ValueError(f"cell must be one of {list(CELLS)}, got {name!r}")
    return CELLS[name]


def plstm_cell(input_gate: str) -> Cell:
    """The pLSTM cell with a ``"coupled"`` or ``"separate"`` input gate."""
    if input_gate not in INPUT_GATES:
        raise ValueError(f"input_gate must be one of {list(INPUT_GATES)}, got {input_gate!r}")
    return CELLS[f"plstm_{input_gate}"]
