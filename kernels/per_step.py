"""Per-step fused recurrence in Triton: one launch per step computes h_{t-1} W_hh^T for a tile of
(batch rows x hidden units) and applies the cell to it (no separate pointwise launch).

The cells are the plug-in of cells.py (the same cells as csrc/cells.h), selected by the
constexpr CELL: 0 LSTM (S1), 1 pLSTM coupled, 2 pLSTM separate (S9); the saved activations have
the same layout, so this is a drop-in implementation of ``torch.ops.tsrnn.recurrence_forward/backward``
(the kernels of ``torch.ops.tsrnn_triton_step.recurrence_*``, the path "triton_step" of
tsrnn/backend.py; CUDA tensors, or CPU tensors through the Triton interpreter). Any H.
Backward, from dL/d(c, a)_{T-1} = grad_state_n (zeros when None): one fused pointwise launch per
step gives dz[t]; dh_{t-1} = dz[t] W_hh and dW_hh = dz^T [h_0 .. h_{T-2}] are cuBLAS GEMMs. Gate
math and accumulation are float32 (float64 for float64 inputs).

``recurrence_forward/backward`` check their arguments (tsrnn.ops.check_recurrence_args, as the
compiled ops do) before they launch.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from tsrnn.ops import check_recurrence_args, check_recurrence_backward_args

from .cells import (
    cell_backward,
    cell_forward,
    check_math_dtype,
    eps_tensor,
    gates_mm,
    load_rows,
    sizes,
    store_rows,
    weight_grad,
)

# (BLOCK_B, BLOCK_H, BLOCK_K, num_warps, num_stages): none spills registers in ptxas for sm_90
# (fp32, fp64, bf16). The interpreter runs the first only (autotuning fails there).
_FORWARD_CONFIGS = [(16, 32, 16, 4, 2)] + ([] if os.environ.get("TRITON_INTERPRET") == "1" else
                                            [(16, 64, 8, 8, 2), (32, 32, 8, 8, 2), (32, 64, 8, 8, 2)])


@triton.autotune([triton.Config({"BLOCK_B": b, "BLOCK_H": h, "BLOCK_K": k}, num_warps=w, num_stages=s)
                  for b, h, k, w, s in _FORWARD_CONFIGS], key=["B", "H"])
@triton.jit
def _forward_step(xg_ptr, hprev_ptr, w_ptr, prev_ptr, next_ptr, h_ptr, act_ptr, p_ptr, dt_ptr,
                  B, H, eps_ptr,  # xg: [B, G*H], hprev/h: [B, H], w: [G*H, H], prev/next: [S, B, H],
                  # act: [B, K*H], p: [H], dt: [B]
                  CELL: tl.constexpr, G: tl.constexpr, K: tl.constexpr,
                  HAS_DT: tl.constexpr, ACC_F64: tl.constexpr,
                  BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """z = xg + h_{t-1} W_hh^T (k-chunks of BLOCK_K), then the cell, for one (BLOCK_B x BLOCK_H) tile."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    eps = tl.load(eps_ptr).to(ACC)  # a tensor: the interpreter would round a float argument to float32
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rj = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mb, mj = rb < B, rj < H
    m2 = mb[:, None] & mj[None, :]
    z0, z1, z2, z3, _ = load_rows(xg_ptr + rb[:, None] * (G * H) + rj[None, :], H, G, m2, ACC)
    for k0 in range(0, H, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        h_tile = tl.load(hprev_ptr + rb[:, None] * H + rk[None, :], mask=mb[:, None] & (rk < H)[None, :], other=0.0)
        z0, z1, z2, z3 = gates_mm(h_tile.to(ACC), w_ptr, rj, rk, H, G, z0, z1, z2, z3, ACC)
    unit = rb[:, None] * H + rj[None, :]
    BH = B * H
    c_prev = tl.load(prev_ptr + unit, mask=m2, other=0.0).to(ACC)
    if CELL == 0:
        a_prev, p, dt = c_prev, 0.0, 1.0  # unused by the LSTM cell
    else:
        a_prev = tl.load(prev_ptr + BH + unit, mask=m2, other=0.0).to(ACC)
        p = tl.load(p_ptr + rj, mask=mj, other=0.0).to(ACC)[None, :]
        dt = 1.0
        if HAS_DT:
            dt = tl.load(dt_ptr + rb, mask=mb, other=1.0).to(ACC)[:, None]
    h, c, a, act0, act1, act2, act3, act4 = cell_forward(CELL, z0, z1, z2, z3, c_prev, a_prev, p, dt, eps)
    store_rows(act_ptr + rb[:, None] * (K * H) + rj[None, :], H, K, act0, act1, act2, act3, act4, m2)
    tl.store(next_ptr + unit, c, mask=m2)
    if CELL != 0:
        tl.store(next_ptr + BH + unit, a, mask=m2)
    tl.store(h_ptr + unit, h, mask=m2)


def recurrence_forward(cell, xg, w_hh, h0, state0, p, dt, eps, save):
    """torch.ops.tsrnn_triton_step.recurrence_forward: h_all [T,B,H], state_n [S,B,H], state_all [T,S,B,H], saved."""
    check_recurrence_args(cell, xg, w_hh, h0, state0, p, dt)
    check_math_dtype(xg)
    cell_id, G, S, K = sizes(cell)
    T, B, _ = xg.shape
    H = w_hh.shape[1]
    xg, w_hh, h0, state0 = xg.contiguous(), w_hh.contiguous(), h0.contiguous(), state0.contiguous()
    h_all = xg.new_empty(T, B, H)
    state_all = xg.new_empty(T, S, B, H)
    act = xg.new_empty(T if save else 1, B, K * H)

    def grid(meta):
        return triton.cdiv(B, meta["BLOCK_B"]), triton.cdiv(H, meta["BLOCK_H"])

    dummy, eps_t = h0, eps_tensor(eps, xg)
    for t in range(T):
        _forward_step[grid](xg[t], h0 if t == 0 else h_all[t - 1], w_hh, state0 if t == 0 else state_all[t - 1],
                            state_all[t], h_all[t], act[t if save else 0], p if p is not None else dummy,
                            dt[t].contiguous() if dt is not None else dummy, B, H, eps_t, CELL=cell_id, G=G, K=K,
                            HAS_DT=dt is not None, ACC_F64=xg.dtype == torch.float64)
    return h_all, state_all[T - 1].clone(), state_all, act if save else xg.new_empty(0)


@triton.jit
def _backward_step(act_ptr, prev_ptr, next_ptr, dh_ptr, gh_ptr, ds_ptr, dz_ptr, dp_ptr, p_ptr, dt_ptr,
                   B, H, eps_ptr,  # act: [B, K*H], prev/next/ds: [S, B, H], dh/gh/dp: [B, H],
                   # dz: [B, G*H], p: [H], dt: [B]
                   CELL: tl.constexpr, G: tl.constexpr, K: tl.constexpr, HAS_GH: tl.constexpr,
                   HAS_DT: tl.constexpr, ACC_F64: tl.constexpr, BLOCK: tl.constexpr):
    """The cell backward for BLOCK (row, unit) pairs: dz[t], ds (in dL/d(c, a)_t, out dL/d(c, a)_{t-1})
    and dp += dL/dp."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    eps = tl.load(eps_ptr).to(ACC)  # a tensor: the interpreter would round a float argument to float32
    n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    BH = B * H
    m = n < BH
    b, j = n // H, n % H
    dh = tl.load(dh_ptr + n, mask=m, other=0.0).to(ACC)
    dc = tl.load(ds_ptr + n, mask=m, other=0.0).to(ACC)
    if HAS_GH:
        dh += tl.load(gh_ptr + n, mask=m, other=0.0).to(ACC)
    act0, act1, act2, act3, act4 = load_rows(act_ptr + b * (K * H) + j, H, K, m, ACC)
    c_prev = tl.load(prev_ptr + n, mask=m, other=0.0).to(ACC)
    c = tl.load(next_ptr + n, mask=m, other=0.0).to(ACC)
    if CELL == 0:
        a_prev, a, da, p, dt = c_prev, c, dc, 0.0, 1.0  # unused by the LSTM cell
    else:
        a_prev = tl.load(prev_ptr + BH + n, mask=m, other=0.0).to(ACC)
        a = tl.load(next_ptr + BH + n, mask=m, other=0.0).to(ACC)
        da = tl.load(ds_ptr + BH + n, mask=m, other=0.0).to(ACC)
        p = tl.load(p_ptr + j, mask=m, other=0.0).to(ACC)
        dt = 1.0
        if HAS_DT:
            dt = tl.load(dt_ptr + b, mask=m, other=1.0).to(ACC)
    dz0, dz1, dz2, dz3, dc, da, dp = cell_backward(CELL, dh, dc, da, act0, act1, act2, act3, act4,
                                                   c_prev, a_prev, c, a, p, dt, eps)
    store_rows(dz_ptr + b * (G * H) + j, H, G, dz0, dz1, dz2, dz3, dz3, m)
    tl.store(ds_ptr + n, dc, mask=m)
    if CELL != 0:
        tl.store(ds_ptr + BH + n, da, mask=m)
        tl.store(dp_ptr + n, tl.load(dp_ptr + n, mask=m, other=0.0) + dp, mask=m)


def recurrence_backward(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, eps):
    """torch.ops.tsrnn_triton_step.recurrence_backward: grad_xg, grad_w_hh, grad_h0, grad_state0, grad_p."""
    check_recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt)
    check_math_dtype(h_all)
    cell_id, G, S, K = sizes(cell)
    T, B, H = h_all.shape
    w_hh = w_hh.contiguous()
    dz = h_all.new_empty(T, B, G * H)
    if grad_state_n is None:
        dstate = h_all.new_zeros(S, B, H)
    else:  # dL/d(c, a)_{T-1}, carried back in place
        dstate = grad_state_n.clone(memory_format=torch.contiguous_format)
    dh = h_all.new_zeros(B, H)
    dp = h_all.new_zeros(B, H)
    dummy, eps_t = dh, eps_tensor(eps, h_all)
    grid = (triton.cdiv(B * H, 256),)
    for t in range(T - 1, -1, -1):
        _backward_step[grid](saved[t].contiguous(), state0 if t == 0 else state_all[t - 1], state_all[t], dh,
                             grad_h[t].contiguous() if grad_h is not None else dummy, dstate, dz[t], dp,
                             p if p is not None else dummy, dt[t].contiguous() if dt is not None else dummy,
                             B, H, eps_t, CELL=cell_id, G=G, K=K, HAS_GH=grad_h is not None, HAS_DT=dt is not None,
                             ACC_F64=h_all.dtype == torch.float64, BLOCK=256)
        dh = dz[t] @ w_hh
    return dz, weight_grad(dz, h0, h_all), dh, dstate, dp.sum(0) if p is not None else h_all.new_empty(0)
