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


def advance(lengths, t, new, old=0):
    """The values after step t: ``new`` for the rows that run it (all rows without lengths),
    ``old`` for those that have ended (0: an output past a row's end)."""
    if lengths is None:
        return new
    return torch.where((lengths.to(new.device) > t).unsqueeze(-1), new, old)


def lstm_step(z, c):
    """(S1)'s pointwise part: the gates from the pre-activations z (B, 4H) and c_{t-1}; returns
    (h_t, c_t, f)."""
    z_i, z_f, z_g, z_o = z.chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(z_i), torch.sigmoid(z_f), torch.tanh(z_g), torch.sigmoid(z_o)
    c_new = f * c + i * g
    return o * torch.tanh(c_new), c_new, f


def lstm(x, h0, c0, w_ih, w_hh, bias, lengths=None, w_hr=None):
    """(S1) LSTM with gate order (i, f, g, o) and one effective bias b (4H,) or None.

        z = W_ih x_t + W_hh h_{t-1} + b
        i, f, g, o = σ(z_i), σ(z_f), tanh(z_g), σ(z_o)
        c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)

    With ``w_hr`` (P, H), torch.nn.LSTM's projection (proj_size = P): h_t = W_hr (o tanh(c_t)), of
    P units, is the output and the state fed back (W_hh is (4H, P), h0 (B, P)); c stays (B, H).
    """
    h, c = h0, c0
    outs, forgets = [], []
    for t, x_t in enumerate(x):
        z = x_t @ w_ih.T + h @ w_hh.T
        if bias is not None:
            z = z + bias
        h_new, c_new, f = lstm_step(z, c)
        if w_hr is not None:
            h_new = h_new @ w_hr.T
        h, c = advance(lengths, t, h_new, h), advance(lengths, t, c_new, c)
        outs.append(advance(lengths, t, h_new))
        forgets.append(advance(lengths, t, f))
    return torch.stack(outs), (h, c), torch.stack(forgets)


def _plstm_gates(z, input_gate):
    """Split pLSTM pre-activations: coupled (r, g, o), separate (i, r, g, o); i is None if coupled."""
    if input_gate == "coupled":
        z_r, z_g, z_o = z.chunk(3, dim=-1)
        return None, torch.sigmoid(z_r), torch.tanh(z_g), torch.sigmoid(z_o)
    z_i, z_r, z_g, z_o = z.chunk(4, dim=-1)
    return torch.sigmoid(z_i), torch.sigmoid(z_r), torch.tanh(z_g), torch.sigmoid(z_o)


def plstm_step(z, c, a, p, step, eps, input_gate):
    """(S9)'s pointwise part: the gates from the pre-activations z (B, G*H), c_{t-1} and the age
    a_{t-1}, with Δt ``step`` (a number or (B, 1)); returns (h_t, c_t, a_t, f, r)."""
    i, r, g, o = _plstm_gates(z, input_gate)
    f = (((1 - r) * (a + step) + 1) / ((1 - r) * (a + 1) + eps)) ** -p
    a_new = (1 - r) * (a + step)
    if i is None:
        i = 1 - f
    c_new = f * c + i * g
    return o * torch.tanh(c_new), c_new, a_new, f, r


def plstm(x, h0, c0, a0, w_ih, w_hh, bias, p, dt=None, eps=1e-3, input_gate="coupled", trace=None, lengths=None):
    """(S9) Power-law forget-gate LSTM in age form, the state being (h, c, a).

        r = σ(z_r),  a_t = (1 - r)(a_{t-1} + Δt)
        f = ((1 - r)(a_{t-1} + Δt) + 1) / ((1 - r)(a_{t-1} + 1) + ε)) ** -p
        i = 1 - f (coupled) or σ(z_i) (separate)
        c_t = f c_{t-1} + i tanh(z_g),   h_t = σ(z_o) tanh(c_t)

    p (H,) is the decay exponent (already through its sigmoid); dt (T, B) or None for Δt = 1.
    ``trace``: a dict that receives the reset gates "r" and ages "a" of every step, (T, B, H).
    """
    h, c, a = h0, c0, a0
    outs, forgets, resets, ages = [], [], [], []
    for t, x_t in enumerate(x):
        z = x_t @ w_ih.T + h @ w_hh.T
        if bias is not None:
            z = z + bias
        step = 1.0 if dt is None else dt[t].unsqueeze(-1)
        h_new, c_new, a_new, f, r = plstm_step(z, c, a, p, step, eps, input_gate)
        h, c, a = advance(lengths, t, h_new, h), advance(lengths, t, c_new, c), advance(lengths, t, a_new, a)
        outs.append(advance(lengths, t, h_new))
        forgets.append(advance(lengths, t, f))
        resets.append(advance(lengths, t, r))
        ages.append(advance(lengths, t, a_new))
    if trace is not None:
        trace.update(r=torch.stack(resets), a=torch.stack(ages))
    return torch.stack(outs), (h, c, a), torch.stack(forgets)


def plstm_literal(x, h0, c0, w_ih, w_hh, bias, p, dt=None, eps=1e-3, input_gate="coupled"):
    """(S7)/(S8) pLSTM written with absolute time t and reference time k, from k_0 = t_0 = 0.

        t   = t_prev + Δt
        k_t = r t + (1 - r) k_prev
        k~  = r (t - Δt + 1) + (1 - r) k_prev
        f   = ((t - k_t + 1) / (t - Δt - k~ + 1 + ε)) ** -p

    With Δt = 1, k~ = k_t and this is (S7). It loses precision as t grows (it subtracts two
    large times); it exists to check the age form (S9), which is the same function.
    Returns ``(out, (h, c, k, t), forget)``.
    """
    h, c = h0, c0
    k = torch.zeros_like(c0)
    t = torch.zeros_like(c0)
    outs, forgets = [], []
    for step_index, x_t in enumerate(x):
        z = x_t @ w_ih.T + h @ w_hh.T
        if bias is not None:
            z = z + bias
        i, r, g, o = _plstm_gates(z, input_gate)
        step = 1.0 if dt is None else dt[step_index].unsqueeze(-1)
        t = t + step
        k_tilde = r * (t - step + 1) + (1 - r) * k
        k = r * t + (1 - r) * k
        f = ((t - k + 1) / (t - step - k_tilde + 1 + eps)) ** -p
        if i is None:
            i = 1 - f
        c = f * c + i * g
        h = o * torch.tanh(c)
        outs.append(h)
        forgets.append(f)
    return torch.stack(outs), (h, c, k, t), torch.stack(forgets)
