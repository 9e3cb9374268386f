"""The recurrent cells as one Triton plug-in of the per-step kernels (triton_step.py); the same
cells as the C++ kernels (csrc/recurrence/cells.h).

A cell maps one step's gate pre-activations z and previous states (c', a') to h, (c, a) and
the activations saved for backward (forward), and dL/dh, dL/d(c, a) back to dz and
dL/d(c', a') (backward). The kernels take the cell (tsrnn/ops/recurrence/cells.py) as named constexprs
(``constexprs``): HAS_P (the pLSTM: a decay exponent p and the age a), COUPLED (i = 1 - f), and
its sizes G (gate rows), S (states), K (saved rows).
Gate rows of z (and of W_hh, dz): LSTM (i, f, g, o), coupled (r, g, o), separate (i, r, g, o).
Saved rows: LSTM (i, f, g, o), pLSTM (f, r, g, o[, i]).
The functions are elementwise with broadcasting: callers pass 2-D (batch x unit) tiles, 1-D
flat vectors or scalars (p, dt; and placeholders for the arguments a cell ignores).
Also here: the state, p and Δt loads and stores (load_states, store_states,
load_optional), the row loads / stores of xg, saved and dz (load_rows, store_rows), the W_hh tiles and
dots (w_tile, mm, gates_mm), and the drivers' host side: the rows of each step (``Steps``:
padded, or packed sequences in torch's PackedSequence layout), ``forward_prologue``,
``backward_prologue``, ``final_states`` and ``weight_grad``.
Products (the operators' ``precision``, ``tsrnn.precision.products``): the kernels take it as the
constexpr PRECISION of their dots (``mm``): "ieee" IEEE float32 dots; "tf32" the left operand (h,
dz) rounded to TF32 in the kernel (``round_operand``, as cvt.rna) and TF32 dots
(``input_precision="tf32"``, tensor cores), exact on rounded operands, so the Triton interpreter
of the CPU tests, whose dots are exact, computes what the GPU does; "bf16" the left operand
rounded to bfloat16 and IEEE float32 dots, whose products of bf16 values are exact: a bf16 dot's
result with float32 accumulation, on the float32 units (no bf16 tensor cores). The drivers round
W_hh once per call, and the operands of their own torch GEMMs (dh of the per-step backward,
dW_hh), with ``tsrnn.precision.round_operands``; float64 calls are "ieee" whatever they ask.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from tsrnn.ops.recurrence.cells import CELLS, math_dtype
from tsrnn.precision import PRODUCTS, round_operands

from . import checks


def constexprs(cell: str) -> dict:
    """The cell of the registry (tsrnn/ops/recurrence/cells.py) as the kernels' constexprs."""
    c = CELLS[cell]
    return {"HAS_P": c.params != (), "COUPLED": c.input_gate == "coupled", "G": c.num_gates, "S": c.num_states,
            "K": c.num_saved}


def kernel_products(precision: str, acc_f64: bool) -> str:
    """The kernels' PRECISION for a call's ``precision`` (checked, with the compiled operators'
    message): "ieee" for float64 math, else ``precision``."""
    if precision not in PRODUCTS:
        raise RuntimeError(f"tsrnn: unknown precision '{precision}', expected 'ieee', 'tf32' or 'bf16'")
    return "ieee" if acc_f64 else precision


def eps_tensor(eps: float, like: torch.Tensor) -> torch.Tensor:
    """ε as a one-element tensor of the math dtype, read by the kernels with tl.load: a float
    argument reaches the kernel in float32 under the Triton interpreter, and 1e-3 in float32
    moves a float64 forget gate by ~1e-10."""
    return torch.full((1,), eps, dtype=like.dtype, device=like.device)


class Steps:
    """The rows each step runs, as csrc/recurrence/op.h's ``Steps``. Padded (no batch_sizes): step
    t runs all B rows, row t*B + b of the [T, B, ...] tensors seen as [T*B, ...]. Packed
    (batch_sizes [T], torch's PackedSequence layout, the batch sorted by length, longest first):
    step t runs rows b < rows(t), row first(t) + b of the packed [N, ...] tensors (xg, dt, h_all,
    saved, grad_h, dz); state_all stays [T, S, B, H], its rows b >= rows(t) at step t zero (allocated
    so; no kernel writes them).
    ``offsets`` [T + 1], a list: first(t) = offsets[t], offsets[T] = N. Packed, batch_sizes' values
    are checked here (checks.packed_offsets, with the compiled op's messages)."""

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
        """How many steps each row runs, int64 [B] on the CPU: row b runs the steps t with rows(t) > b,
        a prefix of 0 .. T-1 (all T when padded, none for a row b >= rows(0))."""
        negated = -torch.tensor(self.offsets).diff()  # -rows(t), non-decreasing
        return torch.searchsorted(negated, -torch.arange(self.B), side="left")


