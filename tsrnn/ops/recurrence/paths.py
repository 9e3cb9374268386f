"""How each kind of path runs one recurrent layer; each function is the ``run`` of the path records
(``tsrnn.backend.registry``) of its kind, called as ``run(path, cell, x, h0, states, w_ih, w_hh,
bias, p, dt, eps, traces, packing, w_hr)`` with ``path`` the record (``w_hr`` the LSTM's
projection W_hr (P, H) of a layer with torch.nn.LSTM's proj_size, or None; ``Path.why_not`` offers
a projected layer to the torch-LSTM paths and the reference only):

- ``run_operator`` (cpu, cuda_cluster, cuda_grid, triton_step) reads the
  precision of the call's products once (the record's ``products``, ``tsrnn.precision.products``:
  "tf32" on CUDA where torch.backends.cudnn.allow_tf32 is true, "bf16" for bf16 layers, else
  "ieee"), computes the input projection of all steps as one GEMM in it (the record's
  ``projection``: the CPU engine's own on "cpu", ``tsrnn.ops.projection.tensor_core_projection``'s
  on CUDA), runs the recurrence in one operator call of the record's namespace
  (``tsrnn.ops.recurrence.op``) with it, and turns the projection's gradient into one GEMM for
  W_ih, one for x and a sum for the bias (on "cpu", the bias's from the same pass over the
  gradient as W_ih's);
- ``run_torch_lstm`` (onednn, cudnn) calls ``torch._VF.lstm`` with the effective bias as b_ih and
  b_hh = 0, under the user's torch.backends settings, as torch.nn.LSTM runs (on CUDA, cuDNN uses
  TF32 in the forward and the backward where torch.backends.cudnn.allow_tf32 is true, torch's
  default); no flag is changed;
- ``run_reference`` runs the cell's step loop (``Cell.reference_layer``) on its arguments cast to
  the math dtype.

Gate math runs in ``cells.math_dtype`` (float32 for bf16/fp16 inputs, float64 for float64): h and
c come back in the input's dtype, the pLSTM age a in the math dtype; the operator paths' input
projection is a GEMM in the input's dtype. Each returns (out, (h_n, *states_n), traces or None).
"""
from __future__ import annotations

import warnings

import torch

from tsrnn import _validation as check
from tsrnn.ops import library
from tsrnn.ops.recurrence import export_scan
from tsrnn.ops.recurrence.cells import math_dtype


def run_torch_lstm(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing, w_hr=None):
    """(S1) through torch's LSTM kernel, on packed data through its PackedSequence entry; returns
    (out, (h_n, c_n), None). The kernel adds two bias vectors: a module's layer hands the pair
    ``torch_bias`` marked on its bias (its own b_ih and b_hh, or its effective bias and a zero
    vector, as views of the layer's flat cuDNN buffer where ``tsrnn.LSTM.flatten_parameters`` made
    one), so the kernel reads the module's tensors as torch.nn.LSTM's and nothing is copied per
    call; any other bias goes as b_ih with b_hh = 0 (one zero vector per device, dtype and size,
    shared by every call). On CUDA in the layer's dtype, as torch.nn.LSTM runs cuDNN (a bf16 layer
    in bf16); on the CPU (oneDNN) in the math dtype, as the other CPU paths (a bf16 layer in
    float32, its weights cast per call, where torch.nn.LSTM would run bf16)."""
    dtype = x.dtype if x.is_cuda else math_dtype(x.dtype)
    (c0,) = states
    pair = None if bias is None or check.tracing() else getattr(bias, TORCH_BIAS, None)
    if bias is None:
        weights = [w_ih, w_hh]
    elif pair is None:
        weights = [w_ih, w_hh, bias, zeros(bias.shape[0], dtype, bias.device)]
    else:
        weights = [w_ih, w_hh, bias if pair[0] is None else pair[0], pair[1]]
    if w_hr is not None:
        weights.append(w_hr)  # torch's kernel tells a projected layer by its fifth (third) weight
    train = torch.is_grad_enabled() or torch.jit.is_tracing()  # a traced graph serves training and inference
    # cuDNN takes contiguous states and weights only (refused or failing a view on CUDA, not on the CPU)
    states = (_as(h0, dtype).contiguous().unsqueeze(0), _as(c0, dtype).contiguous().unsqueeze(0))
    data = (_as(x, dtype),) if packing is None else (_as(x, dtype), packing.batch_sizes)
    args = (*data, states, [_as(w, dtype).contiguous() for w in weights], bias is not None, 1, 0.0, train, False)
    if packing is None:
        args += (False,)  # batch_first
    if not x.is_cuda or (pair is not None and one_buffer(*weights)):
        out, h_n, c_n = torch._VF.lstm(*args)  # a flat layer: cuDNN warns if it still has to copy
    else:
        with warnings.catch_warnings():  # separate tensors (the caller's, weight drop's, a bf16 layer's): copied
            warnings.filterwarnings("ignore", message=".*not part of single contiguous chunk.*")
            out, h_n, c_n = torch._VF.lstm(*args)
    return _as(out, x.dtype), (_as(h_n[0], x.dtype), _as(c_n[0], x.dtype)), None


TORCH_BIAS = "_tsrnn_torch_bias"  # the attribute ``torch_bias`` sets on a layer's bias


