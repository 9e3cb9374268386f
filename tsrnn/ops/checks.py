"""What every operator's argument checks share: the check itself (``_require``), the dtypes the
kernels compute in, and where the Triton kernels can read tensors."""
from __future__ import annotations

import os

import torch

MATH_DTYPES = (torch.float32, torch.float64)  # what the kernels compute in (tsrnn.ops.recurrence.cells.math_dtype)


def _require(cond, message):
    """torch._check(cond, message): a RuntimeError, or on symbolic shapes a guard or runtime assert;
    a plain True returns at once (all the checks of an eager call take ~20 us)."""
    if cond is not True:
        torch._check(cond, message)


def triton_refuses(device_type: str) -> str | None:
    """None where the Triton kernels read tensors of ``device_type``: CUDA, or CPU through the
    interpreter (TRITON_INTERPRET=1); else why not (the rule of tsrnn.backend's Triton paths too)."""
    if device_type == "cuda" or (device_type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"):
        return None
    return f"Triton runs on CUDA tensors (or CPU tensors with TRITON_INTERPRET=1), got {device_type} tensors"


def triton_device(t: torch.Tensor) -> None:
    """Refuses a tensor the Triton kernels cannot read (CPU tensors on a GPU machine, meta) before
    a launch would fail inside Triton or read host memory as device memory."""
    reason = triton_refuses(t.device.type)
    if reason:
        raise RuntimeError(f"tsrnn: {reason}")
