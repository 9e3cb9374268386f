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
tsrnn/backend/, which sends it padded H up to 128 (float32 math) or 32 (float64; capacity.py):
there ptxas (sm_90) keeps the kernels in registers. ``recurrence_forward/backward`` check their
arguments (tsrnn/ops/recurrence/checks.py) before they launch.
W_hh either stays on chip (W_ON_CHIP: the G tiles, W_g^T forward and W_g backward, [HP, HP], are
loaded once before the time loop; Triton holds them in shared memory) or is streamed from global memory / L2 every step in BLOCK_K
chunks of the contraction; then the dot's left operand (h forward, dz backward) goes through a
per-program scratch in global memory, ordered by tl.debug_barrier(). Math in float32, its dots in
the call's precision (PRECISION: IEEE, TF32, or bf16-rounded operands; cells_triton's docstring),
or float64 for float64 inputs (IEEE dots: tl.dot supports float64 on NVIDIA GPUs).
Packed sequences (batch_sizes, cells.Steps; PACKED): the kernels read a plan, an int64 device
tensor of the step offsets [T + 1] and then each program's step count (the length of its first
row). Step t masks the rows b >= rows(t) (row first(t) + b of the packed [N, ...] tensors, row b of
state_all[t]); a program runs only its own steps (forward t = 0 .. its count - 1, backward back
down from there), so a program whose rows have all ended does nothing more, and its loop bound,
the same for all its threads, keeps every tl.debug_barrier() reached by all of them. The backward
keeps dL/d(c, a) of a row that has not started (in the reverse sweep) as given, and its dh, dz and
dp at 0.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tsrnn.ops.recurrence.cells import CELLS, math_dtype

from .capacity import padded
from .cells_triton import (
    Steps,
    backward_prologue,
    cell_backward,
    cell_forward,
    final_states,
    forward_prologue,
    gates_mm,
    load_optional,
    load_rows,
    load_states,
    mm,
    store_rows,
    store_states,
    w_tile,
    w_tiles,
    weight_grad,
)

BLOCK_B = 16  # batch rows per program (tl.dot needs >= 16)
BLOCK_K = 16  # contraction chunk when W_hh is streamed (tl.dot takes K >= 16 in triton 3.6)
W_ON_CHIP_BYTES = 64 * 1024  # W_hh kept on chip when its G [HP, HP] tiles take at most this ...
SHARED_OVERHEAD = 16 * 1024  # ... and fit in the device's shared memory with what else the kernel uses there
# (sm_90, the LSTM at HP = 64, 65,536 B of W: 69,632 B in all with triton 3.9, 81,920 B for the
# backward with triton 3.6; tests/kernels/recurrence/test_triton_compile.py checks every variant against this budget)


def w_fits_on_chip(cell: str, H: int, dtype: torch.dtype, device: torch.device | None = None) -> bool:
    """Whether W_hh stays on chip (Triton keeps the G tiles in shared memory, loaded once before
    the time loop, and moves them to the dot layout each step): G * HP^2 * (4 or 8 bytes, the math
    dtype) <= W_ON_CHIP_BYTES, float32 up to HP = 64, float64 up to HP = 32; on a CUDA device
    also within its shared memory per block (e.g. not HP = 64 on a 64 KiB sm_75)."""
    HP = padded(H)
    size = CELLS[cell].num_gates * HP * HP * math_dtype(dtype).itemsize
    if size > W_ON_CHIP_BYTES:
        return False
    if device is None or device.type != "cuda":
        return True
    index = device.index if device.index is not None else torch.cuda.current_device()
    return size + SHARED_OVERHEAD <= triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]


