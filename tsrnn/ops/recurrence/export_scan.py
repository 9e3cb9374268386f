"""A recurrent layer as one scan over the reference step: what torch.export (and so
``torch.onnx.export(..., dynamo=True)``) records for the pLSTM, and for the LSTM of a dynamic
sequence length.

``layer`` computes z_t = x_t W_ih^T + b + h_{t-1} W_hh^T and the cell's pointwise step
(``tsrnn.reference.lstm_step`` / ``plstm_step``, the equations of ``tsrnn.reference``) inside
torch's scan operator. torch.export keeps the time loop as that one operator, which ONNX export
writes as an ONNX Scan, so the exported graph runs any sequence length; the reference loops
would be unrolled into T copies of the step for the traced T. Eager calls run the same scan step
by step (tests compare it with the reference loops).

It calls the operator itself (``torch._higher_order_ops.scan.scan_op``, a prototype in torch
2.13) with the weights as explicit inputs, not the ``scan`` wrapper: the wrapper runs the step
through a torch.compile whose cache outlives an export, and a second export in the same process
then specialized T to the first one's length (seen with torch 2.13).
"""
from __future__ import annotations

from tsrnn.ops.recurrence import reference


def layer(cell, x, h0, states, w_ih, w_hh, bias, p=None, dt=None, eps=0.0):
    """One layer of ``cell`` (a ``tsrnn.ops.recurrence.cells.Cell``) over x (T, B, I) from h0 and ``states`` (the
    cell's states after h, each (B, H)); dt (T, B) or None. Returns (out (T, B, H), (h_n, *states_n))."""
    from torch._higher_order_ops.scan import scan_op  # a private module: imported where export needs it

    xg = x @ w_ih.T if bias is None else x @ w_ih.T + bias
    scanned = [xg] if dt is None else [xg, dt.unsqueeze(-1)]
    weights = (w_hh,) if p is None else (w_hh, p)
    carried = 1 + len(states)

    def step(*args):  # (h, *states, xg_t[, dt_t], w_hh[, p]) -> (h, *states, h)
        h, *previous = args[:carried]
        z = args[carried] + h @ args[-len(weights)].T
        if cell.has_p:
            delta = args[carried + 1] if dt is not None else 1.0
            h, c, a, _, _ = reference.plstm_step(z, *previous, args[-1], delta, eps, cell.input_gate)
            return h, c, a, h.clone()
        h, c, _ = reference.lstm_step(z, *previous)
        return h, c, h.clone()

    *finals, out = scan_op(step, [h0, *states], scanned, additional_inputs=weights)
    return out, tuple(finals)
