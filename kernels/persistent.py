"""Persistent recurrence in Triton: one launch per sequence, the time loop inside the kernel.

Grid (cdiv(B, BLOCK_B),): a program owns BLOCK_B batch rows and all H hidden units (padded to
HP, a power of two, masked), and carries its states in registers across steps.
Forward, t = 0 .. T-1:  z_g = xg[t]_g + h_{t-1} W_g^T (g < G), then the cell of cells.py;
    writes h_all[t], state_all[t] and (save) the activations, as the per-step kernels do.
Backward, t = T-1 .. 0, from (dc, da) = grad_state_n (zeros when None): dh += grad_h[t]; the cell
    backward gives dz[t] (written, [T, B, G*H]), dL/d(c, a)_{t-1} and dp (summed in registers per
    program), then dh_{t-1} = sum_g dz_g W_g. After the kernel, dW_hh = dz^T [h_0 .. h_{T-2}] is two
    GEMMs that read the h's in place (cells.weight_grad).
The kernels of ``torch.ops.tsrnn_triton_persistent.recurrence_*``, the path "triton_persistent" of
tsrnn/backend.py, which sends it padded H up to 128 (float32 math) or 32 (float64): there ptxas
(sm_90) keeps the kernels in registers. ``recurrence_forward/backward`` check their arguments
(tsrnn.ops.check_recurrence_args) before they launch.
W_hh either stays on chip (W_ON_CHIP: the G tiles, W_g^T forward and W_g backward, [HP, HP], are
loaded once before the time loop; Triton holds them in shared memory) or is streamed from global memory / L2 every step in BLOCK_K
chunks of the contraction; then the dot's left operand (h forward, dz backward) goes through a
per-program scratch in global memory, ordered by tl.debug_barrier(). Math in float32 (IEEE dots,
not TF32), or float64 for float64 inputs (tl.dot supports float64 on NVIDIA GPUs).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tsrnn.backend import padded
from tsrnn.ops import check_recurrence_args, check_recurrence_backward_args

from .cells import (
    cell_backward,
    cell_forward,
    check_math_dtype,
    eps_tensor,
    gates_mm,
    load_rows,
    sizes,
    mm,
    store_rows,
    w_tile,
    weight_grad,
)

BLOCK_B = 16  # batch rows per program (tl.dot needs >= 16)
BLOCK_K = 8  # contraction chunk when W_hh is streamed
W_ON_CHIP_BYTES = 64 * 1024  # W_hh kept on chip when its G [HP, HP] tiles take at most this ...
SHARED_OVERHEAD = 8 * 1024  # ... and fit in the device's shared memory with what else the kernel uses there
# (ptxas, sm_90: 69,632 B of shared memory for the 65,536 B of W at HP = 64)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def w_fits_on_chip(cell: str, H: int, dtype: torch.dtype, device: torch.device | None = None) -> bool:
    """Whether W_hh stays on chip (Triton keeps the G tiles in shared memory, loaded once before
    the time loop, and moves them to the dot layout each step): G * HP^2 * (4 or 8 bytes, the math
    dtype) <= W_ON_CHIP_BYTES, float32 up to HP = 64, float64 up to HP = 32; on a CUDA device
    also within its shared memory per block (e.g. not HP = 64 on a 64 KiB sm_75)."""
    HP = padded(H)
    size = sizes(cell)[1] * HP * HP * _acc_dtype(dtype).itemsize
    if size > W_ON_CHIP_BYTES:
        return False
    if device is None or device.type != "cuda":
        return True
    index = device.index if device.index is not None else torch.cuda.current_device()
    return size + SHARED_OVERHEAD <= triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]


def _launch(B, H, dtype):
    """(grid, HP, launch options, ACC_F64) of both persistent kernels: num_warps = HP / 4 in [4, 16]
    and no software pipelining, the choice of fewest register spills in ptxas for sm_90."""
    HP = padded(H)
    return (triton.cdiv(B, BLOCK_B),), HP, {"num_warps": min(16, max(4, HP // 4)), "num_stages": 1}, \
        dtype == torch.float64


@triton.jit
def _tile(B, H, BLOCK_B: tl.constexpr, HP: tl.constexpr):
    """This program's rows and units: (pid, batch rows rb, units rj, row mask, tile mask, b*H+j)."""
    pid = tl.program_id(0)
    rb = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    rj = tl.arange(0, HP)
    mb = rb < B
    return pid, rb, rj, mb, mb[:, None] & (rj < H)[None, :], rb[:, None] * H + rj[None, :]