def _launch(B, H):
    """(grid, HP, launch options) of both persistent kernels: num_warps = HP / 4 in [4, 16] and no
    software pipelining, the choice of fewest register spills in ptxas for sm_90."""
    HP = padded(H)
    return (triton.cdiv(B, BLOCK_B),), HP, {"num_warps": min(16, max(4, HP // 4)), "num_stages": 1}


def _plan(steps: Steps, device) -> torch.Tensor | None:
    """The packed kernels' plan on ``device``: int64 [T + 1 + programs], the step offsets, then the
    steps each program runs (the length of its first row, BLOCK_B rows a program); None padded."""
    if not steps.packed:
        return None
    return torch.cat([torch.tensor(steps.offsets, dtype=torch.int64), steps.lengths()[::BLOCK_B]]).to(device)


@triton.jit
def _tile(B, H, BLOCK_B: tl.constexpr, HP: tl.constexpr):
    """This program's rows and units: (pid, batch rows rb, units rj, row mask, tile mask, b*H+j)."""
    pid = tl.program_id(0)
    rb = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    rj = tl.arange(0, HP)
    mb = rb < B
    return pid, rb, rj, mb, mb[:, None] & (rj < H)[None, :], rb[:, None] * H + rj[None, :]


@triton.jit
def _program_steps(plan_ptr, T, pid, PACKED: tl.constexpr):
    """The steps this program runs: T, or packed its count in the plan."""
    steps = T
    if PACKED:
        steps = tl.load(plan_ptr + T + 1 + pid).to(tl.int32)
    return steps


@triton.jit
def _step(plan_ptr, t, B, rb, mb, PACKED: tl.constexpr):
    """(first, live) of step t (int64): its row b is row first + b of the [T*B or N, ...] tensors,
    and live [BLOCK_B, 1] masks the rows it runs: (t B, mb), or packed (offsets[t], b < rows(t))."""
    first = t * B
    live = mb
    if PACKED:
        first = tl.load(plan_ptr + t)
        live = rb < tl.load(plan_ptr + t + 1) - first
    return first, live[:, None]


@triton.jit(do_not_specialize=["T"])
def _forward_kernel(xg_ptr, h0_ptr, s0_ptr, w_ptr, h_ptr, state_ptr, act_ptr, p_ptr, dt_ptr, scratch_ptr, plan_ptr,
                    T, B, H, eps_ptr,  # xg: [T*B or N, G*H], h0: [B, H], s0: [S, B, H], w: [G*H, H],
                    # h: [T*B or N, H], state: [T, S, B, H], act: [T*B or N, K*H], p: [H], dt: [T*B or N],
                    # scratch: [programs, BLOCK_B, HP], plan: int64 [T + 1 + programs] (PACKED)
                    HAS_P: tl.constexpr, COUPLED: tl.constexpr, G: tl.constexpr, S: tl.constexpr, K: tl.constexpr,
                    HAS_DT: tl.constexpr, SAVE: tl.constexpr, W_ON_CHIP: tl.constexpr, PACKED: tl.constexpr,
                    ACC_F64: tl.constexpr, PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, HP: tl.constexpr,
                    BLOCK_K: tl.constexpr):
    """h_t, (c, a)_t = cell(xg[t] + h_{t-1} W_hh^T, (c, a)_{t-1}) for t = 0 .. T-1 (packed: this
    program's steps, rows b < rows(t) stored), h, c, a in registers."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    eps = tl.load(eps_ptr).to(ACC)  # a tensor: the interpreter would round a float argument to float32
    pid, rb, rj, mb, m2, unit = _tile(B, H, BLOCK_B, HP)
    BH = B * H
    h = tl.load(h0_ptr + unit, mask=m2, other=0.0).to(ACC)
    c, a = load_states(s0_ptr, unit, BH, m2, HAS_P, ACC)
    p = load_optional(p_ptr, rj[None, :], (rj < H)[None, :], HAS_P, 0.0, ACC)
    if W_ON_CHIP:  # W_g^T: [HP (k), HP (j)]
        rk = tl.arange(0, HP)
        w0, w1, w2, w3 = w_tiles(w_ptr, rj[None, :], rk[:, None], H, G, ACC)
    else:
        hs_ptr = scratch_ptr + pid * (BLOCK_B * HP) + tl.arange(0, BLOCK_B)[:, None] * HP
    for t in range(_program_steps(plan_ptr, T, pid, PACKED)):
        ts = tl.cast(t, tl.int64)
        first, live = _step(plan_ptr, ts, B, rb, mb, PACKED)  # the rows that ended keep garbage, never stored
        ms = live & (rj < H)[None, :]
        z0, z1, z2, z3, _ = load_rows(xg_ptr + first * (G * H) + rb[:, None] * (G * H) + rj[None, :], H, G, ms, ACC)
        if W_ON_CHIP:
            z0 = mm(h, w0, z0, ACC, PRECISION)
            z1 = mm(h, w1, z1, ACC, PRECISION)
            z2 = mm(h, w2, z2, ACC, PRECISION)
            if G == 4:
                z3 = mm(h, w3, z3, ACC, PRECISION)
        else:
            tl.debug_barrier()  # every thread is done reading the previous h
            tl.store(hs_ptr + rj[None, :], h)
            tl.debug_barrier()
            for k0 in range(0, H, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                h_chunk = tl.load(hs_ptr + rk[None, :], mask=(rk < H)[None, :], other=0.0)
                z0, z1, z2, z3 = gates_mm(h_chunk, w_ptr, rj, rk, H, G, z0, z1, z2, z3, ACC, PRECISION)
        dt = load_optional(dt_ptr + first, rb[:, None], live, HAS_DT, 1.0, ACC)
        h, c, a, act0, act1, act2, act3, act4 = cell_forward(HAS_P, COUPLED, z0, z1, z2, z3, c, a, p, dt, eps)
        tl.store(h_ptr + first * H + unit, h, mask=ms)
        store_states(state_ptr + ts * (S * BH), unit, BH, c, a, ms, HAS_P)
        if SAVE:
            store_rows(act_ptr + first * (K * H) + rb[:, None] * (K * H) + rj[None, :], H, K,
                       act0, act1, act2, act3, act4, ms)


def recurrence_forward(cell, xg, w_hh, h0, state0, p, dt, eps, save, batch_sizes=None, precision="ieee", w_on_chip=None):
    """torch.ops.tsrnn_triton_persistent.recurrence_forward: h_all [T,B,H] ([N,H] packed), state_n
    [S,B,H] (each row's states after its last step), state_all [T,S,B,H], saved ([T,B,K*H], [N,K*H]
    packed). w_on_chip: None for the rule of ``w_fits_on_chip``, or True / False to force (the
    tests run both variants)."""
    f = forward_prologue(cell, xg, w_hh, h0, state0, p, dt, eps, save, batch_sizes, precision)
    on_chip = w_fits_on_chip(cell, f.H, xg.dtype, xg.device) if w_on_chip is None else w_on_chip
    grid, HP, options = _launch(f.B, f.H)
    scratch = f.placeholder if on_chip else torch.empty(grid[0], BLOCK_B, HP, dtype=math_dtype(xg.dtype),
                                                        device=xg.device)
    plan = _plan(f.steps, xg.device)
    _forward_kernel[grid](f.xg, f.h0, f.state0, f.w_hh, f.h_all, f.state_all, f.saved if save else f.placeholder,
                          f.p, f.placeholder if f.dt is None else f.dt, scratch,
                          f.placeholder if plan is None else plan, f.T, f.B, f.H, f.eps, **f.cell,
                          HAS_DT=f.dt is not None, SAVE=save, W_ON_CHIP=on_chip, PACKED=plan is not None,
                          ACC_F64=f.acc_f64, PRECISION=f.products, BLOCK_B=BLOCK_B, HP=HP, BLOCK_K=BLOCK_K,
                          **options)
    return f.h_all, final_states(f.state_all, f.state0, f.steps), f.state_all, f.saved


@triton.jit(do_not_specialize=["T"])
def _backward_kernel(act_ptr, s0_ptr, state_ptr, gh_ptr, gs_ptr, w_ptr, dz_ptr, dh0_ptr, ds0_ptr, dp_ptr,
                     p_ptr, dt_ptr, scratch_ptr, plan_ptr,
                     T, B, H, eps_ptr,  # act: [T*B or N, K*H], s0/gs/ds0: [S, B, H], state: [T, S, B, H],
                     # gh: [T*B or N, H], w: [G*H, H], dz: [T*B or N, G*H], dh0: [B, H], dp: [programs, HP],
                     # p: [H], dt: [T*B or N], scratch: [programs, G, BLOCK_B, HP],
                     # plan: int64 [T + 1 + programs] (PACKED)
                     HAS_P: tl.constexpr, COUPLED: tl.constexpr, G: tl.constexpr, S: tl.constexpr, K: tl.constexpr,
                     HAS_GH: tl.constexpr, HAS_GS: tl.constexpr, HAS_DT: tl.constexpr, W_ON_CHIP: tl.constexpr,
                     PACKED: tl.constexpr, ACC_F64: tl.constexpr, PRECISION: tl.constexpr, BLOCK_B: tl.constexpr,
                     HP: tl.constexpr, BLOCK_K: tl.constexpr):
    """dz[t], dh_{t-1} = sum_g dz_g[t] W_g, dL/d(c, a)_{t-1} for t = T-1 .. 0 (packed: from this
    program's last step, rows b < rows(t)) from dL/d(c, a) = gs; dh, dc, da, dp in registers."""
    ACC = tl.float64 if ACC_F64 else tl.float32
    eps = tl.load(eps_ptr).to(ACC)  # a tensor: the interpreter would round a float argument to float32
    pid, rb, rj, mb, m2, unit = _tile(B, H, BLOCK_B, HP)
    BH = B * H
    mj = (rj < H)[None, :]
    dh = tl.zeros((BLOCK_B, HP), ACC)
    dc = tl.zeros((BLOCK_B, HP), ACC)
    da = tl.zeros((BLOCK_B, HP), ACC)
    dp = tl.zeros((BLOCK_B, HP), ACC)
    if HAS_GS:
        dc, da = load_states(gs_ptr, unit, BH, m2, HAS_P, ACC)
    steps = _program_steps(plan_ptr, T, pid, PACKED)
    last = tl.cast(tl.maximum(steps - 1, 0), tl.int64)  # the program's last step (none runs when steps = 0)
    _, live = _step(plan_ptr, last, B, rb, mb, PACKED)
    # the states of step `last`, its rows; each step below reads c_prev with the rows of step t-1, so
    # a row that starts in this reverse sweep finds its states in registers
    c, a = load_states(state_ptr + last * (S * BH), unit, BH, live & mj, HAS_P, ACC)
    p = load_optional(p_ptr, rj[None, :], mj, HAS_P, 0.0, ACC)
    if W_ON_CHIP:  # W_g: [HP (j), HP (k)]
        rk = tl.arange(0, HP)
        w0, w1, w2, w3 = w_tiles(w_ptr, rj[:, None], rk[None, :], H, G, ACC)
    else:
        zs_ptr = scratch_ptr + pid * (G * BLOCK_B * HP) + tl.arange(0, BLOCK_B)[:, None] * HP
    for tt in range(steps):
        ts = tl.cast(steps - 1 - tt, tl.int64)
        first, live = _step(plan_ptr, ts, B, rb, mb, PACKED)
        ms = live & mj
        if HAS_GH:
            dh += tl.load(gh_ptr + first * H + unit, mask=ms, other=0.0).to(ACC)
        act0, act1, act2, act3, act4 = load_rows(act_ptr + first * (K * H) + rb[:, None] * (K * H) + rj[None, :],
                                                 H, K, ms, ACC)
        prev = state_ptr + (ts - 1) * (S * BH)
        if ts == 0:
            prev = s0_ptr
        _, prev_live = _step(plan_ptr, tl.maximum(ts - 1, 0), B, rb, mb, PACKED)  # the rows step t-1 wrote
        c_prev, a_prev = load_states(prev, unit, BH, prev_live & mj, HAS_P, ACC)
        dt = load_optional(dt_ptr + first, rb[:, None], live, HAS_DT, 1.0, ACC)
        dz0, dz1, dz2, dz3, dc_prev, da_prev, dp_t = cell_backward(HAS_P, COUPLED, dh, dc, da, act0, act1, act2,
                                                                   act3, act4, c_prev, a_prev, c, a, p, dt, eps)
        if PACKED:  # the rows not started yet keep dL/d(c, a) as given, and dh, dz, dp at 0
            dc_prev = tl.where(live, dc_prev, dc)
            da_prev = tl.where(live, da_prev, da)
            dz0 = tl.where(live, dz0, 0.0)
            dz1 = tl.where(live, dz1, 0.0)
            dz2 = tl.where(live, dz2, 0.0)
            dz3 = tl.where(live, dz3, 0.0)
            if HAS_P:
                dp_t = tl.where(live, dp_t, 0.0)
        dc, da = dc_prev, da_prev
        c, a = c_prev, a_prev
        if HAS_P:
            dp += dp_t
        store_rows(dz_ptr + first * (G * H) + rb[:, None] * (G * H) + rj[None, :], H, G, dz0, dz1, dz2, dz3, dz3, ms)
        if W_ON_CHIP:
            dh = mm(dz0, w0, tl.zeros((BLOCK_B, HP), ACC), ACC, PRECISION)
            dh = mm(dz1, w1, dh, ACC, PRECISION)
            dh = mm(dz2, w2, dh, ACC, PRECISION)
            if G == 4:
                dh = mm(dz3, w3, dh, ACC, PRECISION)
        else:
            tl.debug_barrier()  # every thread is done reading the previous dz
            store_rows(zs_ptr + rj[None, :], BLOCK_B * HP, G, dz0, dz1, dz2, dz3, dz3, None)
            tl.debug_barrier()
            dh = tl.zeros((BLOCK_B, HP), ACC)
            for j0 in range(0, H, BLOCK_K):
                rk = j0 + tl.arange(0, BLOCK_K)
                for g in tl.static_range(G):
                    dz_chunk = tl.load(zs_ptr + g * (BLOCK_B * HP) + rk[None, :], mask=(rk < H)[None, :], other=0.0)
                    dh = mm(dz_chunk, w_tile(w_ptr, g, rk[:, None], rj[None, :], H, ACC), dh, ACC, PRECISION)
    tl.store(dh0_ptr + unit, dh, mask=m2)
    store_states(ds0_ptr, unit, BH, dc, da, m2, HAS_P)
    if HAS_P:
        tl.store(dp_ptr + pid * HP + rj, tl.sum(dp, axis=0))


def recurrence_backward(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, eps,
                        batch_sizes=None, precision="ieee", w_on_chip=None):
    """torch.ops.tsrnn_triton_persistent.recurrence_backward: grad_xg ([T,B,G*H], [N,G*H] packed),
    grad_w_hh, grad_h0, grad_state0, grad_p. w_on_chip: as for recurrence_forward."""
    b = backward_prologue(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, eps,
                          batch_sizes, precision)
    on_chip = w_fits_on_chip(cell, b.H, h_all.dtype, h_all.device) if w_on_chip is None else w_on_chip
    grid, HP, options = _launch(b.B, b.H)
    dh = h_all.new_empty(b.B, b.H)
    dstate = h_all.new_empty(b.cell["S"], b.B, b.H)
    dp = torch.empty(grid[0], HP, dtype=b.acc, device=h_all.device)
    scratch = dh if on_chip else torch.empty(grid[0], b.cell["G"], BLOCK_B, HP, dtype=b.acc, device=h_all.device)
    plan = _plan(b.steps, h_all.device)

    def given(t):  # an optional input, or a placeholder pointer
        return dh if t is None else t

    _backward_kernel[grid](b.saved, b.state0, b.state_all, given(b.grad_h), given(b.grad_state_n), b.w_hh, b.dz, dh,
                           dstate, dp, given(b.p), given(b.dt), scratch, given(plan), b.T, b.B, b.H, b.eps, **b.cell,
                           HAS_GH=b.grad_h is not None, HAS_GS=b.grad_state_n is not None, HAS_DT=b.dt is not None,
                           W_ON_CHIP=on_chip, PACKED=plan is not None, ACC_F64=b.acc_f64, PRECISION=b.products,
                           BLOCK_B=BLOCK_B, HP=HP, BLOCK_K=BLOCK_K, **options)
    grad_p = dp[:, :b.H].sum(0).to(h_all.dtype) if p is not None else h_all.new_empty(0)
    return b.dz, weight_grad(b.dz, h0, h_all, b.steps, b.products), dh, dstate, grad_p
