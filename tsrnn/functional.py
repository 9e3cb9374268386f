"""The public functions: one recurrent layer or one scan over a whole sequence, on the path
``tsrnn.backend`` chooses (``backend=`` a requested backend or a path name).

Each layer function has the signature and results of its reference in ``tsrnn.reference``,
checks its arguments once (``tsrnn._validation``), then runs through ``tsrnn.backend.routing``.
Gate math runs in ``cells.math_dtype`` (float32 for bf16/fp16 inputs, float64 for float64): h and
the states come back in the input's dtype, those of ``Cell.math_states`` (the pLSTM's age) in the
math dtype. Under ``torch.autocast`` the layer runs in the autocast dtype (``tsrnn.precision``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.backend import choice as _choice
from tsrnn.backend import routing
from tsrnn.backend.registry import REGISTRY, Call
from tsrnn.ops.recurrence import cells
from tsrnn.ops.recurrence.layer import Inputs, Layer
from tsrnn.ops.recurrence.packing import Packing


def recurrence(cell: str, x: Tensor, h0: Tensor, states: Sequence[Tensor], w_ih: Tensor, w_hh: Tensor,
               bias: Tensor | None = None, params: Sequence[Tensor] = (), steps: Tensor | None = None,
               constants: Sequence[float] | None = None, backend: str = "auto", return_traces: bool = False,
               lengths: Tensor | Sequence[int] | None = None, w_hr: Tensor | None = None) -> tuple:
    """One layer of any cell of ``tsrnn.ops.recurrence.cells.CELLS`` by name (docs/equations.md):
    ``out, (h_n, *states_n) = recurrence(cell, x, h0, states, w_ih, w_hh, bias, params)``.

    x (T, B, I); h0 (B, H) and ``states`` (B, H) each in the cell's order (``Cell.states``);
    w_ih (G*H, I), w_hh (G*H, H), bias (G*H,) or None; ``params`` the cell's per-unit parameters
    (H,) each (``Cell.params``); ``steps`` its step input (T, B) > 0 (data: no gradient) or None;
    ``constants`` its floats in order (None: the cell's defaults). With ``return_traces`` also
    returns {name: (T, B, H)} holding at least the cell's ``traces``. ``lengths`` (B,) integers in
    [0, T] or None: row b runs its first lengths[b] steps only, as torch.nn.LSTM runs packed
    sequences: out is zero past each row's end and the final states are each row's after its last
    step. ``w_hr`` (P, H): the LSTM's projection (torch.nn.LSTM's proj_size)."""
    described = cells.get(cell)
    low_states = [i for i, name in enumerate(described.states) if name not in described.math_states]
    with precision.layer_region(x) as low:
        x, h0, w_ih, w_hh, bias, w_hr = precision.cast(low, x, h0, w_ih, w_hh, bias, w_hr)
        states = [precision.cast(low, s)[0] if i in low_states else s for i, s in enumerate(states)]
        steps, values = check.recurrent_layer(described, x, h0, states, w_ih, w_hh, bias, params, steps, w_hr,
                                              described.defaults if constants is None else constants)
        layer = Layer(described, w_ih, w_hh, bias, None, w_hr, tuple(params), values)
        steps = None if steps is None else steps.detach()
        if lengths is None:
            out, finals, traces = _run(layer, x, h0, states, steps, backend, return_traces)
        else:
            lengths = check.sequence_lengths(lengths, x.shape[0], x.shape[1])
            out, finals, traces = _lengths_layer(layer, x, h0, states, steps, backend, return_traces, lengths)
    return (out, finals, traces) if return_traces else (out, finals)


def lstm(x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None = None,
         backend: str = "auto", return_forget: bool = False, lengths: Tensor | Sequence[int] | None = None,
         w_hr: Tensor | None = None) -> tuple:
    """(S1) over a sequence: ``out, (h_n, c_n) = lstm(x, h0, c0, w_ih, w_hh, bias)``.

    x (T, B, I), h0/c0 (B, H), w_ih (4H, I), w_hh (4H, H), bias (4H,) the effective bias or None.
    ``w_hr`` (P, H) with P < H: torch.nn.LSTM's projection (proj_size = P), h_t = W_hr (o tanh(c_t));
    then h0, out and h_n have P units and w_hh is (4H, P). Only torch's LSTM kernels and the
    reference run a projected layer (the fused kernels recur on h of H units).
    With ``return_forget=True`` also returns the forget gates (T, B, H).
    ``lengths`` (B,) integers in [0, T] on any device, or None: row b runs its first lengths[b]
    steps only, as torch.nn.LSTM runs packed sequences: out is zero past each row's end, h_n and
    c_n are each row's after its last step (h0, c0 for a length of 0).
    """
    result = recurrence("lstm", x, h0, (c0,), w_ih, w_hh, bias, backend=backend, return_traces=return_forget,
                        lengths=lengths, w_hr=w_hr)
    return (*result[:2], result[2]["f"]) if return_forget else result


def plstm(x: Tensor, h0: Tensor, c0: Tensor, a0: Tensor, w_ih: Tensor, w_hh: Tensor, bias: Tensor | None, p: Tensor,
          dt: Tensor | None = None, eps: float = 1e-3, input_gate: str = "coupled", backend: str = "auto",
          return_forget: bool = False, lengths: Tensor | Sequence[int] | None = None) -> tuple:
    """(S9) over a sequence: ``out, (h_n, c_n, a_n) = plstm(x, h0, c0, a0, w_ih, w_hh, bias, p)``.

    w_ih (G*H, I), w_hh (G*H, H), bias (G*H,) or None with G = 3 (coupled: r, g, o) or 4
    (separate: i, r, g, o); p (H,) the decay exponents, finite and > 0; a0 (B, H) the age (zeros at the start);
    dt (T, B) or (T, B, 1) step lengths > 0, or None for Δt = 1. dt is data: it gets no gradient.
    ``lengths`` as for ``lstm``: a_n too is each row's age after its last step.
    """
    cell = cells.plstm_cell(input_gate)
    result = recurrence(cell.name, x, h0, (c0, a0), w_ih, w_hh, bias, (p,), dt, (eps,), backend, return_forget,
                        lengths)
    return (*result[:2], result[2]["f"]) if return_forget else result


def _run(layer: Layer, x, h0, states, steps, backend, traces, packing=None):
    """One checked layer on its path, states (B, ·) in and out."""
    inputs = Inputs(x, h0.unsqueeze(0), tuple(s.unsqueeze(0) for s in states), steps, packing)
    out, finals, per_step = routing.run(layer, inputs, backend, traces)
    return out, tuple(f[0] for f in finals), per_step


def _lengths_layer(layer: Layer, x, h0, states, steps, backend, traces, lengths):
    """``_run`` over a padded batch whose row b runs its first lengths[b] steps: packed
    (``tsrnn.ops.recurrence.packing``), run, and unpacked; traces (T, B, H), zero past the ends."""
    packing = Packing.from_lengths(lengths, x.shape[0]).to(x.device)
    if packing.live == 0:  # no row runs a step
        zeros = {name: x.new_zeros(*x.shape[:2], states[0].shape[1]) for name in layer.cell.traces} if traces else None
        return x.new_zeros(*x.shape[:2], h0.shape[1]), (h0, *states), zeros
    initial = (h0, *states)
    x_p, (h0_p, *states_p) = packing.pack(x), [packing.sort(s) for s in initial]
    steps_p = None if steps is None else packing.pack(steps)
    out, finals, per_step = _run(layer, x_p, h0_p, states_p, steps_p, backend, traces,
                                 Packing.in_order(packing.batch_sizes, x.device))
    finals = tuple(packing.unsort(f, i) for f, i in zip(finals, initial))
    per_step = None if per_step is None else {k: packing.reorder(v) for k, v in per_step.items()}
    return packing.unpack(out), finals, per_step


def linear_scan(a: Tensor, u: Tensor, x0: Tensor | None = None, backend: str = "auto") -> Tensor:
    """x_t = a_t x_{t-1} + u_t elementwise over u (T, ...); a broadcasts against u; x0 (...)."""
    check.tensor("u", u)
    check.tensor("a", a)
    if u.dim() < 1 or u.shape[0] < 1:
        raise ValueError(f"u must be (T, ...) with T >= 1, got shape {tuple(u.shape)}")
    try:
        torch.broadcast_to(a, u.shape)
    except RuntimeError:
        raise ValueError(f"a of shape {tuple(a.shape)} does not broadcast to u {tuple(u.shape)}") from None
    if x0 is not None:
        check.tensor("x0", x0)
        check.shape("x0", x0, u.shape[1:])
    check.same_dtype("u", u, a=a, x0=x0)
    check.same_device("u", u, a=a, x0=x0)
    record = REGISTRY[_choice.choose(backend, Call("linear_scan", u.device, u.dtype, (u.shape[0], u[0].numel())))]
    return record.run["linear_scan"](record, a, u, x0)