def forward_prologue(cell, xg, w_hh, h0, state0, p, dt, eps, save, batch_sizes=None, precision="ieee"):
    """What both Triton forward drivers start from, after the operator's checks: T, B, H, the
    cell's constexprs, the ``Steps`` (batch_sizes' values checked), the kernels' ``products``,
    contiguous inputs (``placeholder`` for the pointer of an absent one; W_hh rounded to the
    products), ε as a tensor, and the outputs h_all,
    state_all [T, S, B, H] and saved (or [0]): h_all [T, B, H] and saved [T, B, K*H] padded, [N, H]
    and [N, K*H] packed (xg [N, G*H], dt [N])."""
    T, B, H = checks.recurrence_args(cell, xg, w_hh, h0, state0, p, dt, batch_sizes)
    checks.math_dtype(xg)
    checks.triton_device(xg)
    cell_args = constexprs(cell)
    steps = Steps(batch_sizes, T, B, xg.shape[0] if batch_sizes is not None else T * B)
    rows = xg.shape[:-1]  # (T, B) or, packed, (N,)
    h0 = h0.contiguous()
    products = kernel_products(precision, xg.dtype == torch.float64)
    return SimpleNamespace(
        T=T, B=B, H=H, cell=cell_args, steps=steps, acc_f64=xg.dtype == torch.float64, eps=eps_tensor(eps, xg),
        products=products, xg=xg.contiguous(), w_hh=round_operands(w_hh, products).contiguous(), h0=h0, state0=state0.contiguous(), placeholder=h0,
        p=h0 if p is None else p.contiguous(), dt=None if dt is None else dt.contiguous(),
        h_all=xg.new_empty(*rows, H), state_all=(xg.new_zeros if steps.packed else xg.new_empty)(T, cell_args["S"], B, H),
        saved=xg.new_empty(*rows, cell_args["K"] * H) if save else xg.new_empty(0))


def backward_prologue(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved, p, dt, eps,
                      batch_sizes=None, precision="ieee"):
    """What both Triton backward drivers start from, after the operator's checks: T, B, H, the
    cell's constexprs, the ``Steps``, the math dtype, the kernels' ``products``, contiguous inputs
    (W_hh rounded to the products), ε as a tensor and dz ([T, B, G*H] padded, [N, G*H] packed, as
    h_all)."""
    T, B, H = checks.recurrence_backward_args(cell, grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all, saved,
                                              p, dt, batch_sizes)
    checks.math_dtype(h_all)
    checks.triton_device(h_all)
    cell_args = constexprs(cell)
    steps = Steps(batch_sizes, T, B, h_all.shape[0] if batch_sizes is not None else T * B)

    def contiguous(t):
        return None if t is None else t.contiguous()

    products = kernel_products(precision, h_all.dtype == torch.float64)
    return SimpleNamespace(
        T=T, B=B, H=H, cell=cell_args, steps=steps, acc=math_dtype(h_all.dtype), acc_f64=h_all.dtype == torch.float64,
        products=products, eps=eps_tensor(eps, h_all), grad_h=contiguous(grad_h), grad_state_n=contiguous(grad_state_n),
        w_hh=round_operands(w_hh, products).contiguous(), state0=state0.contiguous(), state_all=state_all.contiguous(),
        saved=saved.contiguous(), p=contiguous(p), dt=contiguous(dt),
        dz=h_all.new_empty(*h_all.shape[:-1], cell_args["G"] * H))


def final_states(state_all, state0, steps: Steps):
    """state_n [S, B, H]: each row's states after its last step, as csrc/recurrence/op.h's
    final_states: state_all[T-1] padded; packed, state_all[length(b) - 1, :, b] (state0[:, b] for
    a row of no step), one gather."""
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
    """dW_hh = sum_t dz[t]^T h_{t-1}, as csrc/recurrence/op.h's recurrent_weight_grad, its operands
    rounded to ``products`` (``round_operands``: a TF32 or bf16 GEMM's result whatever torch's
    flags say). Padded (dz [T, B, G*H]): dz[0]^T h0 + dz[1:]^T h_all[:-1], two GEMMs, no copy of
    the h's (but their rounding). Packed (dz [N, G*H], h_all [N, H]): step t's rows of dz meet the
    first rows(t) rows of step t-1 (of h0 at t = 0), gathered into one [N, H] operand of one GEMM."""
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
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def tanh(x):
    return 2.0 * sigmoid(2.0 * x) - 1.0