@triton.jit(do_not_specialize=["T"])
def _forward_kernel(xg_ptr, h0_ptr, s0_ptr, w_ptr, h_ptr, state_ptr, act_ptr, p_ptr, dt_ptr, scratch_ptr,
                    T, B, H, eps_ptr,  # xg: [T, B, G*H], h0: [B, H], s0: [S, B, H], w: [G*H, H],
                    # h: [T, B, H], state: [T, S, B, H], act: [T, B, K*H], p: [H], dt: [T, B],
                    # scratch: [programs, BLOCK_B, HP]
                    CELL: tl.constexpr, G: tl.constexpr, S: tl.constexpr, K: tl.constexpr, HAS_DT: tl.constexpr,
                    SAVE: tl.constexpr, W_ON_CHIP: tl.constexpr, ACC_F64: tl.constexpr,
                    BLOCK_B: tl.constexpr, HP: tl.constexpr, BLOCK_K: tl.constexpr):
    """h_t, (c, a)_t = cell(xg[t] + h_{t-1} W_hh^T, (c, a)_{t-1}) for t = 0 .. T-1, h, c, a in registers."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    eps = tl.load(eps_ptr).to(ACC)  # a tensor: the interpreter would round a float argument to float32
    pid, rb, rj, mb, m2, unit = _tile(B, H, BLOCK_B, HP)
    BH = B * H
    h = tl.load(h0_ptr + unit, mask=m2, other=0.0).to(ACC)
    c = tl.load(s0_ptr + unit, mask=m2, other=0.0).to(ACC)
    if CELL == 0:
        a, p = c, 0.0  # unused by the LSTM cell
    else:
        a = tl.load(s0_ptr + BH + unit, mask=m2, other=0.0).to(ACC)
        p = tl.load(p_ptr + rj, mask=rj < H, other=0.0).to(ACC)[None, :]
    if W_ON_CHIP:  # W_g^T: [HP (k), HP (j)]
        rk = tl.arange(0, HP)
        w0 = w_tile(w_ptr, 0, rj[None, :], rk[:, None], H, ACC)
        w1 = w_tile(w_ptr, 1, rj[None, :], rk[:, None], H, ACC)
        w2 = w_tile(w_ptr, 2, rj[None, :], rk[:, None], H, ACC)
        if G == 4:
            w3 = w_tile(w_ptr, 3, rj[None, :], rk[:, None], H, ACC)
    else:
        hs_ptr = scratch_ptr + pid * (BLOCK_B * HP) + tl.arange(0, BLOCK_B)[:, None] * HP
    for t in range(T):
        ts = tl.cast(t, tl.int64)
        z0, z1, z2, z3, _ = load_rows(xg_ptr + ts * (B * G * H) + rb[:, None] * (G * H) + rj[None, :], H, G, m2, ACC)
        if W_ON_CHIP:
            z0 = mm(h, w0, z0, ACC)
            z1 = mm(h, w1, z1, ACC)
            z2 = mm(h, w2, z2, ACC)
            if G == 4:
                z3 = mm(h, w3, z3, ACC)
        else:
            tl.debug_barrier()  # every thread is done reading the previous h
            tl.store(hs_ptr + rj[None, :], h)
            tl.debug_barrier()
            for k0 in range(0, H, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                h_chunk = tl.load(hs_ptr + rk[None, :], mask=(rk < H)[None, :], other=0.0)
                z0, z1, z2, z3 = gates_mm(h_chunk, w_ptr, rj, rk, H, G, z0, z1, z2, z3, ACC)
        dt = 1.0
        if HAS_DT:
            dt = tl.load(dt_ptr + ts * B + rb, mask=mb, other=1.0).to(ACC)[:, None]
        h, c, a, act0, act1, act2, act3, act4 = cell_forward(CELL, z0, z1, z2, z3, c, a, p, dt, eps)
        tl.store(h_ptr + ts * BH + unit, h, mask=m2)
        tl.store(state_ptr + ts * (S * BH) + unit, c, mask=m2)
        if CELL != 0:
            tl.store(state_ptr + ts * (S * BH) + BH + unit, a, mask=m2)
        if SAVE:
            store_rows(act_ptr + ts * (B * K * H) + rb[:, None] * (K * H) + rj[None, :], H, K,
                       act0, act1, act2, act3, act4, m2)


def recurrence_forward(cell, xg, w_hh, h0, state0, p, dt, eps, save, w_on_chip=None):
    """torch.ops.tsrnn_triton_persistent.recurrence_forward: h_all [T,B,H], state_n [S,B,H],
    state_all [T,S,B,H], saved. w_on_chip: None for the rule of ``w_fits_on_chip``, or True /
    False to force (the tests run both variants)."""
    check_recurrence_args(cell, xg, w_hh, h0, state0, p, dt)
    check_math_dtype(xg)
    cell_id, G, S, K = sizes(cell)
    T, B, _ = xg.shape
    H = w_hh.shape[1]
    on_chip = w_fits_on_chip(cell, H, xg.dtype, xg.device) if w_on_chip is None else w_on_chip
    grid, HP, options, acc_f64 = _launch(B, H, xg.dtype)
    xg, w_hh, h0, state0 = xg.contiguous(), w_hh.contiguous(), h0.contiguous(), state0.contiguous()
    h_all = xg.new_empty(T, B, H)
    state_all = xg.new_empty(T, S, B, H)
    act = xg.new_empty(T, B, K * H) if save else xg.new_empty(0)
    scratch = h0 if on_chip else torch.empty(grid[0], BLOCK_B, HP, dtype=_acc_dtype(xg.dtype), device=xg.device)
    _forward_kernel[grid](xg, h0, state0, w_hh, h_all, state_all, act if save else h0,
                          p.contiguous() if p is not None else h0, dt.contiguous() if dt is not None else h0,
                          scratch, T, B, H, eps_tensor(eps, xg), CELL=cell_id, G=G, S=S, K=K, HAS_DT=dt is not None, SAVE=save,
                          W_ON_CHIP=on_chip, ACC_F64=acc_f64, BLOCK_B=BLOCK_B, HP=HP, BLOCK_K=BLOCK_K, **options)
    return h_all, state_all[T - 1].clone(), state_all, act


@triton.jit(do_not_specialize=["T"])
def _backward_kernel(act_ptr, s0_ptr, state_ptr, gh_ptr, gs_ptr, w_ptr, dz_ptr, dh0_ptr, ds0_ptr, dp_ptr,
                     p_ptr, dt_ptr, scratch_ptr,
                     T, B, H, eps_ptr,  # act: [T, B, K*H], s0/gs/ds0: [S, B, H], state: [T, S, B, H],
                     # gh: [T, B, H], w: [G*H, H], dz: [T, B, G*H], dh0: [B, H],
                     # dp: [programs, HP], p: [H], dt: [T, B], scratch: [programs, G, BLOCK_B, HP]
                     CELL: tl.constexpr, G: tl.constexpr, S: tl.constexpr, K: tl.constexpr,
                     HAS_GH: tl.constexpr, HAS_GS: tl.constexpr, HAS_DT: tl.constexpr, W_ON_CHIP: tl.constexpr,
                     ACC_F64: tl.constexpr, BLOCK_B: tl.constexpr, HP: tl.constexpr, BLOCK_K: tl.constexpr):
    """dz[t], dh_{t-1} = sum_g dz_g[t] W_g, dL/d(c, a)_{t-1} for t = T-1 .. 0 from dL/d(c, a)_{T-1} = gs;
    dh, dc, da, dp in registers."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    eps = tl.load(eps_ptr).to(ACC)  # a tensor: the interpreter would round a float argument to float32
    pid, rb, rj, mb, m2, unit = _tile(B, H, BLOCK_B, HP)
    BH = B * H
    dh = tl.zeros((BLOCK_B, HP), ACC)
    dc = tl.zeros((BLOCK_B, HP), ACC)
    da = tl.zeros((BLOCK_B, HP), ACC)
    dp = tl.zeros((BLOCK_B, HP), ACC)
    if HAS_GS:
        dc = tl.load(gs_ptr + unit, mask=m2, other=0.0).to(ACC)
        if CELL != 0:
            da = tl.load(gs_ptr + BH + unit, mask=m2, other=0.0).to(ACC)
    last = state_ptr + tl.cast(T - 1, tl.int64) * (S * BH) + unit
    c = tl.load(last, mask=m2, other=0.0).to(ACC)
    if CELL == 0:
        a, p = c, 0.0  # unused by the LSTM cell
    else:
        a = tl.load(last + BH, mask=m2, other=0.0).to(ACC)
        p = tl.load(p_ptr + rj, mask=rj < H, other=0.0).to(ACC)[None, :]
    if W_ON_CHIP:  # W_g: [HP (j), HP (k)]
        rk = tl.arange(0, HP)
        w0 = w_tile(w_ptr, 0, rj[:, None], rk[None, :], H, ACC)
        w1 = w_tile(w_ptr, 1, rj[:, None], rk[None, :], H, ACC)
        w2 = w_tile(w_ptr, 2, rj[:, None], rk[None, :], H, ACC)
        if G == 4:
            w3 = w_tile(w_ptr, 3, rj[:, None], rk[None, :], H, ACC)
    else:
        zs_ptr = scratch_ptr + pid * (G * BLOCK_B * HP) + tl.arange(0, BLOCK_B)[:, None] * HP
    for tt in range(T):
        ts = tl.cast(T - 1 - tt, tl.int64)
        if HAS_GH:
            dh += tl.load(gh_ptr + ts * BH + unit, mask=m2, other=0.0).to(ACC)
        act0, act1, act2, act3, act4 = load_rows(act_ptr + ts * (B * K * H) + rb[:, None] * (K * H) + rj[None, :],
                                                 H, K, m2, ACC)
        prev = state_ptr + (ts - 1) * (S * BH) + unit
        if ts == 0:
            prev = s0_ptr + unit
        c_prev = tl.load(prev, mask=m2, other=0.0).to(ACC)
        dt = 1.0
        if CELL == 0:
            a_prev = c_prev  # unused by the LSTM cell
        else:
            a_prev = tl.load(prev + BH, mask=m2, other=0.0).to(ACC)
            if HAS_DT:
                dt = tl.load(dt_ptr + ts * B + rb, mask=mb, other=1.0).to(ACC)[:, None]
        dz0, dz1, dz2, dz3, dc, da, dp_t = cell_backward(CELL, dh, dc, da, act0, act1, act2, act3, act4,
                                                         c_prev, a_prev, c, a, p, dt, eps)
        c, a = c_prev, a_prev
        if CELL != 0:
            dp += dp_t
        store_rows(dz_ptr + ts * (B * G * H) + rb[:, None] * (G * H) + rj[None, :], H, G, dz0, dz1, dz2, dz3, dz3, m2)
        if W_ON_CHIP:
            dh = mm(dz0, w0, tl.zeros((BLOCK_B, HP), ACC), ACC)
            dh = mm(dz1, w1, dh, ACC)
            dh = mm(dz2, w2, dh, ACC)
            if G == 4:
                dh = mm(dz3, w3, dh, ACC)
        else:
            tl.debug_barrier()  # every thread is done reading the previous dz
            store_rows(zs_ptr + rj[None, :], BLOCK_B * HP, G, dz0, dz1, dz2, dz3, dz3, None)
            tl.debug_barrier()
            dh = tl.zeros((BLOCK_B, HP), ACC)
            for j0 in range(0, H, BLOCK_K):
                rk = j0 + tl.arange(0, BLOCK_K)
                for g in tl.static_range(G):
                    dz_chunk = tl.load(zs_ptr + g * (BLOCK_B * HP) + rk[None, :], mask=(rk < H)[None, :], other=0.0)
                    dh = mm(dz_chunk, w_tile(w_ptr, g, rk[:, None], rj[None, :], H, ACC), dh, ACC)
    tl.store(dh0_ptr + unit, dh, mask=m2)
    tl.store(ds0_ptr + unit, dc, mask=m2)
    if CELL != 0:
        tl.store(ds0_ptr + BH + unit, da, mask=m2)
        tl.store(dp_ptr + pid * HP + rj, tl.sum(dp, axis=0))


