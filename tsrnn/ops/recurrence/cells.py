"""The recurrent cells, described once: every layer of tsrnn runs one of these.

A cell is the pointwise part of a recurrent step: it maps the gate pre-activations
z = W_ih x_t + W_hh h_{t-1} + b (``gates`` rows per hidden unit, in this order) and the previous
states to h_t and the new states, and saves ``saved`` activations per unit for the backward.

- ``lstm`` (S1): gates (i, f, g, o) as in torch.nn.LSTM; state c.
- ``plstm_coupled`` (S9): gates (r, g, o), i = 1 - f; states (c, a), a the age.
- ``plstm_separate`` (S9): gates (i, r, g, o); states (c, a).

Everything that needs a fact of a cell reads it here: the operators' checks and shape functions
(checks.py, op.py), the Triton drivers (their constexprs), the functional
layer, the modules (parameter rows, state names, the dtype of each state), the test harness and
the benchmarks. The compiled kernels implement the same cells in csrc/recurrence/cells.h (``kGates``,
``kStates``, ``kSaved``); the operators' opcheck tests compare the compiled kernels' output shapes
with this table, so the two cannot drift apart unnoticed.

The dtype rule (``math_dtype``): gate math runs in float64 for float64 inputs and float32 for
every other dtype (bf16/fp16 layers compute in float32); h and the states not in ``math_states``
come back in the input's dtype, the age a in the math dtype (rounding it to bf16 would move every
later forget gate).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tsrnn.ops.recurrence import reference


def math_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a layer or scan of ``dtype`` inputs computes in: float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass(frozen=True)
class Cell:
    name: str
    gates: tuple[str, ...]  # rows of W_ih, W_hh and the bias per hidden unit, in order
    states: tuple[str, ...]  # states carried besides h, in order
    saved: tuple[str, ...]  # activations saved per unit for the backward, in order
    input_gate: str | None = None  # pLSTM: "coupled" (i = 1 - f) or "separate" (i = σ(z_i))
    math_states: tuple[str, ...] = ()  # states kept in the math dtype and >= 0 (the age)

    # derived once, at construction (plain fields: read on every layer call)
    has_p: bool = field(init=False)  # a per-unit decay exponent p (and so a gradient for it): the pLSTM cells
    num_gates: int = field(init=False)  # G: W_hh is (G*H, H)
    num_states: int = field(init=False)  # S: state0 and the final states are (S, B, H)
    num_saved: int = field(init=False)  # K: the saved activations are (T, B, K*H)
    initial_states: tuple[str, ...] = field(init=False)  # the initial-state arguments: ("h0", "c0"[, "a0"])
    initial_math_states: tuple[str, ...] = field(init=False)  # those of ``math_states``: ("a0",) for the pLSTM
    # the per-step traces every path returns: the forget gate "f" and, for the pLSTM, the reset gate
    # "r" and the age "a" (a fused path adds its other saved activations)
    traces: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        has_p = self.input_gate is not None
        derived = {"has_p": has_p, "num_gates": len(self.gates), "num_states": len(self.states),
                   "num_saved": len(self.saved), "initial_states": tuple(f"{s}0" for s in ("h", *self.states)),
                   "initial_math_states": tuple(f"{s}0" for s in self.math_states),
                   "traces": ("f", "r", "a") if has_p else ("f",)}
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def function(self) -> str:
        """The name of this cell's layer in ``tsrnn.functional`` and ``tsrnn.reference``."""
        return "plstm" if self.has_p else "lstm"

    def reference_layer(self, x, h0, states, w_ih, w_hh, bias, p=None, dt=None, eps=0.0, lengths=None, w_hr=None):
        """One layer through the step loop of ``tsrnn.reference``: (out, (h_n, *states_n), traces),
        traces the per-step (T, B, H) forget gates "f" and, for the pLSTM, reset gates "r" and ages "a";
        ``lengths`` (B,) or None, as the reference loops take it; ``w_hr`` the LSTM's projection or None."""
        if not self.has_p:
            out, finals, forget = reference.lstm(x, h0, *states, w_ih, w_hh, bias, lengths=lengths, w_hr=w_hr)
            return out, finals, {"f": forget}
        traces = {}
        out, finals, forget = reference.plstm(x, h0, *states, w_ih, w_hh, bias, p, dt, eps, self.input_gate,
                                              trace=traces, lengths=lengths)
        return out, finals, {"f": forget, **traces}


CELLS = {cell.name: cell for cell in (
    Cell("lstm", gates=("i", "f", "g", "o"), states=("c",), saved=("i", "f", "g", "o")),
    Cell("plstm_coupled", gates=("r", "g", "o"), states=("c", "a"), saved=("f", "r", "g", "o"),
         input_gate="coupled", math_states=("a",)),
    Cell("plstm_separate", gates=("i", "r", "g", "o"), states=("c", "a"), saved=("f", "r", "g", "o", "i"),
         input_gate="separate", math_states=("a",)),
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
