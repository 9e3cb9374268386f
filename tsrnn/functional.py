"""One recurrent layer or one scan over a whole sequence, on the backend the caller picks.

Each function has the signature and results of its reference in ``tsrnn.reference``; the fused
path computes the input projection for all steps as one GEMM, runs the recurrence in one
operator call (``torch.ops.tsrnn`` compiled, ``torch.ops.tsrnn_triton`` Triton; see
``tsrnn.ops``), and lets autograd turn the projection's gradient into one GEMM for W_ih and one
reduction for the bias. Gate math runs in float32 for bf16/fp16 inputs; h and c come back in the
input's dtype, the pLSTM age a in float32 (float64 for float64 input).
On CUDA, ``backend="auto"`` chooses per shape among cuDNN (LSTM layers: ``torch._VF.lstm``, TF32
off so that float32 stays float32, the effective bias as its input bias), the persistent CUDA
kernel and Triton, by timing them (see ``tsrnn.backend``).
"""
from __future__ import annotations

import warnings

import torch

from tsrnn import _validation as check
from tsrnn import backend as _backend
from tsrnn import ops, reference

INPUT_GATES = ("coupled", "separate")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_layer(cell, x, h0, states, w_ih, w_hh, bias, p=None, dt=None):
    """Validate one layer's arguments; returns dt as (T, B) or None."""
    check.tensor("x", x, 3)
    steps, batch, in_size = x.shape
    if steps < 1 or batch < 1:
        raise ValueError(f"x must have at least one step and one batch row, got shape {tuple(x.shape)}")
    check.tensor("w_hh", w_hh, 2)
    hidden = w_hh.shape[1]
    if hidden < 1:
        raise ValueError(f"w_hh must have at least one hidden unit, got shape {tuple(w_hh.shape)}")
    rows = ops.CELLS[cell].gates * hidden
    check.shape("w_hh", w_hh, (rows, hidden))
    check.tensor("w_ih", w_ih, 2)
    check.shape("w_ih", w_ih, (rows, in_size))
    if bias is not None:
        check.tensor("bias", bias, 1)
        check.shape("bias", bias, (rows,))
    for name, state in {"h0": h0, **states}.items():
        check.tensor(name, state, 2)
        check.shape(name, state, (batch, hidden))
    check.same_dtype("x", x, w_ih=w_ih, w_hh=w_hh, bias=bias, h0=h0, c0=states["c0"])
    check.same_device("x", x, w_ih=w_ih, w_hh=w_hh, bias=bias, h0=h0, p=p, dt=dt, **states)
    if cell != "lstm":
        check.tensor("p", p, 1)
        check.shape("p", p, (hidden,))
        check.nonnegative("a0", states["a0"])
    if dt is not None:
        check.tensor("dt", dt, (2, 3))
        if dt.dim() == 3:
            check.shape("dt", dt, (steps, batch, 1))
            dt = dt.squeeze(-1)
        check.shape("dt", dt, (steps, batch))
        check.positive("dt", dt)
    return dt


def _tuning(cell, x, w_hh, bias, run):
    """(key, run without autograd) for the measured choice of a CUDA path (tsrnn.backend)."""
    key = (cell, x.device.index, x.dtype, x.shape[0].bit_length(), x.shape[1], x.shape[2], w_hh.shape[1],
           bias is None, torch.is_grad_enabled())

    def timed_run(path):
        with torch.no_grad():
            run(path)

    return key, timed_run


def _persistent_fits(cell, x, w_hh):
    """Whether the persistent CUDA kernel takes this layer (asked only on CUDA tensors)."""
    return lambda: ops.op("native", "recurrence_plan")(cell, w_hh.to(_compute_dtype(x.dtype))) > 0


def _fused(impl, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, want_forget):
    """Run one layer through the recurrence operator of ``impl`` ("native" or "triton");
    returns (out, h_n, states_n, f)."""
    shape = ops.CELLS[cell]
    compute = _compute_dtype(x.dtype)
    steps, batch, in_size = x.shape
    x_c, w_ih, w_hh = x.to(compute), w_ih.to(compute), w_hh.to(compute)
    flat = x_c.reshape(steps * batch, in_size)
    xg = flat @ w_ih.t() if bias is None else torch.addmm(bias.to(compute), flat, w_ih.t())
    xg = xg.view(steps, batch, shape.gates * w_hh.shape[1])
    state0 = torch.stack([s.to(compute) for s in states])
    p = None if p is None else p.to(compute)
    dt = None if dt is None else dt.to(compute)
    differentiable = (x, w_ih, w_hh, bias, h0, p, *states)
    save = want_forget or (
        torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in differentiable)
    )
    h_all, state_all, saved = ops.op(impl, "recurrence_forward")(
        cell, xg, w_hh, h0.to(compute), state0, p, dt, eps, save
    )
    forget = None
    if want_forget:
        hidden = w_hh.shape[1]
        forget = saved.view(steps, batch, shape.saved, hidden)[:, :, shape.forget]
    return h_all.to(x.dtype), state_all[-1].unbind(0), forget


