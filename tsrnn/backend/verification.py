"""Whether a path's numbers can be trusted for a call: its results against a trusted path's.

``tsrnn.backend.trust`` verifies each of ``"auto"``'s candidates before it uses it (its module
docstring says when, and against which trusted path). This module does the comparison:
``results`` runs the call on one path through the backend's ``run`` callback and returns its
outputs and, when the call needs gradients, the gradients of a fixed loss with respect to every
input that requires grad; ``disagreement`` holds a path's results against the trusted path's
float64 results and describes the worst disagreement.

The bound of each result is its ``tsrnn.backend.tolerance`` row for the call's dtype, or, where larger,
``SLACK`` times the trusted path's own error when it runs the call in the call's dtype (the rows
hold for well-conditioned inputs; docs/backends.md). A path is dropped only if it is further from
float64 than both.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from tsrnn.backend.tolerance import error, rows

LOSS_SEED = 0  # the loss weights are the same pseudo-random numbers for every path and call
SLACK = 4  # a path may be this many times as far from float64 as the trusted path in the call's dtype


def results(run, path: str, grad: bool, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The outputs of ``run(path, dtype)`` by name and, with ``grad``, "grad <input>" for every
    input that requires grad: the gradient of sum_k (w_k * output_k).sum(), each w_k fixed
    pseudo-random float64 numbers of output_k's shape (drawn on the CPU, then moved to its device)."""
    with torch.set_grad_enabled(grad):
        outputs, inputs = run(path, dtype)
        values = {name: out.detach() for name, out in outputs.items()}
        if grad and inputs:
            generator = torch.Generator().manual_seed(LOSS_SEED)
            weights = [torch.randn(out.shape, generator=generator, dtype=torch.float64).to(out.device)
                       for out in outputs.values()]
            loss = sum((out.double() * w).sum() for out, w in zip(outputs.values(), weights) if out.requires_grad)
            grads = torch.autograd.grad(loss, list(inputs.values()), allow_unused=True, materialize_grads=True)
            values.update({f"grad {name}": g for name, g in zip(inputs, grads)})
    return values


def disagreement(ours: dict[str, torch.Tensor], trusted: dict[str, torch.Tensor], dtype: torch.dtype,
                 own: Callable[[], dict[str, torch.Tensor]], products: str = "ieee") -> str | None:
    """None if every result of ``ours`` is within its bound of the trusted float64 one, else
    "<name>: max error E > bound B" for the worst (the largest error over its bound). The bound is
    the row of the call's ``dtype`` and the precision of its ``products`` (``tolerance.rows``: values,
    gradients), or ``SLACK`` times the error of ``own()`` (the trusted path's results in the call's dtype,
    asked for only when a result is beyond its row) where larger."""
    worst = []
    value_row, grad_row = rows(dtype, products)
    for name, expected in trusted.items():
        tol = value_row if not name.startswith("grad ") else grad_row
        err, bound = error(ours[name], expected, tol)
        if err > bound:
            bound = max(bound, SLACK * error(own()[name], expected, tol)[0])
        if err > bound:
            worst.append((err / bound if bound > 0 else math.inf, f"{name}: max error {err:.3g} > bound {bound:.3g}"))
    return max(worst)[1] if worst else None
