"""What the tensor-core kernels' plans say about a call, asked through their planning ops
(``recurrence_plan``, ``recurrence_config``: ``op.PLAN_SCHEMA``, ``op.CONFIG_SCHEMA``) of the
namespaces ``op.CLUSTER`` and ``op.GRID``.

Each function takes the call's device, cell, H, B and the precision of its products
(``tsrnn.precision.products``). Each answer is asked once per (planning op, namespace, device
index, cell, H, B, precision, the kernel's forcing variable, ``FORCING``) and then remembered;
while torch.compile traces (a plan is a host call that cannot be traced), a key not asked yet
gets the answer of no plan, without asking.
"""
from __future__ import annotations

import os

import torch

from tsrnn.ops.recurrence.op import CLUSTER, GRID

FORCING = {CLUSTER: "TSRNN_CLUSTER", GRID: "TSRNN_GRID"}  # the variable that forces each kernel's configuration
NEEDS = {  # what each kernel's plan needs of W_hh, said where it has none
    CLUSTER: "must fit in the shared memory of one thread-block cluster of at most 16 blocks (sm_90 and later)",
    GRID: "and the batch's partial sums must fit in the shared memory of blocks that are all resident at once",
}
_plans: dict[tuple, object] = {}  # (planning op, namespace, device index, cell, H, B, precision, forcing) -> answer


def _ask(op: str, namespace: str, device: torch.device, cell: str, hidden: int, batch: int, products: str,
         unknown):
    """The answer of the planning op ``op`` of ``namespace``, remembered (see the module docstring);
    ``unknown`` while torch.compile traces a key not asked yet."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (op, namespace, index, cell, hidden, batch, products, os.environ.get(FORCING[namespace], ""))
    if key not in _plans:
        if torch.compiler.is_compiling():
            return unknown
        probe = torch.empty(0, hidden, device=device, dtype=torch.float32)  # sizes only
        _plans[key] = getattr(getattr(torch.ops, namespace), op)(cell, probe, batch, products)
    return _plans[key]


def blocks(namespace: str, device: torch.device, cell: str, hidden: int, batch: int, products: str) -> int:
    """The thread blocks of the kernel's plan for the call; 0 where nothing fits or it cannot launch."""
    return _ask("recurrence_plan", namespace, device, cell, hidden, batch, products, 0)


def refusal(namespace: str, device: torch.device, cell: str, hidden: int, batch: int, products: str) -> str | None:
    """None where the kernel's plan serves the call (``blocks`` >= 1), else why it does not."""
    if blocks(namespace, device, cell, hidden, batch, products) < 1:
        return f"H={hidden}, B={batch} does not fit: W_hh ({products} operands) {NEEDS[namespace]}"
    return None


def regime(namespace: str, device: torch.device, cell: str, hidden: int, batch: int, products: str) -> tuple[int, ...]:
    """Which of the kernel's code runs the call: its plan's cluster size, batch tile (cluster
    kernel) or chunk (grid kernel) and units a block, the grid kernel's for each direction (the
    number of clusters, which only scales with B, left out); (0,) while torch.compile traces a key
    not asked yet."""
    config = _ask("recurrence_config", namespace, device, cell, hidden, batch, products, None)
    if config is None:
        return (0,)
    return tuple(int(config[i]) for i in (0, 1, 3) + ((6, 7, 9) if len(config) >= 10 else ()))
