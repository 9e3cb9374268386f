"""The recurrent cells' math in Triton, one ``@triton.jit`` pair a cell (the same cells as
tsrnn/ops/recurrence/cells and csrc/recurrence/cells/), and their one dispatch.

The plug-in. A cell's Triton step is a forward and a backward function of one signature each,
elementwise with broadcasting (the forward on (batch x unit) tiles, the backward on flat
(row, unit) vectors; a scalar where an input is absent):

    forward(z0, z1, z2, z3, s0, s1, p0, dt, k0) -> (h, s0', s1', act0, act1, act2, act3, act4)
    backward(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0)
        -> (dz0, dz1, dz2, dz3, dsp0, dsp1, dp0)

z_n: the gate pre-activations of the step, in the ``Cell``'s ``gates`` order (n < G); sp_n, s_n:
the states before and after the step, in ``states`` order (n < S); act_n: the saved activations,
in ``saved`` order (n < K); p0: the cell's first parameter at the unit (``params``, P <= 1);
dt: the step input (Δt; 1.0 without one); k0: its first constant (``constants``, C <= 1). The
forward returns h_t, the new states and the activations to save; the backward takes dh = dL/dh_t
and ds_n = dL/ds_n at t (from the loss and the later steps) and returns dz_n = dL/dz_n, dsp_n =
dL/ds_n at t - 1 and this step's dL/dp0. Entries past the cell's sizes are placeholders, passed
anything and never stored. ``CELLS_TRITON`` maps each cell's name to its pair, which a kernel
takes as its constexpr CELL with the sizes G, S, K, P, C (``constexprs``). A new cell within
``MAX_SIZES`` is its two functions and one line of ``CELLS_TRITON``; past them, widen
triton_plumbing.py's tuples (docs/kernels.md, Triton).
"""
from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

from tsrnn.ops.recurrence.cells import CELLS

# The most gates, states, saved rows, parameters and constants a cell may have (the kernels' tuples).
MAX_SIZES = {"G": 4, "S": 2, "K": 5, "P": 1, "C": 1}


class TritonCell(NamedTuple):
    """A cell's Triton step: its forward and backward ``@triton.jit`` functions (module docstring)."""
    forward: object
    backward: object


def constexprs(cell: str, direction: str) -> dict:
    """{CELL: the cell's ``direction`` ("forward", "backward") function, G, S, K, P, C: its sizes};
    ValueError for a cell with no Triton step or past ``MAX_SIZES``."""
    c = CELLS[cell]
    if cell not in CELLS_TRITON:
        raise ValueError(f"tsrnn: the cell {cell} has no Triton step (cells_triton.CELLS_TRITON)")
    sizes = {"G": c.num_gates, "S": c.num_states, "K": c.num_saved, "P": len(c.params), "C": len(c.constants)}
    over = {k: v for k, v in sizes.items() if not (0 if k in ("P", "C") else 1) <= v <= MAX_SIZES[k]}
    if over:
        raise ValueError(f"tsrnn: the cell {cell} has sizes {over}; the Triton kernels carry {MAX_SIZES} "
                         "(widen cells_triton's register plumbing)")
    return {"CELL": getattr(CELLS_TRITON[cell], direction), **sizes}


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def tanh(x):
    return 2.0 * sigmoid(2.0 * x) - 1.0


@triton.jit
def memory_backward(dh, dc, i, g, o, c):
    """The backward of c = f c' + i g, h = o tanh(c) but for f; returns (dc total, dz_i, dz_g, dz_o).

        tc = tanh(c),  dc += dh o (1 - tc²),  dz_i = dc g i (1 - i),  dz_g = dc i (1 - g²),
        dz_o = dh tc o (1 - o)
    """
    tc = tanh(c)
    dc = dc + dh * o * (1.0 - tc * tc)
    return dc, dc * g * i * (1.0 - i), dc * i * (1.0 - g * g), dh * tc * o * (1.0 - o)


@triton.jit
def lstm_forward(z0, z1, z2, z3, s0, s1, p0, dt, k0):
    """(S1) gates (i, f, g, o) = z0..z3, state c = s0, saved (i, f, g, o).

        i, f, g, o = σ(z0), σ(z1), tanh(z2), σ(z3),  c = f c' + i g,  h = o tanh(c)
    """
    i, f, g, o = sigmoid(z0), sigmoid(z1), tanh(z2), sigmoid(z3)
    c = f * s0 + i * g
    return o * tanh(c), c, s1, i, f, g, o, o


@triton.jit
def lstm_backward(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0):
    """lstm_forward's backward: memory_backward, then dz_f = dc c' f (1 - f), dc' = dc f."""
    i, f, g, o = act0, act1, act2, act3
    dc, dz_i, dz_g, dz_o = memory_backward(dh, ds0, i, g, o, s0)
    return dz_i, dc * sp0 * f * (1.0 - f), dz_g, dz_o, dc * f, ds1, 0.0


