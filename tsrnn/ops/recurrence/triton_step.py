"""Per-step fused recurrence in Triton: one launch per step computes h_{t-1} W_hh^T for a tile of
(batch rows x hidden units) and applies the cell to it (no separate pointwise launch).

The cell is the plug-in of cells_triton.py (constexpr CELL and sizes); the saved activations have
the compiled kernels' layout, so this is a drop-in ``torch.ops.tsrnn.recurrence_forward/backward``
(path "triton_step"; CUDA tensors, or CPU tensors under the interpreter). Any H.
Backward: one fused pointwise launch per step gives dz[t]; dh_{t-1} = dz[t] W_hh and dW_hh are
GEMMs. Gate math is float32 (float64 for float64 inputs), the products in the call's precision.
Packed (``triton_plumbing.Steps``): step t launches over its rows(t) rows only; the kernels take
the rows launched (R) and the states' rows (B, stride B*H) apart. Arguments are checked
(tsrnn/ops/recurrence/checks.py) before any launch.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from tsrnn.precision import round_operands

from .triton_plumbing import (
    add_param_grads,
    backward_prologue,
    final_states,
    forward_prologue,
    gates_mm,
    load_constants,
    load_optional,
    load_params,
    load_rows,
    load_states,
    store_rows,
    store_states,
    weight_grad,
)

# (BLOCK_B, BLOCK_H, BLOCK_K, num_warps, num_stages): none spills registers in ptxas for sm_90
# (fp32, fp64). BLOCK_K >= 16: triton 3.6 (the GPU machine's) refuses a tl.dot with K < 16.
# The interpreter runs the first only (autotuning fails there).
_FORWARD_CONFIGS = [(16, 32, 16, 4, 2)] + ([] if os.environ.get("TRITON_INTERPRET") == "1" else
                                            [(16, 64, 16, 8, 2), (32, 32, 16, 8, 2), (32, 64, 16, 8, 2)])
_BACKWARD_BLOCK = 256  # (row, unit) pairs per program of the pointwise backward


@triton.autotune([triton.Config({"BLOCK_B": b, "BLOCK_H": h, "BLOCK_K": k}, num_warps=w, num_stages=s)
                  for b, h, k, w, s in _FORWARD_CONFIGS], key=["B", "H", "CELL"])
@triton.jit
def _forward_step(xg_ptr, hprev_ptr, w_ptr, prev_ptr, next_ptr, h_ptr, act_ptr, params_ptr, steps_ptr, consts_ptr,
                  R, B, H,  # R rows of xg: [R, G*H], hprev/h: [R, H], act: [R, K*H], steps: [R];
                  # w: [G*H, H], prev/next: [S, B, H] (rows b < R read / written), params: [P, H], consts: [C]
                  CELL: tl.constexpr, G: tl.constexpr, S: tl.constexpr, K: tl.constexpr, P: tl.constexpr,
                  C: tl.constexpr, HAS_STEPS: tl.constexpr, ACC_F64: tl.constexpr, PRECISION: tl.constexpr,
                  BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """z = xg + h_{t-1} W_hh^T (k-chunks of BLOCK_K), then the cell's forward CELL, for one
    (BLOCK_B x BLOCK_H) tile of the step's R rows (all B padded, rows(t) packed): h, the states
    and the K saved rows; the states' rows have stride H and their S planes stride B*H."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rj = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mb, mj = rb < R, rj < H
    m2 = mb[:, None] & mj[None, :]
    z0, z1, z2, z3, _ = load_rows(xg_ptr + rb[:, None] * (G * H) + rj[None, :], H, G, m2, ACC)
    for k0 in range(0, H, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        h_tile = tl.load(hprev_ptr + rb[:, None] * H + rk[None, :], mask=mb[:, None] & (rk < H)[None, :], other=0.0)
        z0, z1, z2, z3 = gates_mm(h_tile.to(ACC), w_ptr, rj, rk, H, G, z0, z1, z2, z3, ACC, PRECISION)
    unit = rb[:, None] * H + rj[None, :]
    s0, s1 = load_states(prev_ptr, unit, B * H, S, m2, ACC)
    p0 = load_params(params_ptr, rj[None, :], mj[None, :], P, ACC)
    dt = load_optional(steps_ptr, rb[:, None], mb[:, None], HAS_STEPS, 1.0, ACC)
    k0 = load_constants(consts_ptr, C, ACC)  # a tensor: the interpreter would round a float argument to float32
    h, s0, s1, act0, act1, act2, act3, act4 = CELL(z0, z1, z2, z3, s0, s1, p0, dt, k0)
    store_rows(act_ptr + rb[:, None] * (K * H) + rj[None, :], H, K, act0, act1, act2, act3, act4, m2)
    store_states(next_ptr, unit, B * H, S, s0, s1, m2)
    tl.store(h_ptr + unit, h, mask=m2)


def recurrence_forward(cell, xg, w_hh, h0, state0, params, steps, constants, save, batch_sizes=None, precision="ieee"):
    """torch.ops.tsrnn_triton_step.recurrence_forward; shapes: tsrnn/ops/recurrence/op.py."""
    f = forward_prologue(cell, xg, w_hh, h0, state0, params, steps, constants, save, batch_sizes, precision)
    G, K, H, rows_of = f.cell["G"], f.cell["K"], f.H, f.steps
    xg_rows, h_rows = f.xg.view(-1, G * H), f.h_all.view(-1, H)  # [T*B or N, ...]
    act = f.saved.view(-1, K * H) if save else f.xg.new_empty(f.B, K * H)  # written every step, kept if save

    def grid(rows):
        return lambda meta: (triton.cdiv(rows, meta["BLOCK_B"]), triton.cdiv(H, meta["BLOCK_H"]))

    for t in range(f.T):
        first, rows = rows_of.first(t), rows_of.rows(t)
        _forward_step[grid(rows)](xg_rows[first:], f.h0 if t == 0 else h_rows[rows_of.first(t - 1):], f.w_hh,
                                  f.state0 if t == 0 else f.state_all[t - 1], f.state_all[t], h_rows[first:],
                                  act[first:] if save else act, f.params,
                                  f.placeholder if f.step_input is None else f.step_input[first:], f.constants,
                                  rows, f.B, H, **f.cell, HAS_STEPS=f.step_input is not None, ACC_F64=f.acc_f64,
                                  PRECISION=f.products)
    return f.h_all, final_states(f.state_all, f.state0, rows_of), f.state_all, f.saved


@triton.jit
def _backward_step(act_ptr, prev_ptr, next_ptr, dh_ptr, gh_ptr, ds_ptr, dz_ptr, dp_ptr, params_ptr, steps_ptr,
                   consts_ptr, R, B, H,  # R rows of act: [R, K*H], gh: [R, H], dz: [R, G*H], steps: [R];
                   # prev/next/ds: [S, B, H], dh: [B, H], dp: [P, B, H] (rows b < R read / written),
                   # params: [P, H], consts: [C]
                   CELL: tl.constexpr, G: tl.constexpr, S: tl.constexpr, K: tl.constexpr, P: tl.constexpr,
                   C: tl.constexpr, HAS_GH: tl.constexpr, HAS_STEPS: tl.constexpr, ACC_F64: tl.constexpr,
                   BLOCK: tl.constexpr):
    """The cell's backward CELL for BLOCK (row, unit) pairs of the step's R rows (all B padded,
    rows(t) packed): dz[t], ds (in dL/dstate_t, out dL/dstate_{t-1}) and dp += dL/dparams per row;
    the states' S planes have stride B*H."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    BH = B * H
    m = n < R * H
    b, j = n // H, n % H
    dh = tl.load(dh_ptr + n, mask=m, other=0.0).to(ACC)
    if HAS_GH:
        dh += tl.load(gh_ptr + n, mask=m, other=0.0).to(ACC)
    act0, act1, act2, act3, act4 = load_rows(act_ptr + b * (K * H) + j, H, K, m, ACC)
    sp0, sp1 = load_states(prev_ptr, n, BH, S, m, ACC)
    s0, s1 = load_states(next_ptr, n, BH, S, m, ACC)
    ds0, ds1 = load_states(ds_ptr, n, BH, S, m, ACC)
    p0 = load_params(params_ptr, j, m, P, ACC)
    dt = load_optional(steps_ptr, b, m, HAS_STEPS, 1.0, ACC)
    k0 = load_constants(consts_ptr, C, ACC)  # a tensor: the interpreter would round a float argument to float32
    dz0, dz1, dz2, dz3, ds0, ds1, dp0 = CELL(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0)
    store_rows(dz_ptr + b * (G * H) + j, H, G, dz0, dz1, dz2, dz3, dz3, m)
    store_states(ds_ptr, n, BH, S, ds0, ds1, m)
    add_param_grads(dp_ptr, n, P, dp0, m)


def recurrence_backward(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, params, steps,
                        constants, batch_sizes=None, precision="ieee"):
    """torch.ops.tsrnn_triton_step.recurrence_backward; shapes: tsrnn/ops/recurrence/op.py."""
    b = backward_prologue(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, params, steps,
                          constants, batch_sizes, precision)
    G, K, P, H, rows_of = b.cell["G"], b.cell["K"], b.cell["P"], b.H, b.steps
    dz_rows, saved_rows = b.dz.view(-1, G * H), b.saved.view(-1, K * H)  # [T*B or N, ...]
    gh_rows = None if b.grad_h is None else b.grad_h.view(-1, H)
    # dL/dstate_{T-1}, carried back in place; a packed row's entries wait there for its last step
    dstate = h_all.new_zeros(b.cell["S"], b.B, H) if b.grad_state_n is None else b.grad_state_n.clone()
    dh = h_all.new_zeros(b.B, H)  # dL/dh_{t-1}, rows < rows(t) written; the rows after stay 0 until they start
    dp = h_all.new_zeros(P, b.B, H) if P else dh  # dL/dparams per row (a placeholder without params)
    for t in range(b.T - 1, -1, -1):
        first, rows = rows_of.first(t), rows_of.rows(t)
        _backward_step[(triton.cdiv(rows * H, _BACKWARD_BLOCK),)](
            saved_rows[first:], b.state0 if t == 0 else b.state_all[t - 1], b.state_all[t], dh,
            dh if gh_rows is None else gh_rows[first:], dstate, dz_rows[first:], dp,
            dh if b.params is None else b.params, dh if b.step_input is None else b.step_input[first:], b.constants,
            rows, b.B, H, **b.cell, HAS_GH=gh_rows is not None, HAS_STEPS=b.step_input is not None,
            ACC_F64=b.acc_f64, BLOCK=_BACKWARD_BLOCK)
        torch.mm(round_operands(dz_rows[first:first + rows], b.products), b.w_hh, out=dh[:rows])  # W_hh rounded
    grad_params = dp.sum(1) if P else h_all.new_empty(0)
    return b.dz, weight_grad(b.dz, h0, h_all, rows_of, b.products), dh, dstate, grad_params
