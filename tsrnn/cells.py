"""The recurrent cells, described once: every layer of tsrnn runs one of these.

A cell is the pointwise part of a recurrent step: it maps the gate pre-activations
z = W_ih x_t + W_hh h_{t-1} + b (``gates`` rows per hidden unit, in this order) and the previous
states to h_t and the new states, and saves ``saved`` activations per unit for the backward.

- ``lstm`` (S1): gates (i, f, g, o) as in torch.nn.LSTM; state c.
- ``plstm_coupled`` (S9): gates (r, g, o), i = 1 - f; states (c, a), a the age.
- ``plstm_separate`` (S9): gates (i, r, g, o); states (c, a).

Everything that needs a cell's sizes reads them here: the operator schemas' shape functions
(tsrnn/ops.py), the Triton drivers (kernels/), the modules, the test harness and the benchmarks.
The compiled kernels implement the same cells in csrc/cells.h (``kGates``, ``kStates``,
``kSaved``, ``kForget``); the operators' opcheck tests compare the compiled kernels' output shapes
with this table, so the two cannot drift apart unnoticed. ``kernel_id`` is the ``CELL``
compile-time constant of the Triton plug-in (kernels/cells.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    name: str
    kernel_id: int
    gates: tuple[str, ...]  # rows of W_ih, W_hh and the bias per hidden unit, in order
    states: tuple[str, ...]  # states carried besides h, in order
    saved: tuple[str, ...]  # activations saved per unit for the backward, in order
    has_p: bool  # a per-unit decay exponent p (and so a gradient for it)

    @property
    def num_gates(self) -> int:
        """G: W_hh is (G*H, H)."""
        return len(self.gates)

    @property
    def num_states(self) -> int:
        """S: state0 and the final states are (S, B, H)."""
        return len(self.states)

    @property
    def num_saved(self) -> int:
        """K: the saved activations are (T, B, K*H)."""
        return len(self.saved)

    @property
    def forget_slot(self) -> int:
        """Where the forget gate f lies among the saved activations."""
        return self.saved.index("f")


CELLS = {cell.name: cell for cell in (
    Cell("lstm", 0, gates=("i", "f", "g", "o"), states=("c",), saved=("i", "f", "g", "o"), has_p=False),
    Cell("plstm_coupled", 1, gates=("r", "g", "o"), states=("c", "a"), saved=("f", "r", "g", "o"), has_p=True),
    Cell("plstm_separate", 2, gates=("i", "r", "g", "o"), states=("c", "a"), saved=("f", "r", "g", "o", "i"),
         has_p=True),
)}
INPUT_GATES = ("coupled", "separate")


def get(name: str) -> Cell:
    """The cell called ``name``; a ValueError lists the known ones."""
    if name not in CELLS:
        raise ValueError(f"cell must be one of {list(CELLS)}, got {name!r}")
    return CELLS[name]


def plstm(input_gate: str) -> Cell:
    """The pLSTM cell with a ``"coupled"`` or ``"separate"`` input gate."""
    if input_gate not in INPUT_GATES:
        raise ValueError(f"input_gate must be one of {list(INPUT_GATES)}, got {input_gate!r}")
    return CELLS[f"plstm_{input_gate}"]
