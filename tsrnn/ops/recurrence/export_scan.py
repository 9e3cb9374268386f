"""A recurrent layer as one scan over the cell's torch step: what torch.export (and so
``torch.onnx.export(..., dynamo=True)``) records for a layer of a dynamic sequence length.

``layer`` computes z_t = x_t W_ih^T + b + h_{t-1} W_hh^T and the cell's step (``Cell.step``)
inside torch's scan operator. torch.export keeps the time loop as that one operator, which ONNX
export writes as an ONNX Scan, so the exported graph runs any sequence length; the reference
loop would be unrolled into T copies of the step for the traced T. Eager calls run the same scan
step by step (tests compare it with the reference loop).

It calls the operator itself (``torch._higher_order_ops.scan.scan_op``) with the weights as
explicit inputs, not the ``scan`` wrapper, whose torch.compile cache outlives an export
(docs/backends.md, ONNX).
"""
from __future__ import annotations


def layer(cell, x, h0, states, w_ih, w_hh, bias, params=(), steps=None, constants=None):
    """One layer of ``cell`` (a ``tsrnn.ops.recurrence.cells.Cell``) over x (T, B, I) from h0 and
    ``states`` (the cell's states after h, each (B, H)); ``params`` (H,) each, ``steps`` (T, B) or
    None, ``constants`` (None: the cell's defaults). Returns (out (T, B, H), (h_n, *states_n))."""
    from torch._higher_order_ops.scan import scan_op  # a private module: imported where export needs it

    constants = cell.defaults if constants is None else tuple(constants)
    xg = x @ w_ih.T if bias is None else x @ w_ih.T + bias
    scanned = [xg] if steps is None else [xg, steps.unsqueeze(-1)]
    carried = 1 + len(states)

    def step(*args):  # (h, *states, xg_t[, steps_t], w_hh, *params) -> (h, *states, h)
        h, *previous = args[:carried]
        z = args[carried] + h @ args[carried + len(scanned)].T
        delta = args[carried + 1] if steps is not None else 1.0
        h, new, _ = cell.step(z, tuple(previous), args[carried + len(scanned) + 1:], delta, constants)
        return h, *new, h.clone()

    *finals, out = scan_op(step, [h0, *states], scanned, additional_inputs=(w_hh, *params))
    return out, tuple(finals)
