"""An MTS layer's effective bias b = [fixed; (b_ih + b_hh)[n:]] (n = len(fixed)): the formula, its
memo'd autograd Function (``EffectiveBias``, built once per state of the biases) and the dtype the
fixed rows keep. ``tsrnn.LSTM`` (``tsrnn.modules.lstm``) is its one user."""
from __future__ import annotations

import weakref

import torch

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.ops.recurrence import paths


def full_precision(dtype: torch.dtype) -> torch.dtype:
    """The dtype of fixed biases in a module of ``dtype``: float32 for a 16-bit one, else ``dtype``."""
    return torch.float32 if dtype in precision.LOW_PRECISION else dtype


def effective_bias(fixed: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
    """b = [fixed; (b_ih + b_hh)[n:]] (n = len(fixed)) in the dtype of ``fixed`` (float32 in a bf16
    layer: the learned rows are summed in it too)."""
    n = fixed.shape[0]
    return torch.cat([fixed, b_ih[n:].to(fixed.dtype) + b_hh[n:].to(fixed.dtype)])


def _write(out: torch.Tensor, fixed: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor, with_fixed: bool) -> None:
    """``effective_bias`` written into ``out`` (its fixed rows only ``with_fixed``), the learned rows
    summed in ``out``'s dtype."""
    n = fixed.shape[0]
    if with_fixed:
        out[:n].copy_(fixed)
    if n == out.shape[0]:
        return
    if b_ih.dtype == b_hh.dtype == out.dtype:
        torch.add(b_ih[n:], b_hh[n:], out=out[n:])
    else:
        out[n:].copy_(b_ih[n:].to(out.dtype) + b_hh[n:].to(out.dtype))


def equal_rows(loaded: torch.Tensor, fixed: torch.Tensor) -> bool:
    """Whether the first len(fixed) rows of ``loaded`` hold ``fixed`` as ``loaded``'s dtype rounds it
    (a state dict that ``tsrnn.LSTM`` or its ``to_torch`` wrote)."""
    expected = fixed.detach().to(device=loaded.device, dtype=loaded.dtype).double()
    got = loaded.detach()[:fixed.shape[0]].double()
    return bool(torch.allclose(got, expected, rtol=4 * torch.finfo(loaded.dtype).eps, atol=0.0))


class EffectiveBias(torch.autograd.Function):
    """``apply(b_ih, b_hh, fixed, memo)``: the effective bias, kept in ``memo`` so a warm call builds
    none (on CUDA: launches no kernel). It is built again when b_ih, b_hh or fixed are other
    tensors than last time (held by weak reference), when their version or memory changed (an
    optimizer step, a load, a move), after a backward through it (``p.data.add_(...)`` loops bump
    no version) and after a write into the tensor it handed out. A rebuild writes the same tensor
    (the layer's flat cuDNN buffer's slot, ``memo["slot"]``, where it has one): as a new version
    where the biases' versions moved (a graph still waiting for its backward then fails, as
    torch.nn.LSTM's after an optimizer step), else through ``.data``. A ``.data`` write with no
    backward after it is not seen (write under torch.no_grad(), as optimizers do). Backward: the incoming gradient, zero in the fixed rows, to
    b_ih and to b_hh (cast to their dtypes)."""

    @staticmethod
    def forward(ctx, b_ih, b_hh, fixed, memo):
        refs = memo.get("refs")
        same = refs is not None and refs[0]() is b_ih and refs[1]() is b_hh and refs[2]() is fixed
        key = (b_ih._version, b_hh._version, fixed._version, b_ih.data_ptr(), b_hh.data_ptr(), fixed.data_ptr())
        value = memo.get("value")
        if check.capturing_on(b_ih):
            value = EffectiveBias.captured(memo, b_ih, b_hh, fixed, same)
        elif not same or memo["stale"] or key != memo["key"] or value._version != memo["written"]:
            value = EffectiveBias.build(memo, b_ih, b_hh, fixed, same, key)
        ctx.memo, ctx.dtypes = memo, (b_ih.dtype, b_hh.dtype)
        return value.view_as(value)  # a new tensor object each call, the same memory

    @staticmethod
    def build(memo: dict, b_ih, b_hh, fixed, same: bool, key: tuple) -> torch.Tensor:
        """Build the effective bias into ``memo`` (``forward``'s rules) and return it."""
        if torch.is_inference_mode_enabled():  # the memo's tensors are normal ones, usable with autograd
            with torch.inference_mode(False):
                return EffectiveBias.build(memo, b_ih, b_hh, fixed, same, key)
        first = memo.get("refs") is None
        target = EffectiveBias.target(memo, b_ih, fixed) if same or first else None
        grad_mode = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)  # torch.no_grad()'s effect without the cost of its object
        try:
            if target is None:
                value = effective_bias(fixed, b_ih, b_hh)
            else:
                moved = first or key != memo["key"]  # a new version: written as one (else through .data)
                # the fixed rows too where they changed, or where the last build went to another tensor
                with_fixed = first or target is not memo.get("value") or key[2::3] != memo["key"][2::3]
                _write(target if moved else target.data, fixed, b_ih, b_hh, with_fixed)
                value = target
            zeros = memo.get("zeros")
            if "slot" not in memo and (zeros is None or (zeros.dtype, zeros.device, zeros.shape) != (
                    value.dtype, value.device, value.shape)):  # a flat layer keeps its buffer's zero slot
                memo["zeros"] = paths.zeros(value, value.dtype)
            if target is None or first:
                memo["fixed_rows"] = torch.arange(value.shape[0], device=value.device) < fixed.shape[0]
        finally:
            torch._C._set_grad_enabled(grad_mode)
        memo.update(value=value, key=key, written=value._version, stale=bool(memo.get("captured")),
                    refs=(weakref.ref(b_ih), weakref.ref(b_hh), weakref.ref(fixed)))
        return value

    @staticmethod
    def target(memo: dict, b_ih, fixed) -> torch.Tensor | None:
        """The tensor the memo builds its effective bias into: the flat buffer's slot where it has
        one, else the bias it built last, if it fits (dtype, device, rows); else None."""
        target = memo.get("slot")
        target = target if target is not None else memo.get("value")
        if target is None or (target.dtype, target.device, target.shape[0]) != (fixed.dtype, fixed.device,
                                                                                 b_ih.shape[0]):
            return None
        return target

    @staticmethod
    def captured(memo: dict, b_ih, b_hh, fixed, same: bool) -> torch.Tensor:
        """The effective bias while a CUDA graph is captured: built by ops the graph records, into
        the memo's tensor where it holds one for the same tensors, else into a tensor of the graph's
        own. Replays write it unseen, so every eager call rebuilds the memo from then on. Raises
        RuntimeError where the layer was never run eagerly."""
        if memo.get("refs") is None:  # never built (a flat layer's memo holds its slots from the start)
            raise RuntimeError("tsrnn.LSTM: a multi-timescale layer's first call is being captured into a CUDA "
                               "graph; run one eager step of the module before capturing")
        memo["captured"] = memo["stale"] = True
        target = EffectiveBias.target(memo, b_ih, fixed) if same else None
        with torch.no_grad():
            if target is None:
                return effective_bias(fixed, b_ih, b_hh)
            _write(target.data, fixed, b_ih, b_hh, True)
        return target

    @staticmethod
    def forget(memo: dict) -> None:
        """Empty ``memo`` of what it was built from (its slots stay)."""
        for name in ("refs", "value", "key", "written", "stale"):
            memo.pop(name, None)

    @staticmethod
    def backward(ctx, grad):
        memo = ctx.memo
        memo["stale"] = True
        grad = grad.masked_fill(memo["fixed_rows"], 0)
        return tuple(grad if grad.dtype == dtype else grad.to(dtype) for dtype in ctx.dtypes) + (None, None)
