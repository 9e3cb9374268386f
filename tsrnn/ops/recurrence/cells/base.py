"""What a cell is: the record every path reads (``Cell``) and the dtype rule of its math.

A cell is the pointwise part of a recurrent step. From the gate pre-activations
z = W_ih x_t + W_hh h_{t-1} + b, ``gates`` rows per hidden unit in this order, and the states
after h, it computes h_t and the new states. Its torch ``step`` is the reference of every kernel:

    step(z, states, params, delta, constants) -> (h_t, new_states, values)

z (B, G*H); ``states`` the previous states (B, H) each, in ``states`` order; ``params`` the
per-unit parameters (H,) each, in ``params`` order; ``delta`` the step input (B, 1), or 1.0 where
the cell has none or the caller gives none; ``constants`` floats in ``constants`` order;
``values`` a dict holding at least every name of ``traces`` that is not a state.

The compiled kernels implement the same cell in csrc/recurrence/cells/<name>.h and the Triton
kernels in cells_triton.py; ``saved`` names the activations they keep per unit for the backward,
in their order (the operators' output shapes are checked against it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


def math_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a layer or scan of ``dtype`` inputs computes in: float64 for float64, else float32
    (h and the states not in ``Cell.math_states`` come back in the input's dtype)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass(frozen=True)
class Cell:
    name: str
    gates: tuple[str, ...]  # rows of W_ih, W_hh and the bias per hidden unit, in order
    states: tuple[str, ...]  # states carried besides h, in order
    saved: tuple[str, ...]  # activations the fused kernels save per unit, in order
    step: Callable  # the torch step (module docstring)
    params: tuple[str, ...] = ()  # per-unit parameters (H,), learned: they get gradients
    step_input: str | None = None  # a per-step, per-row input (T, B) > 0, data (no gradient); 1 when absent
    constants: tuple[tuple[str, float], ...] = ()  # (name, default) of the float constants
    math_states: tuple[str, ...] = ()  # states kept in the math dtype, >= 0 (a bf16 age would move every gate)
    positive: tuple[str, ...] = ()  # params and constants that must be > 0
    traces: tuple[str, ...] = ("f",)  # the per-step values (T, B, H) every path returns
    torch_kernel: bool = False  # torch's own LSTM kernel (oneDNN, cuDNN) computes this cell

    # derived once, at construction (plain fields: read on every layer call)
    num_gates: int = field(init=False)  # G: W_hh is (G*H, H)
    num_states: int = field(init=False)  # S: state0 and the final states are (S, B, H)
    num_saved: int = field(init=False)  # K: the saved activations are (T, B, K*H)
    initial_states: tuple[str, ...] = field(init=False)  # the initial-state arguments: ("h0", "c0"[, "a0"])
    initial_math_states: tuple[str, ...] = field(init=False)  # those of ``math_states``
    defaults: tuple[float, ...] = field(init=False)  # the constants' defaults, in order

    def __post_init__(self):
        derived = {"num_gates": len(self.gates), "num_states": len(self.states), "num_saved": len(self.saved),
                   "initial_states": tuple(f"{s}0" for s in ("h", *self.states)),
                   "initial_math_states": tuple(f"{s}0" for s in self.math_states),
                   "defaults": tuple(value for _, value in self.constants)}
        for name, value in derived.items():
            object.__setattr__(self, name, value)
