"""What the persistent Triton recurrence can hold, without importing triton: the dispatcher
(tsrnn/backend/) asks it before it offers the path, the kernels (persistent.py) size their
tiles by it.

The kernel keeps a program's (16 rows x HP units) states, and the gate pre-activations of one
step, in registers, with HP = H padded to a power of two >= 16 (tl.dot's tile side).
"""
from __future__ import annotations

import torch

# Padded H up to which the persistent Triton kernel keeps the recurrence in registers, by math
# dtype (ptxas for sm_90: at most 32 bytes of spill at 128 in float32; float64 spills from 64).
PERSISTENT_MAX_HP = {torch.float32: 128, torch.float64: 32}


def padded(hidden: int) -> int:
    """H rounded up to a power of two, at least 16: the tile side of the persistent Triton kernel."""
    return max(16, 1 << (hidden - 1).bit_length())


def persistent_why_not(hidden: int, math_dtype: torch.dtype) -> str | None:
    """None if the persistent kernel takes H units in ``math_dtype``, else why not."""
    limit = PERSISTENT_MAX_HP[math_dtype]
    if padded(hidden) > limit:
        return f"H={hidden} pads to {padded(hidden)} > {limit} units in {math_dtype}"
    return None
