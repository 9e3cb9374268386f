"""Pure-PyTorch references: plain step loops that read like docs/equations.md.

They are the executable meaning of the equations and the oracle every fused kernel is tested
against; readable first, not fast. Sequences are time-major: x (T, B, I), states (B, H).
Every recurrent reference returns ``(out, state, forget)`` with ``forget`` the forget-gate
values (T, B, H), the input of ``tsrnn.memory.timescales.estimate_timescales`` (S6).

``lengths`` (B,) of the recurrences (None: every row runs all T steps): row b runs its first
lengths[b] steps only. Past them its output and traces are zero and its states stay those after
its last step (the initial ones for a length of 0), as torch.nn.LSTM's packed sequences.
"""
from __future__ import annotations

import torch

from tsrnn.ops.recurrence.cells import CELLS


def advance(lengths, t, new, old=0):
    """The values after step t: ``new`` for the rows that run it (all rows without lengths),
    ``old`` for those that have ended (0: an output past a row's end)."""
    if lengths is None:
        return new
    return torch.where((lengths.to(new.device) > t).unsqueeze(-1), new, old)


def layer(cell, x, h0, states, w_ih, w_hh, bias=None, params=(), steps=None, constants=None, lengths=None,
          w_hr=None):
    """One layer of ``cell`` (a ``tsrnn.ops.recurrence.cells.Cell``): the loop of every torch use of a cell.

        z_t = W_ih x_t + W_hh h_{t-1} + b,   h_t, s_t = cell.step(z_t, s_{t-1}, params, Δt_t, constants)

    x (T, B, I), h0 (B, H), ``states`` the initial states after h (B, H) each, in the cell's order;
    ``params`` its per-unit parameters (H,) each; ``steps`` its step input (T, B) or None (Δt = 1);
    ``constants`` floats in the cell's order (None: its defaults). With ``w_hr`` (P, H) (the LSTM's
    projection, torch.nn.LSTM's proj_size = P) h_t = W_hr h_t is the output and the state fed back.
    Returns (out (T, B, H), (h_n, *states_n), traces): ``traces`` {name: (T, B, H)} of the cell's
    ``traces``."""
    constants = cell.defaults if constants is None else tuple(constants)
    h, states = h0, tuple(states)
    outs, traces = [], {name: [] for name in cell.traces}
    for t, x_t in enumerate(x):
        z = x_t @ w_ih.T + h @ w_hh.T
        if bias is not None:
            z = z + bias
        delta = 1.0 if steps is None else steps[t].unsqueeze(-1)
        h_new, new, values = cell.step(z, states, params, delta, constants)
        if w_hr is not None:
            h_new = h_new @ w_hr.T
        h, states = advance(lengths, t, h_new, h), tuple(advance(lengths, t, n, s) for n, s in zip(new, states))
        outs.append(advance(lengths, t, h_new))
        values = {**values, **dict(zip(cell.states, new))}
        for name, kept in traces.items():
            kept.append(advance(lengths, t, values[name]))
    return torch.stack(outs), (h, *states), {name: torch.stack(kept) for name, kept in traces.items()}


def lstm_step(z, c):
    """(S1)'s pointwise part: the gates from the pre-activations z (B, 4H) and c_{t-1}; returns
    (h_t, c_t, f)."""
    h, (c_new,), values = CELLS["lstm"].step(z, (c,), (), 1.0, ())
    return h, c_new, values["f"]


def lstm(x, h0, c0, w_ih, w_hh, bias, lengths=None, w_hr=None):
    """(S1) LSTM with gate order (i, f, g, o) and one effective bias b (4H,) or None.

        z = W_ih x_t + W_hh h_{t-1} + b
        i, f, g, o = σ(z_i), σ(z_f), tanh(z_g), σ(z_o)
        c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)

    With ``w_hr`` (P, H), torch.nn.LSTM's projection (proj_size = P): h_t = W_hr (o tanh(c_t)), of
    P units, is the output and the state fed back (W_hh is (4H, P), h0 (B, P)); c stays (B, H).
    """
    out, finals, traces = layer(CELLS["lstm"], x, h0, (c0,), w_ih, w_hh, bias, lengths=lengths, w_hr=w_hr)
    return out, finals, traces["f"]


def plstm_step(z, c, a, p, step, eps, input_gate):
    """(S9)'s pointwise part: the gates from the pre-activations z (B, G*H), c_{t-1} and the age
    a_{t-1}, with Δt ``step`` (a number or (B, 1)); returns (h_t, c_t, a_t, f, r)."""
    h, (c_new, a_new), values = CELLS[f"plstm_{input_gate}"].step(z, (c, a), (p,), step, (eps,))
    return h, c_new, a_new, values["f"], values["r"]


def plstm(x, h0, c0, a0, w_ih, w_hh, bias, p, dt=None, eps=1e-3, input_gate="coupled", trace=None, lengths=None):
    """(S9) Power-law forget-gate LSTM in age form, the state being (h, c, a).

        r = σ(z_r),  a_t = (1 - r)(a_{t-1} + Δt)
        f = ((1 - r)(a_{t-1} + Δt) + 1) / ((1 - r)(a_{t-1} + 1) + ε)) ** -p
        i = 1 - f (coupled) or σ(z_i) (separate)
        c_t = f c_{t-1} + i tanh(z_g),   h_t = σ(z_o) tanh(c_t)

    p (H,) is the decay exponent (already through its sigmoid); dt (T, B) or None for Δt = 1.
    ``trace``: a dict that receives the reset gates "r" and ages "a" of every step, (T, B, H).
    """
    out, finals, traces = layer(CELLS[f"plstm_{input_gate}"], x, h0, (c0, a0), w_ih, w_hh, bias, (p,), dt, (eps,),
                                lengths)
    if trace is not None:
        trace.update(r=traces["r"], a=traces["a"])
    return out, finals, traces["f"]
