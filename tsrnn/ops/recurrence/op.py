"""The recurrence operators: their schemas, shape functions and autograd formula, defined in the
compiled namespace (``torch.ops.tsrnn``) and in one namespace per Triton path
(``torch.ops.tsrnn_triton_step``), see ``tsrnn.ops.library``.
"""
from __future__ import annotations

import torch

from tsrnn.ops import extensions  # noqa: F401  (loads the compiled kernels before their schemas)
from tsrnn.ops import library
from tsrnn.ops.recurrence import checks, recompute
from tsrnn.ops.recurrence.cells import CELLS

# xg: [T,B,G*H] input projection plus bias, w_hh: [G*H,H], h0: [B,H], state0: [S,B,H], the cell's
# parameters params: [P,H] (None for a cell of none), its step input steps: [T,B] (optional; only
# for a cell that declares one) and constants: its float constants, as many as it declares
# (tsrnn/ops/recurrence/cells). recurrence_forward returns h_all: [T,B,H], state_n: [S,B,H] the
# final states, state_all: [T,S,B,H] every step's states and saved: [T,B,K*H] the saved
# activations ([0] when save is false), both only for the backward (not differentiable).
# recurrence_backward takes grad_h: dL/dh_all and grad_state_n: dL/dstate_n (each None where the
# loss does not use it) and returns grad_xg: [T,B,G*H], grad_w_hh: [G*H,H], grad_h0: [B,H],
# grad_state0: [S,B,H], grad_params: [P,H] ([0] without params).
# Packed sequences (``batch_sizes`` given, as torch's PackedSequence lays them out): batch_sizes
# [T] int64 on the CPU, each >= 1, non-increasing, at most B; step t runs the rows b < batch_sizes[t]
# only (the batch sorted by length, longest first), row offsets[t] + b of the packed tensors, with
# offsets[t] = batch_sizes[:t].sum() and N = batch_sizes.sum(). Then xg: [N,G*H], steps: [N],
# h_all and grad_h: [N,H], saved: [N,K*H], grad_xg: [N,G*H]; state_all stays [T,S,B,H] (the rows
# a step does not run are zero) and state_n[:, b] holds row b's states after its last
# step (state0[:, b] for a row of no step, b >= batch_sizes[0]).
# precision: ``tsrnn.precision.products``, the most rounding the products may apply (the CPU none).
SCHEMAS = {
    "recurrence_forward": "(str cell, Tensor xg, Tensor w_hh, Tensor h0, Tensor state0, Tensor? params, "
                          "Tensor? steps, float[] constants, bool save, Tensor? batch_sizes=None, str precision=\"ieee\") "
                          "-> (Tensor, Tensor, Tensor, Tensor)",
    "recurrence_backward": "(str cell, Tensor? grad_h, Tensor? grad_state_n, Tensor w_hh, Tensor h0, "
                           "Tensor state0, Tensor h_all, Tensor state_all, Tensor saved, Tensor? params, "
                           "Tensor? steps, float[] constants, Tensor? batch_sizes=None, str precision=\"ieee\") "
                           "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
}
# Tensor-core kernels only: the thread blocks the plan uses (0 where it does not fit or launch).
PLAN_SCHEMA = "recurrence_plan(str cell, Tensor w_hh, int batch=0, str precision=\"ieee\") -> int"
# Tensor-core kernels only: [cluster size, batch tile (cluster) or chunk (grid), clusters, units a
# block, forward and backward shared bytes a block], all zero where nothing fits.
CONFIG_SCHEMA = "recurrence_config(str cell, Tensor w_hh, int batch, str precision) -> int[]"
# The tensor-core kernels' namespaces (registered by tsrnn._cuda); the Triton ones and their modules.
CLUSTER = "tsrnn_cluster"
GRID = "tsrnn_grid"
TRITON = {"tsrnn_triton_step": "tsrnn.ops.recurrence.triton_step"}


def _recurrence_fake(cell, xg, w_hh, h0, state0, params, steps, constants, save, batch_sizes=None, precision="ieee"):
    length, batch, hidden = checks.recurrence_args(cell, xg, w_hh, h0, state0, params, steps, constants, batch_sizes)
    described = CELLS[cell]
    rows = xg.shape[:-1]  # (T, B) or, packed, (N,)
    return (
        xg.new_empty(*rows, hidden),
        xg.new_empty(described.num_states, batch, hidden),
        xg.new_empty(length, described.num_states, batch, hidden),
        xg.new_empty(*rows, described.num_saved * hidden) if save else xg.new_empty(0),
    )


def _recurrence_backward_fake(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all,
                              saved, params, steps, constants, batch_sizes=None, precision="ieee"):
    checks.recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, params,
                                    steps, constants, batch_sizes)
    return (
        h_all.new_empty(*h_all.shape[:-1], CELLS[cell].num_gates * h_all.shape[-1]),
        torch.empty_like(w_hh),
        torch.empty_like(h0),
        torch.empty_like(state0),
        torch.empty_like(params) if params is not None else h_all.new_empty(0),
    )


def _recurrence_setup(ctx, inputs, output):
    """Saves what the backward reads, and on CPU tensors xg for a double backward (``recompute``)."""
    cell, xg, w_hh, h0, state0, params, steps, constants, _, batch_sizes, precision = inputs  # defaults filled
    h_all, _, state_all, saved = output
    ctx.save_for_backward(xg if xg.device.type == "cpu" else None, w_hh, h0, state0, h_all, state_all, saved, params,
                          steps, batch_sizes)
    ctx.cell, ctx.constants, ctx.precision = cell, constants, precision
    ctx.mark_non_differentiable(state_all, saved)
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not a tensor of zeros


def _recurrence_autograd(backward_op):
    def recurrence_backward(ctx, grad_h, grad_state_n, _grad_state_all, _grad_saved):
        xg, w_hh, h0, state0, h_all, state_all, saved, params, steps, batch_sizes = ctx.saved_tensors
        if torch.is_grad_enabled() and xg is not None:  # create_graph=True: a graph through the reference steps
            with library.without_autocast(h_all):
                grads = recompute.gradients(ctx.cell, ctx.needs_input_grad[1:6], grad_h, grad_state_n, xg, w_hh, h0,
                                            state0, params, steps, ctx.constants, batch_sizes, ctx.precision)
            return (None, *grads, None, None, None, None, None)
        with library.without_autocast(h_all), torch.no_grad():
            grad_xg, grad_w, grad_h0, grad_state0, grad_params = backward_op(
                ctx.cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, params, steps,
                ctx.constants, batch_sizes, ctx.precision)
        grads = library.first_order_only("recurrence", (h_all, grad_h, grad_state_n),
                                         (grad_xg, grad_w, grad_h0, grad_state0,
                                          grad_params if params is not None else None))
        return (None, *grads, None, None, None, None, None)  # cell, ..., constants, save, batch_sizes, precision

    return recurrence_backward


def define(namespace: str, kernels: str | None = None, planned: bool = False) -> None:
    """Defines the recurrence ops in ``namespace`` (kernels from module ``kernels``, or compiled
    where None); ``planned`` adds PLAN_SCHEMA and CONFIG_SCHEMA."""
    library.define(namespace, "recurrence", SCHEMAS, _recurrence_fake, _recurrence_backward_fake, _recurrence_autograd,
                   _recurrence_setup, kernels)
    if planned:
        library.library(namespace).define(PLAN_SCHEMA)
        library.library(namespace).define(CONFIG_SCHEMA)


define(library.COMPILED)
define(CLUSTER, planned=True)
define(GRID, planned=True)
for _namespace, _kernels in TRITON.items():
    define(_namespace, _kernels)
