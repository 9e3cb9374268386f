"""One recurrent layer or one scan over a whole sequence, on the path ``tsrnn.backend`` chooses.

Each public function has the signature and results of its reference in ``tsrnn.reference``,
checks its arguments once (``tsrnn._validation``), then runs the path that ``tsrnn.backend``
chooses for the call (``backend=`` a requested backend or a path name), by the kind of path its
registry record names (``Path.runs``):

- "operator" (cpu, cuda_coop, triton_persistent, triton_step) computes the input projection of
  all steps as one GEMM (``tsrnn.ops.projection``: the CPU engine's own on "cpu", torch.addmm
  elsewhere), runs the recurrence in one operator call (``tsrnn.ops``), and turns the
  projection's gradient into one GEMM for W_ih, one for x and a sum for the bias (on "cpu", the
  bias's from the same pass over the gradient as W_ih's);
- "torch_lstm" (onednn, cudnn) calls ``torch._VF.lstm`` with the effective bias as b_ih and
  b_hh = 0 (cuDNN with TF32 off, in the forward and in the backward, so float32 stays float32);
- "reference" runs the cell's step loop (``Cell.reference_layer``) on its arguments cast to the
  math dtype.

Gate math runs in ``tsrnn.cells.math_dtype`` (float32 for bf16/fp16 inputs, float64 for
float64): h and c come back in the input's dtype, the pLSTM age a in the math dtype; the
operator paths' input projection is a GEMM in the input's dtype. Under ``torch.autocast`` the
public functions and the modules run the layer in the autocast dtype (``tsrnn.precision``).
The modules call ``_layer`` directly: they check their inputs once in their own layout
(batch_first, unbatched, stacked states, packed rows).
"""
from __future__ import annotations

import contextlib
import warnings

import torch

from tsrnn import _validation as check
from tsrnn import backend as _backend
from tsrnn import cells, ops, precision, reference, scan_layer
from tsrnn.packing import Packing


def _torch_lstm(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing):
    """(S1) through torch's LSTM kernel (oneDNN on CPU, cuDNN on CUDA) in the math dtype, with
    ``bias`` as b_ih and b_hh = 0, on packed data through its PackedSequence entry; returns
    (out, (h_n, c_n), None)."""
    math = cells.math_dtype(x.dtype)
    (c0,) = states
    weights = [w_ih, w_hh] if bias is None else [w_ih, w_hh, bias, torch.zeros_like(bias)]
    train = torch.is_grad_enabled() or torch.jit.is_tracing()  # a traced graph serves training and inference
    # cuDNN takes contiguous states and weights only (refused or failing a view on CUDA, not on the CPU)
    states = (h0.to(math).contiguous()[None], c0.to(math).contiguous()[None])
    data = (x.to(math),) if packing is None else (x.to(math), packing.batch_sizes)
    args = (*data, states, [w.to(math).contiguous() for w in weights], bias is not None, 1, 0.0, train, False)
    if packing is None:
        args += (False,)  # batch_first
    if x.device.type != "cuda":
        out, h_n, c_n = torch._VF.lstm(*args)
    else:
        with warnings.catch_warnings(), _cudnn_exact():
            warnings.filterwarnings("ignore", message=".*not part of single contiguous chunk.*")  # weights are per call
            out, h_n, c_n = torch._VF.lstm(*args)
        if out.grad_fn is not None and not torch.compiler.is_compiling():
            _exact_backward(out.grad_fn)
    return out.to(x.dtype), (h_n[0].to(x.dtype), c_n[0].to(x.dtype)), None


@contextlib.contextmanager
def _cudnn_exact():
    """cuDNN on with TF32 off (float32 stays float32), the user's other cuDNN settings kept."""
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=True, benchmark=cudnn.benchmark, benchmark_limit=cudnn.benchmark_limit,
                     deterministic=cudnn.deterministic, allow_tf32=False):
        yield


