"""The cluster-resident tensor-core kernel's source (csrc/recurrence/cuda/cluster_recurrence.cu) on
the CPU, as paths of tsrnn's registry, and its table.

``emulation.load`` defines the namespace ``tsrnn_simt_cluster`` (NAMESPACE) too; ``path(precision)``
is a registry record ("cluster_simt_tf32", "cluster_simt_bf16", "cluster_simt_ieee") that runs the
kernel through tsrnn.functional with its products fixed to that precision (on a GPU the precision
follows the call's dtype and torch.backends.cudnn.allow_tf32; CPU tensors would always ask for
ieee). ``check(case)`` is one row of ``cases(seeds)`` and ``lengths_cases(seeds)``: the layer on
the emulated kernel against the float64 reference through ``tsrnn.testing.compare``, with the
tolerance rows of the precision; ``check_traces(case)`` its saved activations against the
reference's traces. TSRNN_CLUSTER forces each case's cluster size and batch tile.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from tsrnn import backend, testing
from tsrnn.ops import projection
from tsrnn.ops.recurrence import paths as recurrence_paths

from simt import emulation

NAMESPACE = "tsrnn_simt_cluster"
PRECISIONS = ("tf32", "bf16", "ieee")


def name(precision: str) -> str:
    return f"cluster_simt_{precision}"


def path(precision: str) -> backend.Path:
    """The registry record of the emulated cluster-resident kernel with products in ``precision``:
    an operator path on CPU tensors, float32 math, refused where the plan refuses the shape."""

    def rule(call: backend.Call) -> str | None:
        if call.math_dtype != torch.float32:
            return "it computes in float32 only"
        probe = torch.empty(0, call.shape[3])
        if torch.ops.tsrnn_simt_cluster.recurrence_plan(call.cell, probe, call.shape[1], precision) < 1:
            return f"H={call.shape[3]} does not fit one cluster of the emulated device"
        return None

    return backend.Path(name(precision), {"recurrence": recurrence_paths.run_operator}, ("cpu",), None, "operator",
                        rule, NAMESPACE, projection.torch_projection, lambda dtype, device: precision)


@contextlib.contextmanager
def forced(cluster: int, tile: int):
    """TSRNN_CLUSTER set to "cluster,tile" (the plan's choice forced), as it was after."""
    before = os.environ.get("TSRNN_CLUSTER")
    os.environ["TSRNN_CLUSTER"] = f"{cluster},{tile}"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TSRNN_CLUSTER"]
        else:
            os.environ["TSRNN_CLUSTER"] = before


@dataclass(frozen=True)
class Case:
    """One check: ``cell`` on ``shape`` (T, B, I, H), variable Δt or not, products in ``precision``,
    clusters of ``cluster`` blocks over batch tiles of ``tile`` rows, packed rows of ``lengths`` (a
    case of tsrnn.testing.LENGTH_CASES) or padded, threads ordered by ``seed``; what it crosses in
    ``edge``."""

    cell: str
    shape: tuple[int, int, int, int]
    cluster: int
    tile: int
    precision: str
    dt: bool
    seed: int
    edge: str
    lengths: str | None = None

    @property
    def id(self) -> str:
        packed = f"-{self.lengths.replace(' ', '_')}" if self.lengths else ""
        return (f"cluster-{self.cell}{'-dt' if self.dt else ''}-{self.shape}-c{self.cluster}-t{self.tile}"
                f"-{self.precision}{packed}-seed{self.seed}")


# (T, B, I, H), cluster size, batch tile: what each shape crosses.
SHAPES = [
    ((1, 1, 2, 3), 1, 16, "T = 1, B = 1: one block of 3 units, one row of a 16-row tile"),
    ((3, 17, 3, 37), 4, 16, "H = 37 (no multiple of 16) over 4 blocks of 10, 10, 10, 7 units; B = 17: two tiles, the last of one row"),
    ((2, 33, 2, 20), 2, 32, "a 32-row tile (two wmma columns), B = 33: the second tile of one row"),
    ((2, 3, 2, 64), 16, 16, "a cluster of 16 blocks (non-portable) of 4 units each"),
]
CELL_FORMS = [("lstm", False), ("plstm_coupled", False), ("plstm_coupled", True), ("plstm_separate", False),
              ("plstm_separate", True)]


def cases(seeds) -> list[Case]:
    """Every shape, cell form and precision; the 16-block cluster (16 x 256 emulated threads) at
    TF32 only."""
    return [Case(cell, shape, c, tile, precision, dt, seed, edge)
            for shape, c, tile, edge in SHAPES for cell, dt in CELL_FORMS for precision in PRECISIONS
            for seed in seeds if c < 16 or precision == "tf32"]


def lengths_cases(seeds) -> list[Case]:
    """Every LENGTH_CASES entry, for the LSTM and the pLSTM with variable Δt, TF32 and bf16, on a
    cluster of 2 blocks (rows of several lengths over the tile, H = 6 over 3 + 3 units)."""
    return [Case(cell, testing.LENGTH_SHAPES[0], 2, 16, precision, dt, seed, "packed rows", lengths)
            for lengths in testing.LENGTH_CASES for cell, dt in (("lstm", False), ("plstm_separate", True))
            for precision in ("tf32", "bf16") for seed in seeds]


def table(seeds) -> list[Case]:
    """The whole table of tests/simt/run.py --cluster."""
    return cases(seeds) + lengths_cases(seeds)


@contextlib.contextmanager
def registered(precision: str):
    """The registry with the emulated cluster path of ``precision`` added (and the NaN fill of fresh
    memory on), as it was after."""
    with emulation.registered(path(precision)) as added:
        yield added


def check(case: Case, multiprocessors: int = 4) -> testing.Comparison:
    """``case`` on the emulated kernel against the float64 reference (values, final states and
    gradients), with the tolerance rows of its precision; both kernels must have launched."""
    emulation.emulate(multiprocessors, case.seed)
    before = torch.ops.simt.launches()
    with registered(case.precision) as path_name, forced(case.cluster, case.tile):
        result = testing.compare(path_name, case.cell, case.shape, torch.float32, "cpu", dt=case.dt, seed=case.seed,
                                 lengths=case.lengths, products=case.precision)
    if torch.ops.simt.launches() - before != 2:
        result.errors["kernel launches (forward, backward)"] = (float("inf"), 2.0)
    return result


def check_traces(case: Case) -> dict[str, tuple[float, float]]:
    """``emulation.traces_error`` of ``case`` on the emulated kernel, with the value row of its
    precision."""
    emulation.emulate(4, case.seed)
    with registered(case.precision) as path_name, forced(case.cluster, case.tile):
        return emulation.traces_error(case.cell, case.shape, case.seed, case.dt, path_name,
                                      testing.rows(torch.float32, case.precision)[0])
