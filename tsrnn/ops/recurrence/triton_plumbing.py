"""What the Triton per-step kernels (triton_step.py) run around a cell's step (cells_triton.py):
the register plumbing, the W_hh tiles and dots (w_tile, mm, gates_mm), and the drivers' host side
(``Steps``, the prologues, ``final_states``, ``weight_grad``). Products are the dots' constexpr
PRECISION (``mm``); the drivers round W_hh once per call and their own GEMMs' operands with
``tsrnn.precision.round_operands``; float64 calls are "ieee" whatever they ask.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from tsrnn.ops.recurrence.cells import math_dtype
from tsrnn.ops.recurrence.cells_triton import constexprs
from tsrnn.precision import PRODUCTS, round_operands

from . import checks


def kernel_products(precision: str, acc_f64: bool) -> str:
    """The kernels' PRECISION for a call's ``precision`` (checked): "ieee" for float64 math."""
    if precision not in PRODUCTS:
        raise RuntimeError(f"tsrnn: unknown precision '{precision}', expected 'ieee', 'tf32' or 'bf16'")
    return "ieee" if acc_f64 else precision


def constants_tensor(constants, like: torch.Tensor) -> torch.Tensor:
    """The cell's constants [C] in the math dtype of ``like`` (``like`` itself for a cell of none),
    for tl.load: a float argument would reach the interpreted kernel in float32."""
    if len(constants) == 0:
        return like
    return torch.tensor([float(k) for k in constants], dtype=like.dtype, device=like.device)


class Steps:
    """The rows each step runs, as csrc/recurrence/op.h's ``Steps``: padded, all B rows, row
    t*B + b; packed (batch_sizes [T], checked here), rows b < rows(t), row offsets[t] + b of the
    [N, ...] tensors, state_all staying [T, S, B, H] with zeros in the rows not run.
    ``offsets`` [T + 1], a list, offsets[T] = N."""

    def __init__(self, batch_sizes, T: int, B: int, N: int):
        self.packed = batch_sizes is not None
        self.T, self.B = T, B
        self.offsets = (checks.packed_offsets(batch_sizes, B, N).tolist() if self.packed
                        else list(range(0, T * B + 1, B)))

    def first(self, t: int) -> int:
        return self.offsets[t]

    def rows(self, t: int) -> int:
        return self.offsets[t + 1] - self.offsets[t]

    def lengths(self) -> torch.Tensor:
        """How many steps each row runs, int64 [B] on the CPU (a prefix of 0 .. T-1 each)."""
        negated = -torch.tensor(self.offsets).diff()  # -rows(t), non-decreasing
        return torch.searchsorted(negated, -torch.arange(self.B), side="left")


def forward_prologue(cell, xg, w_hh, h0, state0, params, steps, constants, save, batch_sizes=None,
                     precision="ieee"):
    """The Triton forward driver's start, after the operator's checks: T, B, H, the cell
    constexprs, ``Steps``, ``products``, contiguous inputs (W_hh rounded; ``placeholder`` for an
    absent one), the constants tensor, and the outputs h_all, state_all [T, S, B, H] and saved."""
    T, B, H = checks.recurrence_args(cell, xg, w_hh, h0, state0, params, steps, constants, batch_sizes)
    checks.math_dtype(xg)
    checks.triton_device(xg)
    cell_args = constexprs(cell, "forward")
    steps_of = Steps(batch_sizes, T, B, xg.shape[0] if batch_sizes is not None else T * B)
    rows = xg.shape[:-1]  # (T, B) or, packed, (N,)
    h0 = h0.contiguous()
    products = kernel_products(precision, xg.dtype == torch.float64)
    return SimpleNamespace(
        T=T, B=B, H=H, cell=cell_args, steps=steps_of, acc_f64=xg.dtype == torch.float64,
        constants=constants_tensor(constants, h0), products=products, xg=xg.contiguous(),
        w_hh=round_operands(w_hh, products).contiguous(), h0=h0, state0=state0.contiguous(), placeholder=h0,
        params=h0 if params is None else params.contiguous(),
        step_input=None if steps is None else steps.contiguous().view(-1), h_all=xg.new_empty(*rows, H),
        state_all=(xg.new_zeros if steps_of.packed else xg.new_empty)(T, cell_args["S"], B, H),
        saved=xg.new_empty(*rows, cell_args["K"] * H) if save else xg.new_empty(0))


def backward_prologue(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, params, steps, constants,
                      batch_sizes=None, precision="ieee"):
    """The Triton backward driver's start, after the operator's checks: as ``forward_prologue``,
    with the math dtype ``acc`` and dz ([T, B, G*H] padded, [N, G*H] packed)."""
    T, B, H = checks.recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved,
                                              params, steps, constants, batch_sizes)
    checks.math_dtype(h_all)
    checks.triton_device(h_all)
    cell_args = constexprs(cell, "backward")
    steps_of = Steps(batch_sizes, T, B, h_all.shape[0] if batch_sizes is not None else T * B)

    def contiguous(t):
        return None if t is None else t.contiguous()

    products = kernel_products(precision, h_all.dtype == torch.float64)
    return SimpleNamespace(
        T=T, B=B, H=H, cell=cell_args, steps=steps_of, acc=math_dtype(h_all.dtype),
        acc_f64=h_all.dtype == torch.float64, products=products, constants=constants_tensor(constants, h_all),
        grad_h=contiguous(grad_h), grad_state_n=contiguous(grad_state_n),
        w_hh=round_operands(w_hh, products).contiguous(), state0=state0.contiguous(), state_all=state_all.contiguous(),
        saved=saved.contiguous(), params=contiguous(params),
        step_input=None if steps is None else steps.contiguous().view(-1),
        dz=h_all.new_empty(*h_all.shape[:-1], cell_args["G"] * H))


def final_states(state_all, state0, steps: Steps):
    """state_n [S, B, H]: each row's states after its last step (state0's for a row of no step)."""
    if not steps.packed:
        return state_all[steps.T - 1].clone()
    T, S, B, H = state_all.shape
    lengths = steps.lengths()
    live = int((lengths > 0).sum())
    last, row = lengths[:live] - 1, torch.arange(live)
    index = ((last.unsqueeze(0) * S + torch.arange(S).unsqueeze(1)) * B + row).reshape(-1)
    ran = state_all.reshape(T * S * B, H).index_select(0, index.to(state_all.device)).view(S, live, H)
    return ran if live == B else torch.cat([ran, state0[:, live:]], 1)


def weight_grad(dz, h0, h_all, steps: Steps, products: str = "ieee"):
    """dW_hh = sum_t dz[t]^T h_{t-1}, its operands rounded to ``products``; padded two GEMMs,
    packed one over the gathered [N, H] h_{t-1}."""
    dz, h0, h_all = (round_operands(t, products) for t in (dz, h0, h_all))
    if steps.packed:
        offsets = torch.tensor(steps.offsets)
        step = torch.repeat_interleave(torch.arange(steps.T), offsets.diff())  # each packed row's step
        within = torch.arange(offsets[-1].item()) - offsets[step]  # its row b in the step
        base = torch.where(step == 0, 0, steps.B + offsets[(step - 1).clamp(min=0)])  # of cat(h0, h_all)
        return dz.t() @ torch.cat([h0, h_all]).index_select(0, (base + within).to(h0.device))
    T, B, H = h_all.shape
    grad = dz[0].t() @ h0
    if T > 1:
        grad.addmm_(dz[1:].reshape((T - 1) * B, -1).t(), h_all[:-1].reshape((T - 1) * B, H))
    return grad


@triton.jit
def load_rows(ptr, H, N: tl.constexpr, mask, ACC: tl.constexpr):
    """Rows n = 0 .. N-1 (1 <= N <= 5) at ptr + n H, in ACC (0 where masked): the gate rows of
    xg (N = G) or the saved rows (N = K). Returns 5 values; those past N repeat row N - 1."""
    r0 = tl.load(ptr, mask=mask, other=0.0).to(ACC)
    r1 = r0
    if N >= 2:
        r1 = tl.load(ptr + H, mask=mask, other=0.0).to(ACC)
    r2 = r1
    if N >= 3:
        r2 = tl.load(ptr + 2 * H, mask=mask, other=0.0).to(ACC)
    r3 = r2
    if N >= 4:
        r3 = tl.load(ptr + 3 * H, mask=mask, other=0.0).to(ACC)
    r4 = r3
    if N >= 5:
        r4 = tl.load(ptr + 4 * H, mask=mask, other=0.0).to(ACC)
    return r0, r1, r2, r3, r4


@triton.jit
def store_rows(ptr, H, N: tl.constexpr, r0, r1, r2, r3, r4, mask):
    """The inverse of load_rows: rows r0 .. r{N-1} at ptr + n H (dz: N = G, saved: N = K)."""
    tl.store(ptr, r0, mask=mask)
    if N >= 2:
        tl.store(ptr + H, r1, mask=mask)
    if N >= 3:
        tl.store(ptr + 2 * H, r2, mask=mask)
    if N >= 4:
        tl.store(ptr + 3 * H, r3, mask=mask)
    if N >= 5:
        tl.store(ptr + 4 * H, r4, mask=mask)


@triton.jit
def load_states(ptr, offsets, BH, S: tl.constexpr, mask, ACC: tl.constexpr):
    """(s0, s1) at ptr + offsets and ptr + BH + offsets ([S, B, H] states, 1 <= S <= 2) in ACC;
    s1 is s0 (a placeholder) when S = 1."""
    s0 = tl.load(ptr + offsets, mask=mask, other=0.0).to(ACC)
    s1 = s0
    if S >= 2:
        s1 = tl.load(ptr + BH + offsets, mask=mask, other=0.0).to(ACC)
    return s0, s1


@triton.jit
def store_states(ptr, offsets, BH, S: tl.constexpr, s0, s1, mask):
    """The inverse of load_states (s1 only when S = 2)."""
    tl.store(ptr + offsets, s0, mask=mask)
    if S >= 2:
        tl.store(ptr + BH + offsets, s1, mask=mask)


@triton.jit
def load_params(ptr, offsets, mask, P: tl.constexpr, ACC: tl.constexpr):
    """p0, the first row of params [P, H] at ptr + offsets (units), in ACC (0 where masked); the
    scalar 0.0 for a cell of no parameter (P = 0)."""
    p0 = 0.0
    if P >= 1:
        p0 = tl.load(ptr + offsets, mask=mask, other=0.0).to(ACC)
    return p0


@triton.jit
def add_param_grads(ptr, offsets, P: tl.constexpr, dp0, mask):
    """Adds dp0 to row 0 of the [P, B, H] per-row parameter gradients at ptr + offsets (nothing
    for P = 0)."""
    if P >= 1:
        tl.store(ptr + offsets, tl.load(ptr + offsets, mask=mask, other=0.0) + dp0, mask=mask)


@triton.jit
def load_constants(ptr, C: tl.constexpr, ACC: tl.constexpr):
    """k0, the first of the cell's constants [C] (a tensor of the math dtype), in ACC; the scalar
    0.0 for a cell of none (C = 0)."""
    k0 = 0.0
    if C >= 1:
        k0 = tl.load(ptr).to(ACC)
    return k0


@triton.jit
def load_optional(ptr, offsets, mask, PRESENT: tl.constexpr, default, ACC: tl.constexpr):
    """The values at ptr + offsets in ACC (``default`` where masked) if the tensor is PRESENT, else
    the scalar ``default``: the step input Δt (1.0 without one)."""
    value = default
    if PRESENT:
        value = tl.load(ptr + offsets, mask=mask, other=default).to(ACC)
    return value


@triton.jit
def w_tile(w_ptr, g, j, k, H, ACC: tl.constexpr):
    """W_hh[g H + j, k] in ACC (0 past H) for broadcastable index tensors j (unit of gate g) and
    k (input unit): j[None, :], k[:, None] give the tile of W_g^T, j[:, None], k[None, :] of W_g."""
    return tl.load(w_ptr + (g * H + j).to(tl.int64) * H + k, mask=(j < H) & (k < H), other=0.0).to(ACC)


@triton.jit
def round_operand(x, PRECISION: tl.constexpr):
    """float32 x rounded as tsrnn.precision.round_operands, in integer ops (the interpreter's
    bfloat16 casts truncate)."""
    bits = x.to(tl.int32, bitcast=True)
    if PRECISION == "tf32":
        bits = (bits + 0x1000) & -0x2000
    else:
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000
    return tl.where(x == x, bits.to(tl.float32, bitcast=True), x)


@triton.jit
def mm(x, w, acc, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """acc + x @ w in ACC with PRECISION's products: x rounded here (w by the driver), then TF32
    dots for "tf32", IEEE dots otherwise."""
    if PRECISION != "ieee":
        x = round_operand(x, PRECISION)
    if PRECISION == "tf32":
        acc = tl.dot(x, w, acc, input_precision="tf32", out_dtype=ACC)
    else:
        acc = tl.dot(x, w, acc, input_precision="ieee", out_dtype=ACC)
    return acc


@triton.jit
def gates_mm(x, w_ptr, j, k, H, G: tl.constexpr, z0, z1, z2, z3, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """z_g += x @ W_g[j, k]^T for the G gates (1 <= G <= 4; z_g past G untouched); x: [M, len(k)]."""
    z0 = mm(x, w_tile(w_ptr, 0, j[None, :], k[:, None], H, ACC), z0, ACC, PRECISION)
    if G >= 2:
        z1 = mm(x, w_tile(w_ptr, 1, j[None, :], k[:, None], H, ACC), z1, ACC, PRECISION)
    if G >= 3:
        z2 = mm(x, w_tile(w_ptr, 2, j[None, :], k[:, None], H, ACC), z2, ACC, PRECISION)
    if G >= 4:
        z3 = mm(x, w_tile(w_ptr, 3, j[None, :], k[:, None], H, ACC), z3, ACC, PRECISION)
    return z0, z1, z2, z3