def _exact_backward(node) -> None:
    """Runs the autograd ``node`` (cuDNN's LSTM backward) under ``_cudnn_exact``, each time it runs.

    cuDNN reads the TF32 flag when a kernel runs, and autograd runs the backward after the
    forward's ``with`` has ended, under the user's setting (torch's default allows TF32): on the
    first GPU run the cudnn path's outputs were within float32's tolerance and its gradients
    TF32-rounded: up to 2.9e-3 (grad x at H=301, bound 2.6e-3) and up to 4.4 times their bound
    (grad W_hh at H=130: 2.7e-3 against 6.1e-4).
    A pre-hook on the node turns TF32 off and a post-hook restores the setting, so retain_graph,
    create_graph and gradcheck work as without them; if the node's backward raises, the setting
    stays off. Under torch.compile no hook is set (the backward follows the user's setting)."""
    flags = contextlib.ExitStack()

    def before(grad_outputs):
        flags.enter_context(_cudnn_exact())

    def after(grad_inputs, grad_outputs):
        flags.close()

    node.register_prehook(before)
    node.register_hook(after)


def _operator(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing):
    """One layer through the recurrence operator of ``path``; returns (out, final states, traces)."""
    math = cells.math_dtype(x.dtype)
    hidden = w_hh.shape[1]
    flat = x.reshape(-1, x.shape[-1])  # the input projection in the layer's dtype (a low-precision GEMM for bf16/fp16)
    xg = ops.projection(path, flat, w_ih, bias).to(math).view(*x.shape[:-1], cell.num_gates * hidden)
    state0 = torch.stack([s.to(math) for s in states])
    differentiable = (x, w_ih, w_hh, bias, h0, p, *states)
    save = traces or torch.jit.is_tracing() or (  # a traced graph serves training and inference
        torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in differentiable))
    h_all, state_n, _, saved = ops.op(path, "recurrence_forward")(
        cell.name, xg, w_hh.to(math), h0.to(math), state0, None if p is None else p.to(math),
        None if dt is None else dt.to(math), eps, save, None if packing is None else packing.batch_sizes)
    per_step = None
    if traces:
        saved = saved if packing is None else packing.unpack(saved)  # (T, B, K*H), zero past the ends
        steps, batch = saved.shape[:2]
        per_step = dict(zip(cell.saved, saved.view(steps, batch, cell.num_saved, hidden).unbind(2)))
        if cell.has_p:  # the ages from the saved reset gates: a_t = (1 - r_t) a_{t-1} + (1 - r_t) Δt
            keep = 1 - per_step["r"]
            step = 1.0 if dt is None else (dt if packing is None else packing.unpack(dt)).to(math).unsqueeze(-1)
            per_step["a"] = linear_scan(keep, keep * step, state0[1])
            if packing is not None:
                per_step["a"] = per_step["a"] * packing.mask.unsqueeze(-1)
    out = h_all.to(x.dtype)
    h_n = out[-1] if packing is None else out.index_select(0, packing.last)
    finals = [s if name in cell.math_states else s.to(x.dtype) for name, s in zip(cell.states, state_n.unbind(0))]
    return out, (h_n, *finals), per_step


def _reference(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing):
    """One layer through the cell's step loop (``Cell.reference_layer``) in the math dtype, as the
    other paths compute: every argument cast to it (a bf16 layer's float32 age, a float64 dt with
    float32 inputs); h and the states not in ``math_states`` come back in x's dtype. Packed data
    runs as a padded batch in the loop masked by the rows' lengths. While torch.export traces, a
    full-length call without traces runs the loop as one scan operator (``tsrnn.scan_layer``)."""
    dtype, math = x.dtype, cells.math_dtype(x.dtype)
    x, h0, w_ih, w_hh, bias, p, dt, *states = (None if t is None else t.to(math)
                                                for t in (x, h0, w_ih, w_hh, bias, p, dt, *states))
    if torch.compiler.is_exporting() and packing is None and not traces:  # the time loop as one scan operator
        out, finals = scan_layer.layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps)
        per_step = None
    else:
        lengths = None
        if packing is not None:
            x, dt, lengths = packing.unpack(x), None if dt is None else packing.unpack(dt), packing.lengths
        out, finals, per_step = cell.reference_layer(x, h0, states, w_ih, w_hh, bias, p, dt, eps, lengths)
    finals = [s if name in cell.math_states else s.to(dtype) for name, s in zip(("h", *cell.states), finals)]
    return (out if packing is None else packing.pack(out)).to(dtype), tuple(finals), per_step