def torch_bias(bias: torch.Tensor, first: torch.Tensor | None, second: torch.Tensor) -> torch.Tensor:
    """Mark ``bias`` with the two vectors that torch's LSTM kernel is to add into it (``first`` None:
    ``bias`` itself), so ``run_torch_lstm`` hands those (a module's own tensors) in its place;
    ``bias`` must equal first + second until that call. A module marks the biases of its own
    forward's eager calls only, and hands no marked bias out."""
    setattr(bias, TORCH_BIAS, (first, second))
    return bias


_ZEROS: dict[tuple, torch.Tensor] = {}  # (size, dtype, device) -> the torch-LSTM paths' b_hh (never written)


def zeros(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero vector of ``size`` in ``dtype`` on ``device``, made once (read-only: cuDNN and oneDNN
    read their biases, and a traced graph records a fresh one); a normal tensor even when first
    asked for under torch.inference_mode, so that later calls with autograd can save it."""
    if check.tracing():
        return torch.zeros(size, dtype=dtype, device=device)
    key = (size, dtype, device)
    if key not in _ZEROS:
        with torch.inference_mode(False), torch.no_grad():
            _ZEROS[key] = torch.zeros(size, dtype=dtype, device=device)
    return _ZEROS[key]


def one_buffer(*tensors: torch.Tensor) -> bool:
    """Whether ``tensors`` are views of one buffer that starts with the first (a layer that
    ``tsrnn.LSTM.flatten_parameters`` laid out)."""
    return tensors[0].storage_offset() == 0 and len({t.untyped_storage().data_ptr() for t in tensors}) == 1


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, without a call into torch where it already is (the warm path's casts)."""
    return t if t.dtype == dtype else t.to(dtype)


def run_operator(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing, w_hr=None):
    """One layer through the recurrence operator of ``path``'s namespace; returns (out, final states,
    traces): the saved activations, padded (T, B, H) each (the caller adds the pLSTM's ages,
    ``tsrnn.functional._with_ages``). ``w_hr`` is None: the operators recur on h of H units, and no
    projected layer is offered to them. A bias of another dtype than x (a bf16 multi-timescale
    layer's float32 effective bias) is added in the math dtype after the projection's GEMM."""
    math = math_dtype(x.dtype)
    hidden = w_hh.shape[1]
    products = path.products(x.dtype, x.device)  # read once per call: the projection's and the operator's
    flat = x.reshape(-1, x.shape[-1])  # the input projection in the layer's dtype (a low-precision GEMM for bf16/fp16)
    # the CPU engine's projection serves CPU tensors, whose products are always "ieee": it takes no precision
    exact_bias = bias is not None and bias.dtype != x.dtype
    xg = path.projection(flat, w_ih, None if exact_bias else bias, *(() if products == "ieee" else (products,)))
    xg = _as(xg, math) + _as(bias, math) if exact_bias else _as(xg, math)
    xg = xg.view(*x.shape[:-1], cell.num_gates * hidden)
    state0 = states[0].to(math).unsqueeze(0) if len(states) == 1 else torch.stack([s.to(math) for s in states])
    save = traces or torch.jit.is_tracing() or (  # a traced graph serves training and inference
        library.needs_grad(x, w_ih, w_hh, bias, h0, p, *states))
    h_all, state_n, _, saved = library.call(
        path.namespace, "recurrence_forward", cell.name, xg, _as(w_hh, math), _as(h0, math), state0,
        None if p is None else _as(p, math), None if dt is None else _as(dt, math), eps, save,
        None if packing is None else packing.batch_sizes, products)
    per_step = None
    if traces:
        saved = saved if packing is None else packing.unpack(saved)  # (T, B, K*H), zero past the ends
        steps, batch = saved.shape[:2]
        per_step = dict(zip(cell.saved, saved.view(steps, batch, cell.num_saved, hidden).unbind(2)))
    out = _as(h_all, x.dtype)
    h_n = out[-1] if packing is None else out.index_select(0, packing.last)
    finals = [s if name in cell.math_states else _as(s, x.dtype) for name, s in zip(cell.states, state_n.unbind(0))]
    return out, (h_n, *finals), per_step


def run_reference(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing, w_hr=None):
    """One layer through the cell's step loop (``Cell.reference_layer``) in the math dtype, as the
    other paths compute: every argument cast to it (a bf16 layer's float32 age, a float64 dt with
    float32 inputs); h and the states not in ``math_states`` come back in x's dtype. Packed data
    runs as a padded batch in the loop masked by the rows' lengths. While torch.export traces, a
    full-length call without traces runs the loop as one scan operator (``export_scan``)."""
    dtype, math = x.dtype, math_dtype(x.dtype)
    x, h0, w_ih, w_hh, bias, p, dt, w_hr, *states = (None if t is None else t.to(math)
                                                      for t in (x, h0, w_ih, w_hh, bias, p, dt, w_hr, *states))
    if torch.compiler.is_exporting() and packing is None and not traces and w_hr is None:  # one scan operator
        out, finals = export_scan.layer(cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps)
        per_step = None
    else:
        lengths = None
        if packing is not None:
            x, dt, lengths = packing.unpack(x), None if dt is None else packing.unpack(dt), packing.lengths
        out, finals, per_step = cell.reference_layer(x, h0, states, w_ih, w_hh, bias, p, dt, eps, lengths, w_hr)
    finals = [s if name in cell.math_states else s.to(dtype) for name, s in zip(("h", *cell.states), finals)]
    return (out if packing is None else packing.pack(out)).to(dtype), tuple(finals), per_step
