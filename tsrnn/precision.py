"""Mixed precision, as for torch.nn.LSTM (docs/backends.md, "Mixed precision"): inside an
autocast region of the input's device type a layer's float32 input, states and parameters are
cast to the autocast dtype on entry (float64 ones are left alone) and the layer runs with autocast
off, as a layer of that dtype (``tsrnn.ops.recurrence.cells.math_dtype``: float32 gate math and
cell state, outputs in the 16-bit dtype). ``products`` is the precision of a layer's products
(read once per call, never set: tsrnn changes no torch flag); ``round_operands`` the rounding its
torch GEMMs apply to compute in it.
"""
from __future__ import annotations

import contextlib
import weakref

import torch

from tsrnn import _validation

LOW_PRECISION = (torch.float16, torch.bfloat16)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast casts float32 to on ``device``'s type, or None outside autocast."""
    if device.type not in ("cpu", "cuda") or not torch.is_autocast_enabled(device.type):
        return None
    return torch.get_autocast_dtype(device.type)


def autocast_of(like) -> torch.dtype | None:
    """``autocast_dtype`` of the device of ``like``, or None if ``like`` is no tensor; outside every
    autocast region one test (a module's forward asks it once per call)."""
    if not torch._C._is_any_autocast_enabled() or not isinstance(like, torch.Tensor):
        return None
    return autocast_dtype(like.device)


def cast(dtype: torch.dtype | None, *tensors):
    """The tensors with float32 ones cast to ``dtype`` (None: unchanged), as autocast casts."""
    if dtype is None:
        return tensors
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t for t in tensors)


@contextlib.contextmanager
def layer_region(like):
    """Yields the autocast dtype of the device of ``like`` (None outside autocast, or if ``like``
    is no tensor: the checks that follow say so) and runs the block with autocast off for that
    device type, so a layer's own ops run in the dtypes it chose."""
    dtype = autocast_of(like)
    if dtype is None:
        yield None
        return
    with torch.autocast(like.device.type, enabled=False):
        yield dtype


def products(dtype: torch.dtype, device: torch.device) -> str:
    """The precision of the recurrent products (W_hh h_{t-1} and its transpose in the backward) and
    of the weight-gradient GEMM for a layer of ``dtype`` on ``device``, as torch.nn.LSTM's cuDNN call
    computes them: on CUDA, "bf16" (bfloat16 operands, float32 accumulation) for a bfloat16 layer,
    else "tf32" (operands rounded to TF32) where ``torch.backends.cudnn.allow_tf32`` is true (torch's
    default), else "ieee" (exact); "ieee" on every other device. Read once per layer call and passed
    down to its kernels, which never change torch's flags; gate math, the cell state, the pLSTM's
    age and the state gradients are float32 in every case."""
    if device.type != "cuda":
        return "ieee"
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype in (torch.float32, torch.float16) and torch.backends.cudnn.allow_tf32:
        return "tf32"
    return "ieee"


PRODUCTS = ("ieee", "tf32", "bf16")


def round_operands(t: torch.Tensor, products: str) -> torch.Tensor:
    """``t`` with its values rounded as an operand of a product in ``products`` (``products()``),
    in its own dtype: "tf32", a float32 tensor's values to TF32 as cvt.rna.tf32.f32 rounds (10
    mantissa bits kept, to nearest, ties away from zero; Inf and NaN kept; other dtypes as they
    are: bf16 and fp16 values are TF32 values already, float64 is never asked for TF32);
    "bf16", to bfloat16 (to nearest, ties to even) and back; "ieee", ``t`` itself. A float32 GEMM
    of rounded operands then gives the TF32 (or bf16) GEMM's result whatever torch's matmul flags
    say (csrc/recurrence/op.h's ``round_to_tf32`` is the same rounding)."""
    if products == "tf32":
        if t.dtype != torch.float32:
            return t
        bits = t.view(torch.int32)
        rounded = torch.bitwise_and(bits + 0x1000, -0x2000).view(torch.float32)  # -0x2000: 0xffffe000
        return torch.where(torch.isfinite(t), rounded, t)
    if products == "bf16":
        return t if t.dtype == torch.bfloat16 else t.to(torch.bfloat16).to(t.dtype)
    if products == "ieee":
        return t
    raise ValueError(f"products must be one of {PRODUCTS}, got {products!r}")


# rounded_weight's copies: id(weight) -> (a weak reference to it, its version and storage, how it
# was rounded (the precision and the rounding function), its rounded copy); an entry goes when its weight does.
_rounded: dict[int, tuple[weakref.ref, tuple, tuple, torch.Tensor]] = {}


def rounded_weight(w: torch.Tensor, products: str, rounding=None) -> torch.Tensor:
    """``round_operands(w, products)`` of a weight (or ``rounding(w)``, another function of the same
    rounding: a kernel that does it in one pass, or into another dtype), rounded once per version:
    the copy is kept (one a weight) and returned again while ``w`` is the same tensor with the same
    storage and version counter (an optimizer step, ``w.data = ...`` or any in-place write makes a
    new one) and the same rounding is asked for, so the forward and backward of a step, and the
    steps of an evaluation, round it once; a backward drops the copy when it is done with it
    (``drop_rounded``): the ``p.data.add_(...)`` training loops write weights after the backward
    with no new version, so the next step's forward rounds again (a write through ``.data`` with no
    backward before it is not seen: write in place under torch.no_grad(), as optimizers do). Not
    kept while torch.compile traces (fake tensors), for a weight that autograd records (the
    rounding is then part of the graph), while a CUDA graph is captured (the graph rounds it at
    every replay) nor, for CUDA weights, once one was (``_note_capture``)."""
    round_it = (lambda t: round_operands(t, products)) if rounding is None else rounding
    if products == "ieee" or torch.compiler.is_compiling() or (w.requires_grad and torch.is_grad_enabled()):
        return round_it(w)
    if _validation.capturing_on(w) or (_captured and w.is_cuda):
        _note_capture()
        return round_it(w)
    key, state = id(w), (w.untyped_storage().data_ptr(), w.storage_offset(), tuple(w.shape), tuple(w.stride()),
                         w._version)
    how = (products, rounding)
    found = _rounded.get(key)
    if found is not None and found[0]() is w and found[1] == state and found[2] == how:
        return found[3]
    rounded = round_it(w.detach())
    _rounded[key] = (weakref.ref(w, lambda _, key=key: _rounded.pop(key, None)), state, how, rounded)
    return rounded


def drop_rounded(w: torch.Tensor) -> None:
    """Forget ``rounded_weight``'s copy of ``w`` (a backward's last use of it in a step)."""
    _rounded.pop(id(w), None)


def _note_capture() -> None:
    """From now on no rounded CUDA weight is kept (``rounded_weight``): a CUDA graph's replays write
    weights (an optimizer step in the graph) without a new version, so a kept copy could be stale."""
    global _captured
    _captured = True


_captured = False  # a CUDA graph captured a rounding (``_note_capture``)


def straight_through(t: torch.Tensor, products: str) -> torch.Tensor:
    """``t`` rounded for ``products`` (``round_operands``), its derivative that of the identity (the
    rounding's error is a constant): what a backward that is itself differentiated multiplies by."""
    if products == "ieee":
        return t
    return t + (round_operands(t, products) - t).detach()  # exact: t and its rounding are close