@triton.jit
def cell_forward(HAS_P: tl.constexpr, COUPLED: tl.constexpr, z0, z1, z2, z3, c_prev, a_prev, p, dt, eps):
    """One step; returns (h, c, a, act0, act1, act2, act3, act4), act = the saved rows.

    LSTM:  i, f, g, o = σ(z0), σ(z1), tanh(z2), σ(z3); act = (i, f, g, o, i); a = a' (unused).
    pLSTM: r, g, o = σ, tanh, σ of the last three gate rows; a = (1 - r)(a' + dt),
           f = ((a + 1) / ((1 - r)(a' + 1) + eps))^(-p), i = 1 - f (coupled) or σ(z0) (separate);
           act = (f, r, g, o, i).
    Both:  c = f c' + i g, h = o tanh(c). z3 is ignored by the coupled cell (G = 3).
    """
    if HAS_P:
        if COUPLED:
            r, g, o = sigmoid(z0), tanh(z1), sigmoid(z2)
        else:
            r, g, o = sigmoid(z1), tanh(z2), sigmoid(z3)
        s = 1.0 - r
        a = s * (a_prev + dt)
        f = tl.exp(-p * tl.log((a + 1.0) / (s * (a_prev + 1.0) + eps)))
        if COUPLED:
            i = 1.0 - f
        else:
            i = sigmoid(z0)
        act0, act1 = f, r
    else:
        i, f, g, o = sigmoid(z0), sigmoid(z1), tanh(z2), sigmoid(z3)
        a = a_prev
        act0, act1 = i, f
    c = f * c_prev + i * g
    return o * tanh(c), c, a, act0, act1, g, o, i


@triton.jit
def cell_backward(HAS_P: tl.constexpr, COUPLED: tl.constexpr, dh, dc, da, act0, act1, act2, act3, act4,
                  c_prev, a_prev, c, a, p, dt, eps):
    """One step back: dh, dc, da = dL/dh_t, dL/dc_t, dL/da_t (from the future and the loss).
    Returns (dz0, dz1, dz2, dz3, dc', da', dp): dz in gate-row order (dz3 unused when G = 3),
    dL/dc_{t-1}, dL/da_{t-1}, and this step's dL/dp (pLSTM; da' and dp are placeholders for LSTM).

    Both:  with tc = tanh(c): dc += dh o (1 - tc²), dz_o = dh tc o (1 - o), dz_g = dc i (1 - g²),
           dz_i = dc g i (1 - i), dc' = dc f.
    LSTM:  dz_f = dc c' f (1 - f).
    pLSTM: log f = -p (log N - log D), N = a + 1, D = (1 - r)(a' + 1) + eps;
           df = dc (c' - g) (coupled, i = 1 - f) or dc c'; dlogf = df f; dp = -dlogf log(N / D);
           dN = da - p dlogf / N, dD = p dlogf / D, ds = dN (a' + dt) + dD (a' + 1),
           dz_r = -ds r (1 - r), da' = (dN + dD)(1 - r).
    """
    tc = tanh(c)
    if HAS_P:
        f, r, g, o = act0, act1, act2, act3
        if COUPLED:
            i = 1.0 - f
        else:
            i = act4
    else:
        i, f, g, o = act0, act1, act2, act3
    dc = dc + dh * o * (1.0 - tc * tc)
    dz_i = dc * g * i * (1.0 - i)
    dz_g = dc * i * (1.0 - g * g)
    dz_o = dh * tc * o * (1.0 - o)
    if HAS_P:
        s = 1.0 - r
        N = a + 1.0
        D = s * (a_prev + 1.0) + eps
        if COUPLED:
            df = dc * (c_prev - g)
        else:
            df = dc * c_prev
        dlogf = df * f
        dp = -dlogf * tl.log(N / D)
        dN = da - p * dlogf / N
        dD = p * dlogf / D
        dz_r = -(dN * (a_prev + dt) + dD * (a_prev + 1.0)) * r * s
        da_prev = (dN + dD) * s
        if COUPLED:
            dz0, dz1, dz2, dz3 = dz_r, dz_g, dz_o, dz_o
        else:
            dz0, dz1, dz2, dz3 = dz_i, dz_r, dz_g, dz_o
    else:
        dz0, dz1, dz2, dz3 = dz_i, dc * c_prev * f * (1.0 - f), dz_g, dz_o
        da_prev, dp = da, 0.0
    return dz0, dz1, dz2, dz3, dc * f, da_prev, dp


@triton.jit
def load_states(ptr, offsets, BH, mask, HAS_P: tl.constexpr, ACC: tl.constexpr):
    """(c, a) at ptr + offsets and ptr + BH + offsets ([S, B, H] states) in ACC; for the LSTM,
    which has no age, a is c (a placeholder the cell ignores)."""
    c = tl.load(ptr + offsets, mask=mask, other=0.0).to(ACC)
    a = c
    if HAS_P:
        a = tl.load(ptr + BH + offsets, mask=mask, other=0.0).to(ACC)
    return c, a


