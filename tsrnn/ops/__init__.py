"""tsrnn's operators, one folder per op: ``recurrence`` (the recurrent layers) and ``linear_scan``.

Each folder holds the op's reference loops, its cells or checks, its torch.library schemas with
their fake kernels and autograd formulas (``op.py``), its Triton kernels, and how each kind of
path runs it (``paths.py``). ``library`` registers the ops, ``projection`` the CPU engine's input
projection, ``extensions`` loads the compiled kernels (csrc/). Importing this package defines
every op; it imports neither the dispatcher (tsrnn.backend) nor anything above it.
"""
from tsrnn.ops import projection
from tsrnn.ops.linear_scan import op as linear_scan_op
from tsrnn.ops.recurrence import op as recurrence_op

__all__ = ["linear_scan_op", "projection", "recurrence_op"]
