"""How each kind of path runs one recurrent layer. Each function is the ``run`` of the path
records of its kind (``tsrnn.backend.registry``), called as ``run(path, layer, inputs, traces)``:
``path`` the record, ``layer`` a ``Layer`` and ``inputs`` an ``Inputs``
(tsrnn/ops/recurrence/layer.py), ``traces`` whether to return the per-step traces. Each returns
(out, (h_n, *states_n), traces or None), h_n and the states (1, B, ·) as the inputs' rows.

- ``run_operator`` (cpu, cuda_cluster, cuda_grid, triton_step): the input projection of all steps
  as one GEMM in the precision of the call's products (the record's ``products``, read once per
  call), the recurrence in one operator call of the record's namespace (tsrnn/ops/recurrence/op.py),
  the projection's gradient as one GEMM for W_ih, one for x and a sum for the bias;
- ``run_torch_lstm`` (onednn, cudnn): ``torch._VF.lstm`` under the user's torch.backends
  settings, as torch.nn.LSTM runs it; no flag is changed;
- ``run_reference``: the cell's step loop (``reference.layer``) in the math dtype.

Gate math runs in ``cells.math_dtype`` (float32 for bf16/fp16 inputs, float64 for float64): h and
the states come back in the input's dtype, those of ``Cell.math_states`` in the math dtype.
A layer with ``w_hr`` (torch.nn.LSTM's proj_size) runs on the torch-LSTM paths and the reference
only (``Path.why_not``).
"""
from __future__ import annotations

import warnings

import torch

from tsrnn import _validation as check
from tsrnn.ops import library
from tsrnn.ops.recurrence import export_scan, reference
from tsrnn.ops.recurrence.cells import math_dtype


def run_torch_lstm(path, layer, inputs, traces):
    """(S1) through torch's LSTM kernel, on packed data through its PackedSequence entry; returns
    (out, (h_n, c_n), None). The kernel adds two bias vectors: the layer's ``torch_bias`` as it is
    (nothing copied per call), else its one bias as b_ih with b_hh = 0 (one zero vector per device,
    dtype and size, ``zeros``). On CUDA in the layer's dtype, as torch.nn.LSTM runs cuDNN; on the
    CPU (oneDNN) in the math dtype, as the other CPU paths (a bf16 layer in float32)."""
    x, packing = inputs.x, inputs.packing
    dtype = x.dtype if x.is_cuda else math_dtype(x.dtype)
    (c0,) = inputs.states
    weights = [layer.w_ih, layer.w_hh]
    if layer.torch_bias is not None:
        weights += layer.torch_bias
    elif layer.bias is not None:
        weights += [layer.bias, zeros(layer.bias, dtype)]
    if layer.w_hr is not None:
        weights.append(layer.w_hr)  # torch's kernel tells a projected layer by its fifth (third) weight
    train = torch.is_grad_enabled() or torch.jit.is_tracing()  # a traced graph serves training and inference
    # cuDNN takes contiguous states and weights only (refused or failing a view on CUDA, not on the CPU)
    weights = [w if w.dtype == dtype and w.is_contiguous() else w.to(dtype).contiguous() for w in weights]
    hx = [s if s.dtype == dtype and s.is_contiguous() else s.to(dtype).contiguous() for s in (inputs.h0, c0)]
    data = (_as(x, dtype),) if packing is None else (_as(x, dtype), packing.batch_sizes)
    args = (*data, hx, weights, layer.has_bias, 1, 0.0, train, False) + ((False,) if packing is None else ())
    if not x.is_cuda or one_buffer(*weights):
        out, h_n, c_n = torch._VF.lstm(*args)  # a flat layer: cuDNN warns if it still has to copy
    else:
        with warnings.catch_warnings():  # separate tensors (the caller's, weight drop's, a bf16 layer's): copied
            warnings.filterwarnings("ignore", message=".*not part of single contiguous chunk.*")
            out, h_n, c_n = torch._VF.lstm(*args)
    if dtype != x.dtype:
        out, h_n, c_n = out.to(x.dtype), h_n.to(x.dtype), c_n.to(x.dtype)
    return out, (h_n, c_n), None


_ZEROS: dict[tuple, torch.Tensor] = {}  # (size, dtype, device) -> the torch-LSTM paths' b_hh (never written)


def zeros(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A zero vector of ``like``'s size on its device in ``dtype``, made once (read-only: cuDNN and
    oneDNN read their biases, and a traced graph records a fresh one); a normal tensor even when first asked for under torch.inference_mode, so that
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
            found = _ZEROS[key] = torch.zeros(size, dtype=dtype, device=device)
    return found