@triton.jit
def store_states(ptr, offsets, BH, c, a, mask, HAS_P: tl.constexpr):
    """The inverse of load_states (a only for the pLSTM)."""
    tl.store(ptr + offsets, c, mask=mask)
    if HAS_P:
        tl.store(ptr + BH + offsets, a, mask=mask)


@triton.jit
def load_optional(ptr, offsets, mask, PRESENT: tl.constexpr, default, ACC: tl.constexpr):
    """The values at ptr + offsets in ACC (``default`` where masked) if the tensor is PRESENT, else
    the scalar ``default``: p (0.0, which the LSTM cell ignores) and Δt (1.0 without dt)."""
    value = default
    if PRESENT:
        value = tl.load(ptr + offsets, mask=mask, other=default).to(ACC)
    return value


@triton.jit
def load_rows(ptr, H, N: tl.constexpr, mask, ACC: tl.constexpr):
    """Rows n = 0 .. N-1 (N = 3, 4 or 5) at ptr + n H, in ACC (0 where masked): the gate rows of
    xg (N = G) or the saved rows (N = K). Returns 5 values; those past N repeat row N - 1."""
    r0 = tl.load(ptr, mask=mask, other=0.0).to(ACC)
    r1 = tl.load(ptr + H, mask=mask, other=0.0).to(ACC)
    r2 = tl.load(ptr + 2 * H, mask=mask, other=0.0).to(ACC)
    r3 = r2
    if N >= 4:
        r3 = tl.load(ptr + 3 * H, mask=mask, other=0.0).to(ACC)
    r4 = r3
    if N == 5:
        r4 = tl.load(ptr + 4 * H, mask=mask, other=0.0).to(ACC)
    return r0, r1, r2, r3, r4


@triton.jit
def store_rows(ptr, H, N: tl.constexpr, r0, r1, r2, r3, r4, mask):
    """The inverse of load_rows: rows r0 .. r{N-1} at ptr + n H (dz: N = G, saved: N = K)."""
    tl.store(ptr, r0, mask=mask)
    tl.store(ptr + H, r1, mask=mask)
    tl.store(ptr + 2 * H, r2, mask=mask)
    if N >= 4:
        tl.store(ptr + 3 * H, r3, mask=mask)
    if N == 5:
        tl.store(ptr + 4 * H, r4, mask=mask)


@triton.jit
def w_tile(w_ptr, g, j, k, H, ACC: tl.constexpr):
    """W_hh[g H + j, k] in ACC (0 past H) for broadcastable index tensors j (unit of gate g) and
    k (input unit): j[None, :], k[:, None] give the tile of W_g^T, j[:, None], k[None, :] of W_g."""
    return tl.load(w_ptr + (g * H + j).to(tl.int64) * H + k, mask=(j < H) & (k < H), other=0.0).to(ACC)


@triton.jit
def round_operand(x, PRECISION: tl.constexpr):
    """float32 x rounded as tsrnn.precision.round_operands rounds it, in integer ops (the Triton
    interpreter's casts to bfloat16 truncate): "tf32" to 10 mantissa bits, ties away from zero
    (cvt.rna); "bf16" to 7, ties to even; NaN kept."""
    bits = x.to(tl.int32, bitcast=True)
    if PRECISION == "tf32":
        bits = (bits + 0x1000) & -0x2000
    else:
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000
    return tl.where(x == x, bits.to(tl.float32, bitcast=True), x)


@triton.jit
def mm(x, w, acc, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """acc + x @ w in ACC, float64 or float32 with the products of PRECISION (the module
    docstring): "ieee" IEEE dots; "tf32" and "bf16" x rounded here (w, of W_hh, was rounded by the
    driver), then TF32 dots (exact on the rounded operands) and IEEE dots respectively."""
    if PRECISION != "ieee":
        x = round_operand(x, PRECISION)
    if PRECISION == "tf32":
        acc = tl.dot(x, w, acc, input_precision="tf32", out_dtype=ACC)
    else:
        acc = tl.dot(x, w, acc, input_precision="ieee", out_dtype=ACC)
    return acc


@triton.jit
def gates_mm(x, w_ptr, j, k, H, G: tl.constexpr, z0, z1, z2, z3, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """z_g += x @ W_g[j, k]^T for the G gates (z3 untouched when G = 3); x: [M, len(k)]."""
    z0 = mm(x, w_tile(w_ptr, 0, j[None, :], k[:, None], H, ACC), z0, ACC, PRECISION)
    z1 = mm(x, w_tile(w_ptr, 1, j[None, :], k[:, None], H, ACC), z1, ACC, PRECISION)
    z2 = mm(x, w_tile(w_ptr, 2, j[None, :], k[:, None], H, ACC), z2, ACC, PRECISION)
    if G == 4:
        z3 = mm(x, w_tile(w_ptr, 3, j[None, :], k[:, None], H, ACC), z3, ACC, PRECISION)
    return z0, z1, z2, z3
