"""How each kind of path runs one recurrent layer; each function is the ``run`` of the path records
(``tsrnn.backend.registry``) of its kind, called as ``run(path, cell, x, h0, states, w_ih, w_hh,
bias, p, dt, eps, traces, packing, w_hr)`` with ``path`` the record, h0 and each of ``states``
(1, B, ·): the layer's row of a module's stacked states, as the final states come back (so a
one-layer module hands them on as they are); ``bias`` None, one vector or a ``Biases`` pair;
``w_hr`` the LSTM's projection W_hr (P, H) of a layer with torch.nn.LSTM's proj_size, or None
(``Path.why_not`` offers a projected layer to the torch-LSTM paths and the reference only):

- ``run_operator`` (cpu, cuda_cluster, cuda_grid, triton_step) reads the
  precision of the call's products once (the record's ``products``, ``tsrnn.precision.products``:
  "tf32" on CUDA where torch.backends.cudnn.allow_tf32 is true, "bf16" for bf16 layers, else
  "ieee"), computes the input projection of all steps as one GEMM in it (the record's
  ``projection``: the CPU engine's own on "cpu", ``tsrnn.ops.projection.tensor_core_projection``'s
  on CUDA), runs the recurrence in one operator call of the record's namespace
  (``tsrnn.ops.recurrence.op``) with it, and turns the projection's gradient into one GEMM for
  W_ih, one for x and a sum for the bias (on "cpu", the bias's from the same pass over the
  gradient as W_ih's);
- ``run_torch_lstm`` (onednn, cudnn) calls ``torch._VF.lstm`` with a ``Biases`` pair as its b_ih
  and b_hh (one vector as b_ih and b_hh = 0), under the user's torch.backends settings, as
  torch.nn.LSTM runs (on CUDA, cuDNN uses
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
from tsrnn.ops.recurrence import export_scan, reference
from tsrnn.ops.recurrence.cells import math_dtype


def run_torch_lstm(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing, w_hr=None):
    """(S1) through torch's LSTM kernel, on packed data through its PackedSequence entry; returns
    (out, (h_n, c_n), None). The kernel adds two bias vectors: a layer's pair (``Biases``: a
    module's own b_ih and b_hh, or its effective bias and a zero vector, views of the layer's flat
    cuDNN buffer where ``tsrnn.LSTM.flatten_parameters`` made one) goes to it as they are, so the
    kernel reads the module's tensors as torch.nn.LSTM's and nothing is copied per call; a single
    bias goes as b_ih with b_hh = 0 (one zero vector per device, dtype and size, shared by every
    call). On CUDA in the layer's dtype, as torch.nn.LSTM runs cuDNN (a bf16 layer in bf16); on the
    CPU (oneDNN) in the math dtype, as the other CPU paths (a bf16 layer in float32, its weights
    cast per call, where torch.nn.LSTM would run bf16)."""
    dtype = x.dtype if x.is_cuda else math_dtype(x.dtype)
    (c0,) = states
    if bias is None:
        weights = [w_ih, w_hh]
    elif type(bias) is Biases:
        weights = [w_ih, w_hh, *bias]
    else:
        weights = [w_ih, w_hh, bias, zeros(bias, dtype)]
    if w_hr is not None:
        weights.append(w_hr)  # torch's kernel tells a projected layer by its fifth (third) weight
    train = torch.is_grad_enabled() or torch.jit.is_tracing()  # a traced graph serves training and inference
    # cuDNN takes contiguous states and weights only (refused or failing a view on CUDA, not on the CPU)
    weights = [w if w.dtype == dtype and w.is_contiguous() else w.to(dtype).contiguous() for w in weights]
    hx = [s if s.dtype == dtype and s.is_contiguous() else s.to(dtype).contiguous() for s in (h0, c0)]
    data = (_as(x, dtype),) if packing is None else (_as(x, dtype), packing.batch_sizes)
    args = (*data, hx, weights, bias is not None, 1, 0.0, train, False) + ((False,) if packing is None else ())
    if not x.is_cuda or one_buffer(*weights):
        out, h_n, c_n = torch._VF.lstm(*args)  # a flat layer: cuDNN warns if it still has to copy
    else:
        with warnings.catch_warnings():  # separate tensors (the caller's, weight drop's, a bf16 layer's): copied
            warnings.filterwarnings("ignore", message=".*not part of single contiguous chunk.*")
            out, h_n, c_n = torch._VF.lstm(*args)
    if dtype != x.dtype:
        out, h_n, c_n = out.to(x.dtype), h_n.to(x.dtype), c_n.to(x.dtype)
    return out, (h_n, c_n), None


class Biases(tuple):
    """A layer's bias as the two vectors torch's LSTM kernel adds, (b_ih, b_hh) of a plain layer or
    (effective bias, zero vector) of a multi-timescale one: ``run_torch_lstm`` hands both to the
    kernel as they are (a module's own tensors, so none is copied), the other runners add them
    (``one_bias``). A zero vector made by ``zeros`` or marked by ``mark_zero`` is not added."""

    __slots__ = ()


ZERO = "_tsrnn_zero"  # the attribute of a zero vector that is never written (``zeros``, ``mark_zero``)


def mark_zero(t: torch.Tensor) -> torch.Tensor:
    """Mark ``t``, a zero vector that nothing writes, so ``one_bias`` does not add it."""
    setattr(t, ZERO, True)
    return t


def one_bias(bias):
    """A layer's bias as one vector: ``bias`` itself (a tensor or None), or a ``Biases`` pair's sum
    (its first vector where the second is a marked zero vector; the modules form pairs in eager
    calls only, so no traced zero vector is ever skipped)."""
    if type(bias) is not Biases:
        return bias
    first, second = bias
    return first if getattr(second, ZERO, False) else first + second


_ZEROS: dict[tuple, torch.Tensor] = {}  # (size, dtype, device) -> the torch-LSTM paths' b_hh (never written)


def zeros(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A zero vector of ``like``'s size on its device in ``dtype``, made once and marked
    (``mark_zero``; read-only: cuDNN and oneDNN read their biases, and a traced graph records a
    fresh one); a normal tensor even when first asked for under torch.inference_mode, so that
    later calls with autograd can save it. Not made while a CUDA graph is being captured (its
    memory would be the graph's): capture after one eager step, as ``tsrnn.backend`` asks."""
    size, device = like.shape[0], like.device
    if check.tracing():
        return torch.zeros(size, dtype=dtype, device=device)
    key = (size, dtype, device)
    found = _ZEROS.get(key)
    if found is None:
        if check.capturing_on(like):
            raise RuntimeError("tsrnn: a zero bias vector for this layer is first needed while a CUDA graph is "
                               "being captured; run one eager step of the same layer before capturing")
        with torch.inference_mode(False), torch.no_grad():
            found = _ZEROS[key] = mark_zero(torch.zeros(size, dtype=dtype, device=device))
    return found


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
    bias = one_bias(bias)
    products = path.products(x.dtype, x.device)  # read once per call: the projection's and the operator's
    flat = x.reshape(-1, x.shape[-1])  # the input projection in the layer's dtype (a low-precision GEMM for bf16/fp16)
    # the CPU engine's projection serves CPU tensors, whose products are always "ieee": it takes no precision
    exact_bias = bias is not None and bias.dtype != x.dtype
    xg = path.projection(flat, w_ih, None if exact_bias else bias, *(() if products == "ieee" else (products,)))
    xg = _as(xg, math) + _as(bias, math) if exact_bias else _as(xg, math)
    xg = xg.view(*x.shape[:-1], cell.num_gates * hidden)
    state0 = _as(states[0], math) if len(states) == 1 else torch.cat([_as(s, math) for s in states])
    save = traces or torch.jit.is_tracing() or (  # a traced graph serves training and inference
        library.needs_grad(x, w_ih, w_hh, bias, h0, p, *states))
    h_all, state_n, state_all, saved = library.call(
        path.namespace, "recurrence_forward", cell.name, xg, _as(w_hh, math), _as(h0[0], math), state0,
        None if p is None else _as(p, math).unsqueeze(0), None if dt is None else _as(dt, math),
        [eps] if cell.constants else [], save, None if packing is None else packing.batch_sizes, products)
    per_step = None
    if traces:
        saved = saved if packing is None else packing.unpack(saved)  # (T, B, K*H), zero past the ends
        steps, batch = saved.shape[:2]
        per_step = dict(zip(cell.saved, saved.view(steps, batch, cell.num_saved, hidden).unbind(2)))
        per_step.update(zip(cell.states, state_all.unbind(1)))  # every step's states, zero past the ends
    out = _as(h_all, x.dtype)
    h_n = out[-1:] if packing is None else out.index_select(0, packing.last).unsqueeze(0)
    finals = (state_n,) if len(states) == 1 else state_n.split(1)
    finals = [s if name in cell.math_states else _as(s, x.dtype) for name, s in zip(cell.states, finals)]
    return out, (h_n, *finals), per_step


def run_reference(path, cell, x, h0, states, w_ih, w_hh, bias, p, dt, eps, traces, packing, w_hr=None):
    """One layer through the cell's step loop (``Cell.reference_layer``) in the math dtype, as the
    other paths compute: every argument cast to it (a bf16 layer's float32 age, a float64 dt with
    float32 inputs); h and the states not in ``math_states`` come back in x's dtype. Packed data
    runs as a padded batch in the loop masked by the rows' lengths. While torch.export traces, a
    full-length call without traces runs the loop as one scan operator (``export_scan``)."""
    dtype, math = x.dtype, math_dtype(x.dtype)
    x, h0, w_ih, w_hh, bias, p, dt, w_hr, *states = (None if t is None else t.to(math) for t in (
        x, h0[0], w_ih, w_hh, one_bias(bias), p, dt, w_hr, *(s[0] for s in states)))
    if torch.compiler.is_exporting() and packing is None and not traces and w_hr is None:  # one scan operator
        out, finals = export_scan.layer(cell, x, h0, states, w_ih, w_hh, bias, () if p is None else (p,), dt,
                                        (eps,) if cell.constants else ())
        per_step = None
    else:
        lengths = None
        if packing is not None:
            x, dt, lengths = packing.unpack(x), None if dt is None else packing.unpack(dt), packing.lengths
        out, finals, per_step = reference.layer(cell, x, h0, states, w_ih, w_hh, bias, () if p is None else (p,), dt,
                                                cell.defaults if not cell.constants else (eps,), lengths, w_hr)
    finals = [(s if name in cell.math_states else s.to(dtype)).unsqueeze(0)
              for name, s in zip(("h", *cell.states), finals)]
    return (out if packing is None else packing.pack(out)).to(dtype), tuple(finals), per_step
