"""The recurrence op's layer recomputed from its inputs by the cell's torch step, under autograd:
what the fused op's backward differentiates when it is itself differentiated (create_graph=True:
a gradient penalty, a Hessian-vector product), so that the fused paths give second derivatives and
only such calls pay for them.

From the op's inputs, xg (T, B, G*H) the input projection plus bias, W_hh, h0, the states s0
(S, B, H), the cell's params, step input and constants, for the rows each step runs (packed: the
first batch_sizes[t]):

    z_t = xg_t + W_hh h_{t-1}       (h and W_hh rounded as the call's products round them, the
                                     rounding's derivative the identity's: ``precision.straight_through``)
    h_t, s_t = cell.step(z_t, s_{t-1}, params, Δt_t, constants)

and ``gradients`` returns d/d(inputs) of <grad_h, h_all> + <grad_state_n, state_n> with a graph
(torch.autograd.grad with create_graph=True), in the op backward's order.
"""
from __future__ import annotations

import torch

from tsrnn import precision
from tsrnn.ops.recurrence import reference
from tsrnn.ops.recurrence.cells import CELLS
from tsrnn.ops.recurrence.packing import Packing


def layer(cell: str, xg, w_hh, h0, state0, params, steps, constants, batch_sizes, products):
    """(h_all, state_n) of the op's forward, differentiable: h_all (T, B, H) or packed (N, H),
    state_n (S, B, H)."""
    described = CELLS[cell]
    packing = None if batch_sizes is None else Packing.in_order(batch_sizes, xg.device)
    live = h0.shape[0] if packing is None else packing.live
    lengths = None
    if packing is not None:
        xg, steps, lengths = packing.unpack(xg), None if steps is None else packing.unpack(steps), packing.lengths
    w = precision.straight_through(w_hh, products)
    h, states = h0[:live], [s[:live] for s in state0.unbind(0)]
    per_unit = () if params is None else tuple(params.unbind(0))
    outs = []
    for t in range(xg.shape[0]):
        z = xg[t] + precision.straight_through(h, products) @ w.T
        delta = 1.0 if steps is None else steps[t].unsqueeze(-1)
        h, new, _ = described.step(z, states, per_unit, delta, constants)
        # past a row's end its h feeds nothing: h_n is read from h_all, state_n from the states
        states = [reference.advance(lengths, t, n, s) for n, s in zip(new, states)]
        outs.append(h)
    h_all = torch.stack(outs)
    finals = torch.stack(states)
    if live < h0.shape[0]:  # the rows of no step keep their initial states
        finals = torch.cat([finals, state0[:, live:]], 1)
    return (h_all if packing is None else packing.pack(h_all)), finals


def gradients(cell: str, needs, grad_h, grad_state_n, xg, w_hh, h0, state0, params, steps, constants, batch_sizes,
              products) -> tuple:
    """(grad_xg, grad_w_hh, grad_h0, grad_state0, grad_params), each None where ``needs`` (the op's
    needs_input_grad for xg, w_hh, h0, state0, params) says no or nothing reaches it, computed
    through ``layer`` with a graph: differentiable again, to any order."""
    inputs = (xg, w_hh, h0, state0, params)
    wanted = [i for i, need in enumerate(needs) if need and inputs[i] is not None]
    results = [None] * len(inputs)
    with torch.enable_grad():
        h_all, state_n = layer(cell, xg, w_hh, h0, state0, params, steps, constants, batch_sizes, products)
        pairs = [(out, grad) for out, grad in ((h_all, grad_h), (state_n, grad_state_n)) if grad is not None]
        if not pairs or not wanted:
            return tuple(results)
        grads = torch.autograd.grad([o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs],
                                    create_graph=True, allow_unused=True)
    for i, grad in zip(wanted, grads):
        results[i] = grad
    return tuple(results)
