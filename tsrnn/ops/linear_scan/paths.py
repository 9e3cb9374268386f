"""How each kind of path runs the linear scan x_t = a_t x_{t-1} + u_t elementwise over u (T, ...),
a broadcasting against u, x0 (...) or None; each function is the ``run`` of the path records
(``tsrnn.backend.registry``) of its kind, called as ``run(path, a, u, x0)`` with checked
arguments, and returns x like u."""
from __future__ import annotations

from tsrnn.ops import library
from tsrnn.ops.linear_scan import reference
from tsrnn.ops.recurrence.cells import math_dtype


def run_reference(path, a, u, x0):
    """The scan's step loop, in u's dtype."""
    return reference.linear_scan(a, u, x0)


def run_operator(path, a, u, x0):
    """The scan operator of ``path``'s namespace (``tsrnn.ops.linear_scan.op``) on (T, N) tensors
    in the math dtype."""
    math, steps = math_dtype(u.dtype), u.shape[0]
    x0 = u.new_zeros(u.shape[1:]) if x0 is None else x0
    a = a.broadcast_to(u.shape).to(math).reshape(steps, -1).contiguous()
    x = library.call(path.namespace, "linear_scan_forward", a, u.to(math).reshape(steps, -1).contiguous(),
                     x0.to(math).reshape(-1).contiguous())
    return x.view(u.shape).to(u.dtype)
