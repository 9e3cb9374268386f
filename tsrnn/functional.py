"""One recurrent layer or one scan over a whole sequence, on the path ``tsrnn.backend`` chooses.

Each public function has the signature and results of its reference in ``tsrnn.reference``,
checks its arguments once (``tsrnn._validation``), then runs the path that ``tsrnn.backend``
chooses for the call (``backend=`` a requested backend or a path name) through the function its
registry record holds (``Path.run``: tsrnn/ops/recurrence/paths.py, tsrnn/ops/linear_scan/paths.py).
A warm call of a known key takes the remembered record (``tsrnn.backend.MEMO``).

Gate math runs in ``cells.math_dtype`` (float32 for bf16/fp16 inputs, float64 for float64): h and
c come back in the input's dtype, the pLSTM age a in the math dtype. Under ``torch.autocast`` the
public functions and the modules run the layer in the autocast dtype (``tsrnn.precision``).
The modules call ``_layer`` directly: they check their inputs once in their own layout
(batch_first, unbatched, stacked states, packed rows).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.backend import choice as _choice
from tsrnn.backend.registry import REGISTRY, Call
from tsrnn.ops import library
from tsrnn.ops.recurrence import cells
from tsrnn.ops.recurrence.packing import Packing
from tsrnn.ops.recurrence.paths import Biases, one_bias


def _layer(cell, x, h0, states, w_ih, w_hh, bias, p=None, dt=None, eps=0.0, backend="auto", traces=False,
           batch_sizes=None, w_hr=None):
    """One layer of ``cell`` (a ``cells.Cell``) on the chosen path, arguments unchecked; ``states``
    the initial states after h0 in the cell's order. Returns (out, (h_n, *states_n), traces): with
    ``traces``, a dict of per-step (T, B, H) values holding at least the forget gate "f" and, for
    the pLSTM, the reset gate "r" and the age "a" (a fused path adds its other saved activations);
    None otherwise.

    With ``batch_sizes`` (T,) int64 on the CPU, x (N, I), dt (N,) and out (N, H) are packed
    sequences, the rows sorted by length (``Packing``), batch_sizes[0] == B; h_n and the states
    are each row's after its last step, the traces padded (T, B, H), zero past the ends. ``w_hr``
    (P, H): the LSTM's projection (torch.nn.LSTM's proj_size), h0 and out of P units."""
    packing = None if batch_sizes is None else Packing.in_order(batch_sizes, x.device)
    h0, *rows = (s.unsqueeze(0) for s in (h0, *states))  # the runners' (1, B, ·) rows
    path = _route(cell, x, h0, rows, w_ih, w_hh, bias, p, dt, eps, backend, traces, packing, w_hr)
    out, finals, per_step = path.run["recurrence"](path, cell, x, h0, rows, w_ih, w_hh, bias, p, dt, eps, traces,
                                                   packing, w_hr)
    return out, tuple(f[0] for f in finals), per_step


def _route(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, packing, w_hr=None):
    """The record of the path that runs this layer (``_layer``'s arguments, ``packing`` a
    ``Packing`` of sorted rows or None); its ``run["recurrence"]`` runs it. The modules call this
    and the runner themselves, so a layer costs them two calls.

    The hot path: a call whose key ``MEMO`` holds takes the remembered record at once (no
    candidates, no environment read); tracing and torch.func transforms always choose anew."""
    biases = bias if type(bias) is Biases else (bias,)
    grad = library.needs_grad(x, h0, *states, w_ih, w_hh, *biases, p, w_hr)
    steps = x.shape[0] if packing is None else packing.steps
    key = path = None
    if check.eager():
        # T as a power-of-two bucket, as it enters the tuning key, and the products' precision (a
        # choice verified with TF32 allowed is not one for exact products, nor the other way)
        device = x.device
        key = (cell.name, device, x.dtype, steps.bit_length(), h0.shape[1], x.shape[-1], w_hh.shape[1],
               bias is None, grad, traces, packing is None, w_hr is None, precision.products(x.dtype, device))
        path = _choice.MEMO.get((backend, key))
    if path is None:
        path = REGISTRY[_choose(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, packing, grad,
                                steps, key, w_hr)]
    return path


def _choose(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, packing, grad, steps, key,
            w_hr=None) -> str:
    """``_layer``'s choice of path for a call ``MEMO`` does not hold (``tsrnn.backend.choose``, which
    remembers it under ``key`` unless None), with the run that "auto" times and verifies."""
    hidden = w_hh.shape[1] if w_hr is None else w_hr.shape[1]
    call = Call("recurrence", x.device, x.dtype, (steps, h0.shape[1], x.shape[-1], hidden), cell.name,
                bias is not None, grad, traces, packing is not None, w_hr is not None)
    tensors = (x, h0, *states, w_ih, w_hh, one_bias(bias), p, w_hr)

    def timed(path, dtype=None):
        """The call on detached copies, cast to ``dtype`` if given (dt too: data, no gradient), for
        the backend to time and verify: it joins no graph and fires no hooks. Returns the outputs
        and the copies that need gradients, by name (``tsrnn.backend.choice.Run``)."""
        x, h0, *rest = [None if t is None else t.detach().to(dtype or t.dtype).requires_grad_(t.requires_grad)
                        for t in tensors]
        *states, w_ih, w_hh, bias, p, w_hr = rest
        record = REGISTRY[path]
        out, finals, _ = record.run["recurrence"](record, cell, x, h0, states, w_ih, w_hh, bias, p,
                                                  dt if dt is None or dtype is None else dt.to(dtype), eps, traces,
                                                  packing, w_hr)
        outputs = dict(zip(("out", *(f"{s}_n" for s in ("h", *cell.states))), (out, *finals)))
        names = ("x", *cell.initial_states, "w_ih", "w_hh", "bias", "p", "w_hr")
        return outputs, {name: t for name, t in zip(names, (x, h0, *rest)) if t is not None and t.requires_grad}

    return _choice.choose(backend, call, timed, key)


def _packed_inputs(packing, x, states, dt):
    """A padded batch's layer inputs in the packed layout of ``packing``: x (T, B, I) -> (N, I),
    each per-row state (B, H) -> (live, H) in packed order, dt (T, B) -> (N,) or None."""
    return packing.pack(x), [packing.sort(s) for s in states], None if dt is None else packing.pack(dt)


def _padded_outputs(packing, out, finals, initial, traces):
    """The packed results of a stack of layers back in the padded batch's layout: out (N, H) ->
    (T, B, H) zero past each row's end; each final state (live, H) -> (B, H) per row (a row of no
    step keeps its ``initial`` state); each trace (T', live, H) -> (T, B, H), zero past the ends."""
    finals = tuple(packing.unsort(f, i) for f, i in zip(finals, initial))
    traces = None if traces is None else {k: packing.reorder(v) for k, v in traces.items()}
    return packing.unpack(out), finals, traces


def _lengths_layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, lengths, w_hr=None):
    """``_layer`` over a padded batch whose row b runs its first lengths[b] steps (``tsrnn.ops.recurrence.packing``):
    packed, run, and unpacked; (out, finals, traces) as ``_layer``'s, in the padded layout."""
    packing = Packing.from_lengths(lengths, x.shape[0]).to(x.device)
    if packing.live == 0:  # no row runs a step
        zeros = {name: x.new_zeros(*x.shape[:2], states[0].shape[1]) for name in cell.traces} if traces else None
        return x.new_zeros(*x.shape[:2], h0.shape[1]), (h0, *states), zeros
    x_p, (h0_p, *states_p), dt_p = _packed_inputs(packing, x, (h0, *states), dt)
    out, finals, per_step = _layer(cell, x_p, h0_p, states_p, w_ih, w_hh, bias, p, dt_p, eps, backend, traces,
                                   packing.batch_sizes, w_hr)
    return _padded_outputs(packing, out, finals, (h0, *states), per_step)


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
    cell = cells.CELLS["lstm"]
    with precision.layer_region(x) as low:
        x, h0, c0, w_ih, w_hh, bias, w_hr = precision.cast(low, x, h0, c0, w_ih, w_hh, bias, w_hr)
        check.recurrent_layer(cell, x, h0, (c0,), w_ih, w_hh, bias, w_hr=w_hr)
        out, state, traces = _any_layer(cell, x, h0, (c0,), w_ih, w_hh, bias, None, None, 0.0, backend,
                                        return_forget, lengths, w_hr)
    return (out, state, traces["f"]) if return_forget else (out, state)


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
    with precision.layer_region(x) as low:
        x, h0, c0, w_ih, w_hh, bias = precision.cast(low, x, h0, c0, w_ih, w_hh, bias)
        dt = check.recurrent_layer(cell, x, h0, (c0, a0), w_ih, w_hh, bias, p, dt)
        eps = check.positive_real("eps", eps)
        out, state, traces = _any_layer(cell, x, h0, (c0, a0), w_ih, w_hh, bias, p,
                                        None if dt is None else dt.detach(), eps, backend, return_forget, lengths)
    return (out, state, traces["f"]) if return_forget else (out, state)


def _any_layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, lengths, w_hr=None):
    """The public functions' layer: ``_layer``, or ``_lengths_layer`` with ``lengths`` (checked here)."""
    if lengths is None:
        return _layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, w_hr=w_hr)
    lengths = check.sequence_lengths(lengths, x.shape[0], x.shape[1])
    return _lengths_layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, lengths, w_hr)


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
