"""Mixed precision, as for torch.nn.LSTM (docs/backends.md, "Mixed precision"): under autocast a
layer's float32 tensors are cast to the autocast dtype on entry and the layer runs with autocast
off, as a layer of that dtype (``tsrnn.ops.recurrence.cells.math_dtype``). ``products``: the
precision of a layer's products (read, never set); ``round_operands``: the rounding giving it.
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
    """``autocast_dtype`` of the device of ``like``, or None if ``like`` is no tensor."""
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
    """Yields ``autocast_of(like)`` and runs the block with autocast off for that device type."""
    dtype = autocast_of(like)
    if dtype is None:
        yield None
        return
    with torch.autocast(like.device.type, enabled=False):
        yield dtype


def products(dtype: torch.dtype, device: torch.device) -> str:
    """The precision of the recurrent products (W_hh h_{t-1}, its transpose, the weight gradient) of
    a layer of ``dtype`` on ``device``, as torch.nn.LSTM's cuDNN call computes them: on CUDA,
    "bf16" (bfloat16 operands, float32 sums) for bfloat16, else "tf32" where
    ``torch.backends.cudnn.allow_tf32``, else "ieee" (exact); "ieee" on other devices. Gate math,
    cell state, the pLSTM's age and the state gradients are float32 in every case."""
    if device.type != "cuda":
        return "ieee"
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype in (torch.float32, torch.float16) and torch.backends.cudnn.allow_tf32:
        return "tf32"
    return "ieee"


PRODUCTS = ("ieee", "tf32", "bf16")


def round_operands(t: torch.Tensor, products: str) -> torch.Tensor:
    """``t`` rounded as an operand of a product in ``products``, in its own dtype: "tf32", float32
    values to TF32 as cvt.rna.tf32.f32 (to nearest, ties away; Inf, NaN and other dtypes kept, as
    csrc/recurrence/op.h's ``round_to_tf32``); "bf16", to bfloat16 (ties to even) and back;
    "ieee", ``t``. A float32 GEMM of rounded operands gives the TF32 (bf16) GEMM's result."""
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


# rounded_weight's copies: id(weight) -> (weak ref, storage and version, (products, rounding), copy).
_rounded: dict[int, tuple[weakref.ref, tuple, tuple, torch.Tensor]] = {}


def rounded_weight(w: torch.Tensor, products: str, rounding=None) -> torch.Tensor:
    """``round_operands(w, products)`` (or ``rounding(w)``, the same rounding done otherwise) of a
    weight, rounded once per version: the copy is returned again while ``w`` keeps its storage and
    version counter and the same rounding is asked for; a backward drops it (``drop_rounded``). A
    write through ``.data`` with no backward before it is not seen: write under torch.no_grad().
    Not kept under torch.compile, for a weight autograd records, or for CUDA weights once a CUDA
    graph captured a rounding (docs/backends.md, "CUDA graphs")."""
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
    """From now on no rounded CUDA weight is kept: a CUDA graph's replays write weights unversioned."""
    global _captured
    _captured = True


_captured = False  # a CUDA graph captured a rounding (``_note_capture``)


def straight_through(t: torch.Tensor, products: str) -> torch.Tensor:
    """``t`` rounded for ``products`` (``round_operands``), with the identity's derivative."""
    if products == "ieee":
        return t
    return t + (round_operands(t, products) - t).detach()  # exact: t and its rounding are close