def one_buffer(*tensors: torch.Tensor) -> bool:
    """Whether ``tensors`` are views of one buffer that starts with the first (a layer that
    ``tsrnn.LSTM.flatten_parameters`` laid out)."""
    return tensors[0].storage_offset() == 0 and len({t.untyped_storage().data_ptr() for t in tensors}) == 1



def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, without a call into torch where it already is (the warm path's casts)."""
    return t if t.dtype == dtype else t.to(dtype)


def run_operator(path, layer, inputs, traces):
    """One layer through the recurrence operator of ``path``'s namespace; the traces are the saved
    activations and every step's states, (T, B, H) each, zero past each row's end. A bias of
    another dtype than x (a bf16 multi-timescale layer's float32 effective bias) is added in the
    math dtype after the projection's GEMM."""
    cell, x, packing = layer.cell, inputs.x, inputs.packing
    math = math_dtype(x.dtype)
    hidden = layer.w_hh.shape[1]
    bias = layer.added_bias()
    products = path.products(x.dtype, x.device)  # read once per call: the projection's and the operator's
    flat = x.reshape(-1, x.shape[-1])  # the input projection in the layer's dtype (a low-precision GEMM for bf16/fp16)
    # the CPU engine's projection serves CPU tensors, whose products are always "ieee": it takes no precision
    exact_bias = bias is not None and bias.dtype != x.dtype
    xg = path.projection(flat, layer.w_ih, None if exact_bias else bias, *(() if products == "ieee" else (products,)))
    xg = _as(xg, math) + _as(bias, math) if exact_bias else _as(xg, math)
    xg = xg.view(*x.shape[:-1], cell.num_gates * hidden)
    states = inputs.states
    state0 = _as(states[0], math) if len(states) == 1 else torch.cat([_as(s, math) for s in states])
    params = layer.params
    save = traces or torch.jit.is_tracing() or (  # a traced graph serves training and inference
        library.needs_grad(x, layer.w_ih, layer.w_hh, bias, inputs.h0, *params, *states))
    h_all, state_n, state_all, saved = library.call(
        path.namespace, "recurrence_forward", cell.name, xg, _as(layer.w_hh, math), _as(inputs.h0[0], math), state0,
        (_as(params[0], math).unsqueeze(0) if len(params) == 1 else torch.stack([_as(q, math) for q in params]))
        if params else None, None if inputs.steps is None else _as(inputs.steps, math), layer.constants, save,
        None if packing is None else packing.batch_sizes, products)
    per_step = None
    if traces:
        saved = saved if packing is None else packing.unpack(saved)  # (T, B, K*H), zero past the ends
        steps, batch = saved.shape[:2]
        per_step = dict(zip(cell.saved, saved.view(steps, batch, cell.num_saved, hidden).unbind(2)))
        per_step.update(zip(cell.states, state_all.unbind(1)))
    out = _as(h_all, x.dtype)
    h_n = out[-1:] if packing is None else out.index_select(0, packing.last).unsqueeze(0)
    finals = (state_n,) if len(states) == 1 else state_n.split(1)
    finals = [s if name in cell.math_states else _as(s, x.dtype) for name, s in zip(cell.states, finals)]
    return out, (h_n, *finals), per_step


def run_reference(path, layer, inputs, traces):
    """One layer through the cell's step loop (``reference.layer``) in the math dtype, as the other
    paths compute: every tensor cast to it; h and the states not in ``math_states`` come back in
    x's dtype. Packed data runs as a padded batch masked by the rows' lengths. While torch.export
    traces, a full-length call without traces runs the loop as one scan operator (``export_scan``)."""
    cell, packing, dtype = layer.cell, inputs.packing, inputs.x.dtype
    math = math_dtype(dtype)
    x, h0, w_ih, w_hh, bias, steps, w_hr, *rest = (None if t is None else t.to(math) for t in (
        inputs.x, inputs.h0[0], layer.w_ih, layer.w_hh, layer.added_bias(), inputs.steps, layer.w_hr,
        *(s[0] for s in inputs.states), *layer.params))
    states, params = rest[:len(inputs.states)], tuple(rest[len(inputs.states):])
    if torch.compiler.is_exporting() and packing is None and not traces and w_hr is None:  # one scan operator
        out, finals = export_scan.layer(cell, x, h0, states, w_ih, w_hh, bias, params, steps, layer.constants)
        per_step = None
    else:
        lengths = None
        if packing is not None:
            x, steps, lengths = packing.unpack(x), None if steps is None else packing.unpack(steps), packing.lengths
        out, finals, per_step = reference.layer(cell, x, h0, states, w_ih, w_hh, bias, params, steps, layer.constants,
                                                lengths, w_hr)
    finals = [(s if name in cell.math_states else s.to(dtype)).unsqueeze(0)
              for name, s in zip(("h", *cell.states), finals)]
    return (out if packing is None else packing.pack(out)).to(dtype), tuple(finals), per_step
