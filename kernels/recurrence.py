"""Per-step fused recurrence in Triton: one launch per step computes h_{t-1} W_hh^T for a tile of
(batch rows x hidden units) and applies the cell to it (no separate pointwise launch).

The cells are the same plug-ins as the C++ kernels (csrc/cpu/cells.h), selected by the constexpr
CELL: 0 LSTM (S1), 1 pLSTM coupled, 2 pLSTM separate (S9); the saved activations have the same
layout, so this is a drop-in implementation of ``torch.ops.tsrnn.recurrence_forward/backward``
(registered for CUDA tensors; the tests run it on CPU tensors through the Triton interpreter).
Backward: one fused pointwise launch per step gives dz[t]; dh_{t-1} = dz[t] W_hh and
dW_hh = dz^T [h_0 .. h_{T-2}] are cuBLAS GEMMs. Gate math and accumulation are float32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

CELLS = {"lstm": (0, 4, 1, 4), "plstm_coupled": (1, 3, 2, 4), "plstm_separate": (2, 4, 2, 5)}  # id, G, S, K


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    return 2.0 * _sigmoid(2.0 * x) - 1.0


@triton.jit
def _gate(acc, h_tile, w_ptr, row0, rj, rk, H, mask_kj):
    # acc (BB, BH) += h_tile (BB, BK) @ W[row0 + rj, rk]^T (BK, BH)
    w = tl.load(w_ptr + (row0 + rj)[None, :].to(tl.int64) * H + rk[:, None], mask=mask_kj, other=0.0)
    return acc + tl.dot(h_tile, w.to(tl.float32), input_precision="ieee")  # not TF32: exact fp32


@triton.jit
def _forward_step(xg_ptr, hprev_ptr, w_ptr, prev_ptr, next_ptr, h_ptr, act_ptr, p_ptr, dt_ptr,
                  B, H, eps,  # xg: [B, G*H], hprev/h: [B, H], w: [G*H, H], prev/next: [S, B, H],
                  CELL: tl.constexpr, G: tl.constexpr, K: tl.constexpr,  # act: [B, K*H], p: [H], dt: [B]
                  HAS_DT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rj = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mb, mj = rb < B, rj < H
    m2 = mb[:, None] & mj[None, :]
    z0 = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    z1 = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    z2 = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    z3 = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    for k0 in range(0, H, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        mk = rk < H
        h_tile = tl.load(hprev_ptr + rb[:, None] * H + rk[None, :], mask=mb[:, None] & mk[None, :], other=0.0)
        h_tile = h_tile.to(tl.float32)
        mask_kj = mk[:, None] & mj[None, :]
        z0 = _gate(z0, h_tile, w_ptr, 0 * H, rj, rk, H, mask_kj)
        z1 = _gate(z1, h_tile, w_ptr, 1 * H, rj, rk, H, mask_kj)
        z2 = _gate(z2, h_tile, w_ptr, 2 * H, rj, rk, H, mask_kj)
        if G == 4:
            z3 = _gate(z3, h_tile, w_ptr, 3 * H, rj, rk, H, mask_kj)
    xrow = xg_ptr + rb[:, None] * (G * H) + rj[None, :]
    z0 += tl.load(xrow, mask=m2, other=0.0).to(tl.float32)
    z1 += tl.load(xrow + H, mask=m2, other=0.0).to(tl.float32)
    z2 += tl.load(xrow + 2 * H, mask=m2, other=0.0).to(tl.float32)
    if G == 4:
        z3 += tl.load(xrow + 3 * H, mask=m2, other=0.0).to(tl.float32)
    unit = rb[:, None] * H + rj[None, :]
    BH = B * H
    arow = act_ptr + rb[:, None] * (K * H) + rj[None, :]
    c_prev = tl.load(prev_ptr + unit, mask=m2, other=0.0).to(tl.float32)
    if CELL == 0:  # LSTM: act (i, f, g, o)
        i, f, g, o = _sigmoid(z0), _sigmoid(z1), _tanh(z2), _sigmoid(z3)
        c = f * c_prev + i * g
        tl.store(arow, i, mask=m2)
        tl.store(arow + H, f, mask=m2)
        tl.store(arow + 2 * H, g, mask=m2)
        tl.store(arow + 3 * H, o, mask=m2)
    else:  # pLSTM (S9): act (f, r, g, o[, i])
        if CELL == 1:
            r, g, o = _sigmoid(z0), _tanh(z1), _sigmoid(z2)
        else:
            r, g, o = _sigmoid(z1), _tanh(z2), _sigmoid(z3)
        a_prev = tl.load(prev_ptr + BH + unit, mask=m2, other=0.0).to(tl.float32)
        p = tl.load(p_ptr + rj, mask=mj, other=0.0).to(tl.float32)[None, :]
        if HAS_DT:
            dt = tl.load(dt_ptr + rb, mask=mb, other=1.0).to(tl.float32)[:, None]
        else:
            dt = 1.0
        s = 1.0 - r
        a = s * (a_prev + dt)
        f = tl.exp(-p * tl.log((a + 1.0) / (s * (a_prev + 1.0) + eps)))
        if CELL == 1:
            i = 1.0 - f
        else:
            i = _sigmoid(z0)
            tl.store(arow + 4 * H, i, mask=m2)
        c = f * c_prev + i * g
        tl.store(next_ptr + BH + unit, a, mask=m2)
        tl.store(arow, f, mask=m2)
        tl.store(arow + H, r, mask=m2)
        tl.store(arow + 2 * H, g, mask=m2)
        tl.store(arow + 3 * H, o, mask=m2)
    tl.store(next_ptr + unit, c, mask=m2)
    tl.store(h_ptr + unit, o * _tanh(c), mask=m2)


def recurrence_forward(cell, xg, w_hh, h0, state0, p, dt, eps, save):
    """torch.ops.tsrnn.recurrence_forward for Triton: h_all [T,B,H], state_all [T,S,B,H], saved."""
    cell_id, G, S, K = CELLS[cell]
    T, B, _ = xg.shape
    H = w_hh.shape[1]
    xg, w_hh, h0, state0 = xg.contiguous(), w_hh.contiguous(), h0.contiguous(), state0.contiguous()
    h_all = xg.new_empty(T, B, H)
    state_all = xg.new_empty(T, S, B, H)
    act = xg.new_empty(T if save else 1, B, K * H)
    grid = (triton.cdiv(B, 16), triton.cdiv(H, 32))
    dummy = h0
    for t in range(T):
        _forward_step[grid](xg[t], h0 if t == 0 else h_all[t - 1], w_hh, state0 if t == 0 else state_all[t - 1],
                            state_all[t], h_all[t], act[t if save else 0], p if p is not None else dummy,
                            dt[t].contiguous() if dt is not None else dummy, B, H, eps, CELL=cell_id, G=G, K=K,
                            HAS_DT=dt is not None, BLOCK_B=16, BLOCK_H=32, BLOCK_K=32)
    return h_all, state_all, act if save else xg.new_empty(0)


@triton.jit
def _backward_step(act_ptr, prev_ptr, next_ptr, dh_ptr, gh_ptr, gs_ptr, ds_ptr, dz_ptr, dp_ptr, p_ptr, dt_ptr,
                   B, H, eps,  # act: [B, K*H], prev/next/gs/ds: [S, B, H], dh/gh/dp: [B, H], dz: [B, G*H]
                   CELL: tl.constexpr, G: tl.constexpr, K: tl.constexpr, HAS_GH: tl.constexpr,
                   HAS_GS: tl.constexpr, HAS_DT: tl.constexpr, BLOCK: tl.constexpr):
    n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    BH = B * H
    m = n < BH
    b, j = n // H, n % H
    dh = tl.load(dh_ptr + n, mask=m, other=0.0).to(tl.float32)
    dc = tl.load(ds_ptr + n, mask=m, other=0.0).to(tl.float32)
    if HAS_GH:
        dh += tl.load(gh_ptr + n, mask=m, other=0.0).to(tl.float32)
    if HAS_GS:
        dc += tl.load(gs_ptr + n, mask=m, other=0.0).to(tl.float32)
    arow = act_ptr + b * (K * H) + j
    zrow = dz_ptr + b * (G * H) + j
    c_prev = tl.load(prev_ptr + n, mask=m, other=0.0).to(tl.float32)
    tc = _tanh(tl.load(next_ptr + n, mask=m, other=0.0).to(tl.float32))
    if CELL == 0:  # LSTM, act (i, f, g, o)
        i = tl.load(arow, mask=m, other=0.0)
        f = tl.load(arow + H, mask=m, other=0.0)
        g = tl.load(arow + 2 * H, mask=m, other=0.0)
        o = tl.load(arow + 3 * H, mask=m, other=0.0)
        dc = dc + dh * o * (1.0 - tc * tc)
        tl.store(zrow, dc * g * i * (1.0 - i), mask=m)
        tl.store(zrow + H, dc * c_prev * f * (1.0 - f), mask=m)
        tl.store(zrow + 2 * H, dc * i * (1.0 - g * g), mask=m)
        tl.store(zrow + 3 * H, dh * tc * o * (1.0 - o), mask=m)
    else:  # pLSTM (S9), act (f, r, g, o[, i]); log f = -p (log N - log D)
        f = tl.load(arow, mask=m, other=0.0)
        r = tl.load(arow + H, mask=m, other=0.0)
        g = tl.load(arow + 2 * H, mask=m, other=0.0)
        o = tl.load(arow + 3 * H, mask=m, other=0.0)
        if CELL == 1:
            i = 1.0 - f
        else:
            i = tl.load(arow + 4 * H, mask=m, other=0.0)
        p = tl.load(p_ptr + j, mask=m, other=0.0).to(tl.float32)
        if HAS_DT:
            dt = tl.load(dt_ptr + b, mask=m, other=1.0).to(tl.float32)
        else:
            dt = 1.0
        a_prev = tl.load(prev_ptr + BH + n, mask=m, other=0.0).to(tl.float32)
        da = tl.load(ds_ptr + BH + n, mask=m, other=0.0).to(tl.float32)
        if HAS_GS:
            da += tl.load(gs_ptr + BH + n, mask=m, other=0.0).to(tl.float32)
        s = 1.0 - r
        N = tl.load(next_ptr + BH + n, mask=m, other=0.0).to(tl.float32) + 1.0
        D = s * (a_prev + 1.0) + eps
        dc = dc + dh * o * (1.0 - tc * tc)
        if CELL == 1:
            df = dc * (c_prev - g)
        else:
            df = dc * c_prev
            tl.store(zrow, dc * g * i * (1.0 - i), mask=m)
        dlogf = df * f
        tl.store(dp_ptr + n, tl.load(dp_ptr + n, mask=m, other=0.0) - dlogf * tl.log(N / D), mask=m)
        dN = da - p * dlogf / N
        dD = p * dlogf / D
        ds_ = dN * (a_prev + dt) + dD * (a_prev + 1.0)
        R0 = 0 if CELL == 1 else 1  # gate row of r; g and o follow it
        tl.store(zrow + R0 * H, -ds_ * r * s, mask=m)
        tl.store(zrow + (R0 + 1) * H, dc * i * (1.0 - g * g), mask=m)
        tl.store(zrow + (R0 + 2) * H, dh * tc * o * (1.0 - o), mask=m)
        tl.store(ds_ptr + BH + n, (dN + dD) * s, mask=m)
    tl.store(ds_ptr + n, dc * f, mask=m)


def recurrence_backward(cell, grad_h, grad_state, w_hh, h0, state0, h_all, state_all, saved, p, dt, eps):
    """torch.ops.tsrnn.recurrence_backward for Triton: grad_xg, grad_w_hh, grad_h0, grad_state0, grad_p."""
    cell_id, G, S, K = CELLS[cell]
    T, B, H = h_all.shape
    if saved.shape != (T, B, K * H):
        raise RuntimeError("tsrnn: saved activations are missing (was the forward run with save=false?)")
    w_hh = w_hh.contiguous()
    dz = h_all.new_empty(T, B, G * H)
    dstate = h_all.new_zeros(S, B, H)
    dh = h_all.new_zeros(B, H)
    dp = h_all.new_zeros(B, H)
    dummy = dh
    grid = (triton.cdiv(B * H, 256),)
    for t in range(T - 1, -1, -1):
        _backward_step[grid](saved[t].contiguous(), state0 if t == 0 else state_all[t - 1], state_all[t], dh,
                             grad_h[t].contiguous() if grad_h is not None else dummy,
                             grad_state[t].contiguous() if grad_state is not None else dummy, dstate, dz[t],
                             dp, p if p is not None else dummy, dt[t].contiguous() if dt is not None else dummy,
                             B, H, eps, CELL=cell_id, G=G, K=K, HAS_GH=grad_h is not None,
                             HAS_GS=grad_state is not None, HAS_DT=dt is not None, BLOCK=256)
        dh = dz[t] @ w_hh
    h_prev = torch.cat([h0[None], h_all[:-1]]).reshape(T * B, H)
    grad_w = dz.reshape(T * B, G * H).t() @ h_prev
    return dz, grad_w, dh, dstate, dp.sum(0) if p is not None else h_all.new_empty(0)