# How each kind of path of the registry (``tsrnn.backend.Path.runs``) runs one layer.
_LAYER = {"reference": _reference, "torch_lstm": _torch_lstm, "operator": _operator}


def _layer(cell, x, h0, states, w_ih, w_hh, bias, p=None, dt=None, eps=0.0, backend="auto", traces=False,
           batch_sizes=None):
    """One layer of ``cell`` (a ``tsrnn.cells.Cell``) on the chosen path, arguments unchecked;
    ``states`` the initial states after h0 in the cell's order. Returns (out, (h_n, *states_n),
    traces): with ``traces``, a dict of per-step (T, B, H) values holding at least the forget
    gate "f" and, for the pLSTM, the reset gate "r" and the age "a" (a fused path adds its other
    saved activations); None otherwise.

    With ``batch_sizes`` (T,) int64 on the CPU, x (N, I), dt (N,) and out (N, H) are packed
    sequences, the rows sorted by length (``tsrnn.packing``), batch_sizes[0] == B; h_n and the
    states are each row's after its last step, the traces padded (T, B, H), zero past the ends."""
    tensors = (x, h0, *states, w_ih, w_hh, bias, p)
    packing = None if batch_sizes is None else Packing.in_order(batch_sizes, x.device)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    steps = x.shape[0] if packing is None else packing.steps
    call = _backend.Call("recurrence", x.device, x.dtype, (steps, h0.shape[0], x.shape[-1], w_hh.shape[1]),
                         cell.name, bias is not None, grad, traces, packing is not None)

    def run(path, x, h0, *rest, dt=dt):
        *states, w_ih, w_hh, bias, p = rest
        return _LAYER[_backend.REGISTRY[path].runs](path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces,
                                                     packing)
    def timed(path, dtype=None):
        """The call on detached copies, cast to ``dtype`` if given (dt too: data, no gradient), for
        the backend to time and verify: it joins no graph and fires no hooks. Returns the outputs
        and the copies that need gradients, by name (``tsrnn.backend.Run``)."""
        copies = [None if t is None else t.detach().to(dtype or t.dtype).requires_grad_(t.requires_grad)
                  for t in tensors]
        out, finals, _ = run(path, *copies, dt=dt if dt is None or dtype is None else dt.to(dtype))
        outputs = dict(zip(("out", *(f"{s}_n" for s in ("h", *cell.states))), (out, *finals)))
        names = ("x", *cell.initial_states, "w_ih", "w_hh", "bias", "p")
        return outputs, {name: t for name, t in zip(names, copies) if t is not None and t.requires_grad}

    out, finals, per_step = run(_backend.choose(backend, call, timed), *tensors)
    return out, finals, per_step if traces else None


def _packed_inputs(packing, x, states, dt):
    """A padded batch's layer inputs in the packed layout of ``packing``: x (T, B, I) -> (N, I),
    each per-row state (B, H) -> (live, H) in packed order, dt (T, B) -> (N,) or None."""
    return packing.pack(x), [packing.sort(s) for s in states], None if dt is None else packing.pack(dt)


def _padded_outputs(packing, out, finals, initial, traces):
    """The packed results of a stack of layers back in the padded batch's layout: out (N, H) ->
    (T, B, H) zero past each row's end; each final state (live, H) -> (B, H) per row (a row of no
    step keeps its ``initial`` state); each trace (T', live, H) -> (T, B, H), zero past the ends."""
    finals = tuple(packing.unsort(f, i) for f, i in zip(finals, initial))
    traces = None if traces is None else {k: packing.reorder(v) for k, v in traces.items()}
    return packing.unpack(out), finals, traces


def _lengths_layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, lengths):
    """``_layer`` over a padded batch whose row b runs its first lengths[b] steps (``tsrnn.packing``):
    packed, run, and unpacked; (out, finals, traces) as ``_layer``'s, in the padded layout."""
    packing = Packing.from_lengths(lengths, x.shape[0]).to(x.device)
    if packing.live == 0:  # no row runs a step
        zeros = {name: x.new_zeros(*x.shape[:2], w_hh.shape[1]) for name in cell.traces} if traces else None
        return x.new_zeros(*x.shape[:2], w_hh.shape[1]), (h0, *states), zeros
    x_p, (h0_p, *states_p), dt_p = _packed_inputs(packing, x, (h0, *states), dt)
    out, finals, per_step = _layer(cell, x_p, h0_p, states_p, w_ih, w_hh, bias, p, dt_p, eps, backend, traces,
                                   packing.batch_sizes)
    return _padded_outputs(packing, out, finals, (h0, *states), per_step)