@triton.jit
def plstm_forward(COUPLED: tl.constexpr, z_i, z_r, z_g, z_o, c_prev, a_prev, p, dt, eps):
    """(S9) the pLSTM step in age form; returns (h, c, a, f, r, g, o, i).

        r, g, o = σ(z_r), tanh(z_g), σ(z_o),  a = (1 - r)(a' + Δt),
        f = ((a + 1) / ((1 - r)(a' + 1) + ε))^(-p),  i = 1 - f (COUPLED) or σ(z_i),
        c = f c' + i g,  h = o tanh(c)
    """
    r, g, o = sigmoid(z_r), tanh(z_g), sigmoid(z_o)
    s = 1.0 - r
    a = s * (a_prev + dt)
    f = tl.exp(-p * tl.log((a + 1.0) / (s * (a_prev + 1.0) + eps)))
    if COUPLED:
        i = 1.0 - f
    else:
        i = sigmoid(z_i)
    c = f * c_prev + i * g
    return o * tanh(c), c, a, f, r, g, o, i


@triton.jit
def plstm_backward(COUPLED: tl.constexpr, dh, dc, da, f, r, g, o, i, c_prev, a_prev, c, a, p, dt, eps):
    """plstm_forward's backward; returns (dz_i, dz_r, dz_g, dz_o, dc', da', dp) (dz_i is
    meaningless when COUPLED). With log f = -p (log N - log D), N = a + 1,
    D = (1 - r)(a' + 1) + ε, after memory_backward:

        df = dc (c' - g) (COUPLED: i = 1 - f) or dc c',  dlogf = df f,  dp = -dlogf log(N / D),
        dN = da - p dlogf / N,  dD = p dlogf / D,  dz_r = -(dN (a' + Δt) + dD (a' + 1)) r (1 - r),
        dc' = dc f,  da' = (dN + dD)(1 - r)
    """
    if COUPLED:
        i = 1.0 - f
    dc, dz_i, dz_g, dz_o = memory_backward(dh, dc, i, g, o, c)
    s = 1.0 - r
    N = a + 1.0
    D = s * (a_prev + 1.0) + eps
    if COUPLED:
        df = dc * (c_prev - g)
    else:
        df = dc * c_prev
    dlogf = df * f
    dp = -dlogf * tl.log(N / D)
    dN = da - p * dlogf / N
    dD = p * dlogf / D
    dz_r = -(dN * (a_prev + dt) + dD * (a_prev + 1.0)) * r * s
    return dz_i, dz_r, dz_g, dz_o, dc * f, (dN + dD) * s, dp


@triton.jit
def plstm_coupled_forward(z0, z1, z2, z3, s0, s1, p0, dt, k0):
    """Gates (r, g, o) = z0..z2 (i = 1 - f), states (c, a) = (s0, s1), saved (f, r, g, o), p0 = p,
    dt = Δt, k0 = ε."""
    return plstm_forward(True, z0, z0, z1, z2, s0, s1, p0, dt, k0)


@triton.jit
def plstm_coupled_backward(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0):
    dz_i, dz_r, dz_g, dz_o, dc, da, dp = plstm_backward(True, dh, ds0, ds1, act0, act1, act2, act3, act3, sp0, sp1,
                                                        s0, s1, p0, dt, k0)
    return dz_r, dz_g, dz_o, dz_o, dc, da, dp


@triton.jit
def plstm_separate_forward(z0, z1, z2, z3, s0, s1, p0, dt, k0):
    """Gates (i, r, g, o) = z0..z3, states (c, a) = (s0, s1), saved (f, r, g, o, i), p0 = p,
    dt = Δt, k0 = ε."""
    return plstm_forward(False, z0, z1, z2, z3, s0, s1, p0, dt, k0)


@triton.jit
def plstm_separate_backward(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0):
    return plstm_backward(False, dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0)


@triton.jit
def janet_forward(z0, z1, z2, z3, s0, s1, p0, dt, k0):
    """JANET: gates (f, g) = z0, z1, state c = s0, saved (f, i, g), k0 = β.

        f = σ(z_f),  i = 1 - σ(z_f - β),  g = tanh(z_g),  c = f c' + i g,  h = c
    """
    f, i, g = sigmoid(z0), 1.0 - sigmoid(z0 - k0), tanh(z1)
    c = f * s0 + i * g
    return c, c, s1, f, i, g, g, g


@triton.jit
def janet_backward(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0):
    """janet_forward's backward: dc = dL/dc + dh (h = c), dz_f = dc (c' f (1 - f) - g i (1 - i)),
    dz_g = dc i (1 - g²), dc' = dc f."""
    f, i, g = act0, act1, act2
    dc = ds0 + dh
    dz_g = dc * i * (1.0 - g * g)
    return dc * (sp0 * f * (1.0 - f) - g * i * (1.0 - i)), dz_g, dz_g, dz_g, dc * f, ds1, 0.0


CELLS_TRITON = {
    "lstm": TritonCell(lstm_forward, lstm_backward),
    "plstm_coupled": TritonCell(plstm_coupled_forward, plstm_coupled_backward),
    "plstm_separate": TritonCell(plstm_separate_forward, plstm_separate_backward),
    "janet": TritonCell(janet_forward, janet_backward),
}