def _cudnn_lstm(x, h0, c0, w_ih, w_hh, bias):
    """(S1) through torch's LSTM kernel (cuDNN on CUDA) with ``bias`` as b_ih and b_hh = 0."""
    weights = [w_ih, w_hh] if bias is None else [w_ih, w_hh, bias, torch.zeros_like(bias)]
    with warnings.catch_warnings(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        warnings.filterwarnings("ignore", message=".*not part of single contiguous chunk.*")  # weights are per call
        out, h_n, c_n = torch._VF.lstm(x, (h0[None], c0[None]), weights, bias is not None, 1, 0.0,
                                       torch.is_grad_enabled(), False, False)
    return out, (h_n[0], c_n[0])


def lstm(x, h0, c0, w_ih, w_hh, bias=None, backend="auto", return_forget=False):
    """(S1) over a sequence: ``out, (h_n, c_n) = lstm(x, h0, c0, w_ih, w_hh, bias)``.

    x (T, B, I), h0/c0 (B, H), w_ih (4H, I), w_hh (4H, H), bias (4H,) the effective bias or None.
    With ``return_forget=True`` also returns the forget gates (T, B, H).
    """
    _check_layer("lstm", x, h0, {"c0": c0}, w_ih, w_hh, bias)

    def run(path):
        if path == "reference":
            return reference.lstm(x, h0, c0, w_ih, w_hh, bias)
        if path == "cudnn":
            return (*_cudnn_lstm(x, h0, c0, w_ih, w_hh, bias), None)
        out, (c_n,), forget = _fused(path, "lstm", x, h0, (c0,), w_ih, w_hh, bias, None, None, 0.0, return_forget)
        return out, (out[-1], c_n.to(x.dtype)), forget

    path = _backend.resolve(backend, x.device, "recurrence", cudnn=not return_forget,
                            fits=_persistent_fits("lstm", x, w_hh), tune=_tuning("lstm", x, w_hh, bias, run))
    out, state, forget = run(path)
    return (out, state, forget) if return_forget else (out, state)


def plstm(x, h0, c0, a0, w_ih, w_hh, bias, p, dt=None, eps=1e-3, input_gate="coupled",
          backend="auto", return_forget=False):
    """(S9) over a sequence: ``out, (h_n, c_n, a_n) = plstm(x, h0, c0, a0, w_ih, w_hh, bias, p)``.

    w_ih (G*H, I), w_hh (G*H, H), bias (G*H,) or None with G = 3 (coupled: r, g, o) or 4
    (separate: i, r, g, o); p (H,) the decay exponent; a0 (B, H) the age (zeros at the start);
    dt (T, B) or (T, B, 1) step lengths > 0, or None for Δt = 1. dt is data: it gets no gradient.
    """
    check.choice("input_gate", input_gate, INPUT_GATES)
    cell = f"plstm_{input_gate}"
    dt = _check_layer(cell, x, h0, {"c0": c0, "a0": a0}, w_ih, w_hh, bias, p, dt)
    eps = check.positive_real("eps", eps)
    if dt is not None:
        dt = dt.detach()

    def run(path):
        if path == "reference":
            return reference.plstm(x, h0, c0, a0, w_ih, w_hh, bias, p, dt, eps, input_gate)
        out, (c_n, a_n), forget = _fused(path, cell, x, h0, (c0, a0), w_ih, w_hh, bias, p, dt, eps, return_forget)
        return out, (out[-1], c_n.to(x.dtype), a_n), forget

    path = _backend.resolve(backend, x.device, "recurrence", fits=_persistent_fits(cell, x, w_hh),
                            tune=_tuning(cell, x, w_hh, bias, run))
    out, state, forget = run(path)
    return (out, state, forget) if return_forget else (out, state)


def linear_scan(a, u, x0=None, backend="auto"):
    """x_t = a_t x_{t-1} + u_t elementwise over u (T, ...); a broadcasts against u; x0 (...)."""
    check.tensor("u", u)
    check.tensor("a", a)
    if u.dim() < 1 or u.shape[0] < 1:
        raise ValueError(f"u must be (T, ...) with T >= 1, got shape {tuple(u.shape)}")
    try:
        a_full = torch.broadcast_to(a, u.shape)
    except RuntimeError:
        raise ValueError(f"a of shape {tuple(a.shape)} does not broadcast to u {tuple(u.shape)}") from None
    if x0 is not None:
        check.tensor("x0", x0)
        check.shape("x0", x0, u.shape[1:])
    check.same_dtype("u", u, a=a, x0=x0)
    check.same_device("u", u, a=a, x0=x0)
    impl = _backend.resolve(backend, u.device, "linear_scan")
    if impl == "reference":
        return reference.linear_scan(a, u, x0)
    compute = _compute_dtype(u.dtype)
    steps = u.shape[0]
    x0 = u.new_zeros(u.shape[1:]) if x0 is None else x0
    args = (a_full.to(compute).reshape(steps, -1).contiguous(), u.to(compute).reshape(steps, -1).contiguous(),
            x0.to(compute).reshape(-1).contiguous())
    x = ops.op(impl, "linear_scan_forward")(*args)
    return x.view(u.shape).to(u.dtype)