def lstm(x, h0, c0, w_ih, w_hh, bias=None, backend="auto", return_forget=False, lengths=None):
    """(S1) over a sequence: ``out, (h_n, c_n) = lstm(x, h0, c0, w_ih, w_hh, bias)``.

    x (T, B, I), h0/c0 (B, H), w_ih (4H, I), w_hh (4H, H), bias (4H,) the effective bias or None.
    With ``return_forget=True`` also returns the forget gates (T, B, H).
    ``lengths`` (B,) integers in [0, T] on any device, or None: row b runs its first lengths[b]
    steps only, as torch.nn.LSTM runs packed sequences: out is zero past each row's end, h_n and
    c_n are each row's after its last step (h0, c0 for a length of 0).
    """
    cell = cells.CELLS["lstm"]
    with precision.layer_region(x) as low:
        x, h0, c0, w_ih, w_hh, bias = precision.cast(low, x, h0, c0, w_ih, w_hh, bias)
        check.recurrent_layer(cell, x, h0, (c0,), w_ih, w_hh, bias)
        out, state, traces = _any_layer(cell, x, h0, (c0,), w_ih, w_hh, bias, None, None, 0.0, backend,
                                        return_forget, lengths)
    return (out, state, traces["f"]) if return_forget else (out, state)


def plstm(x, h0, c0, a0, w_ih, w_hh, bias, p, dt=None, eps=1e-3, input_gate="coupled",
          backend="auto", return_forget=False, lengths=None):
    """(S9) over a sequence: ``out, (h_n, c_n, a_n) = plstm(x, h0, c0, a0, w_ih, w_hh, bias, p)``.

    w_ih (G*H, I), w_hh (G*H, H), bias (G*H,) or None with G = 3 (coupled: r, g, o) or 4
    (separate: i, r, g, o); p (H,) the decay exponents, finite and > 0; a0 (B, H) the age (zeros at the start);
    dt (T, B) or (T, B, 1) step lengths > 0, or None for Δt = 1. dt is data: it gets no gradient.
    ``lengths`` as for ``lstm``: a_n too is each row's age after its last step.
    """
    cell = cells.plstm(input_gate)
    with precision.layer_region(x) as low:
        x, h0, c0, w_ih, w_hh, bias = precision.cast(low, x, h0, c0, w_ih, w_hh, bias)
        dt = check.recurrent_layer(cell, x, h0, (c0, a0), w_ih, w_hh, bias, p, dt)
        eps = check.positive_real("eps", eps)
        out, state, traces = _any_layer(cell, x, h0, (c0, a0), w_ih, w_hh, bias, p,
                                        None if dt is None else dt.detach(), eps, backend, return_forget, lengths)
    return (out, state, traces["f"]) if return_forget else (out, state)


def _any_layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, lengths):
    """The public functions' layer: ``_layer``, or ``_lengths_layer`` with ``lengths`` (checked here)."""
    if lengths is None:
        return _layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces)
    lengths = check.sequence_lengths(lengths, x.shape[0], x.shape[1])
    return _lengths_layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, backend, traces, lengths)


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
    steps = u.shape[0]
    path = _backend.choose(backend, _backend.Call("linear_scan", u.device, u.dtype, (steps, u[0].numel())))
    if _backend.REGISTRY[path].runs == "reference":
        return reference.linear_scan(a, u, x0)
    math = cells.math_dtype(u.dtype)
    x0 = u.new_zeros(u.shape[1:]) if x0 is None else x0
    args = (a_full.to(math).reshape(steps, -1).contiguous(), u.to(math).reshape(steps, -1).contiguous(),
            x0.to(math).reshape(-1).contiguous())
    return ops.op(path, "linear_scan_forward")(*args).view(u.shape).to(u.dtype)