def recurrence_backward(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, eps,
                        w_on_chip=None):
    """torch.ops.tsrnn_triton_persistent.recurrence_backward: grad_xg, grad_w_hh, grad_h0,
    grad_state0, grad_p. w_on_chip: as for recurrence_forward."""
    check_recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt)
    check_math_dtype(h_all)
    cell_id, G, S, K = sizes(cell)
    T, B, H = h_all.shape
    on_chip = w_fits_on_chip(cell, H, h_all.dtype, h_all.device) if w_on_chip is None else w_on_chip
    grid, HP, options, acc_f64 = _launch(B, H, h_all.dtype)
    acc = _acc_dtype(h_all.dtype)
    dz = h_all.new_empty(T, B, G * H)
    dh = h_all.new_empty(B, H)
    dstate = h_all.new_empty(S, B, H)
    dp = torch.empty(grid[0], HP, dtype=acc, device=h_all.device)
    scratch = dh if on_chip else torch.empty(grid[0], G, BLOCK_B, HP, dtype=acc, device=h_all.device)

    def opt(t):  # an optional input, or a placeholder pointer
        return t.contiguous() if t is not None else dh

    _backward_kernel[grid](saved.contiguous(), state0.contiguous(), state_all.contiguous(), opt(grad_h),
                           opt(grad_state_n), w_hh.contiguous(), dz, dh, dstate, dp, opt(p), opt(dt), scratch,
                           T, B, H, eps_tensor(eps, h_all), CELL=cell_id, G=G, S=S, K=K, HAS_GH=grad_h is not None,
                           HAS_GS=grad_state_n is not None, HAS_DT=dt is not None, W_ON_CHIP=on_chip,
                           ACC_F64=acc_f64, BLOCK_B=BLOCK_B, HP=HP, BLOCK_K=BLOCK_K, **options)
    grad_p = dp[:, :H].sum(0).to(h_all.dtype) if p is not None else h_all.new_empty(0)
    return dz, weight_grad(dz, h0, h_all), dh, dstate, grad_p
