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
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from tsrnn import backend, testing
from tsrnn.ops import projection
from tsrnn.ops.recurrence import cells
from tsrnn.ops.recurrence import paths as recurrence_paths

from simt import build, emulation

PRECISIONS = ("tf32", "bf16", "ieee")


@dataclass(frozen=True)
class Kernel:
    """An emulated tensor-core kernel: its operators' namespace, the variable that forces its
    configuration, its source, and what its plan refusing a shape means."""

    name: str
    namespace: str
    forcing: str
    source: Path
    refusal: str


KERNELS = {
    "cluster": Kernel("cluster", emulation.CLUSTER_NAMESPACE, "TSRNN_CLUSTER", build.CLUSTER_KERNELS,
                      "does not fit one cluster of the emulated device"),
    "grid": Kernel("grid", emulation.GRID_NAMESPACE, "TSRNN_GRID", build.GRID_KERNELS,
                   "does not fit the resident blocks of the emulated device"),
}


def name(precision: str, kernel: str = "cluster") -> str:
    return f"{kernel}_simt_{precision}"


def path(precision: str, kernel: str = "cluster") -> backend.Path:
    """The registry record of the emulated tensor-core ``kernel`` with products in ``precision``:
    an operator path on CPU tensors, float32 math, refused where the plan refuses the shape, its
    input projection's GEMMs (as its dW_hh's) on the emulated cuBLAS of the tensor-core GEMMs."""
    described = KERNELS[kernel]

    def rule(call: backend.Call) -> str | None:
        if call.math_dtype != torch.float32:
            return "it computes in float32 only"
        probe = torch.empty(0, call.shape[3])
        if getattr(torch.ops, described.namespace).recurrence_plan(call.cell, probe, call.shape[1], precision) < 1:
            return f"H={call.shape[3]} {described.refusal}"
        return None

    return backend.Path(name(precision, kernel), {"recurrence": recurrence_paths.run_operator}, ("cpu",), None,
                        "operator", rule, described.namespace,
                        projection.tensor_core_projection(emulation.TENSOR_CORE_NAMESPACE),
                        lambda dtype, device: precision)


@contextlib.contextmanager
def forced(first: int, second: int, kernel: str = "cluster", backward: tuple[int, int] | None = None):
    """The kernel's forcing variable set to "first,second" (the plan's choice forced: cluster size
    and batch tile or chunk), or for the grid kernel with ``backward``, "first,second,c,chunk" (the
    forward's and the backward's apart), as it was after."""
    variable = KERNELS[kernel].forcing
    before = os.environ.get(variable)
    os.environ[variable] = ",".join(map(str, (first, second) + (tuple(backward) if backward else ())))
    try:
        yield
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before


@dataclass(frozen=True)
class Case:
    """One check of ``kernel``: ``cell`` on ``shape`` (T, B, I, H), variable Δt or not, products in
    ``precision``, clusters of ``cluster`` blocks over batch tiles (the grid kernel: chunks) of
    ``tile`` rows on an emulated device of ``multiprocessors`` SMs with ``shared_optin`` bytes of
    shared memory a block, packed rows of ``lengths`` (a case of tsrnn.testing.LENGTH_CASES) or
    padded, threads ordered by ``seed``; what it crosses in ``edge``."""

    cell: str
    shape: tuple[int, int, int, int]
    cluster: int
    tile: int
    precision: str
    dt: bool
    seed: int
    edge: str
    lengths: str | None = None
    kernel: str = "cluster"
    multiprocessors: int = 4
    shared_optin: int = emulation.H100_SHARED_OPTIN
    backward: tuple[int, int] | None = None  # the grid kernel's backward (cluster, chunk) where not (cluster, tile)

    @property
    def id(self) -> str:
        packed = f"-{self.lengths.replace(' ', '_')}" if self.lengths else ""
        backward = f"-bc{self.backward[0]}-bt{self.backward[1]}" if self.backward else ""
        return (f"{self.kernel}-{self.cell}{'-dt' if self.dt else ''}-{self.shape}-c{self.cluster}-t{self.tile}"
                f"{backward}-{self.precision}{packed}-seed{self.seed}")


# (T, B, I, H), cluster size, batch tile, emulated SMs: what each shape crosses, per kernel; a grid
# shape may add the backward's own (cluster size, chunk).
SHAPES = {
    "cluster": [
        ((1, 1, 2, 3), 1, 8, 4, "T = 1, B = 1: one block of 3 units, one row of an 8-row tile"),
        ((3, 17, 3, 37), 4, 16, 4, "H = 37 (no multiple of 8) over 4 blocks of 10, 10, 10, 7 units; B = 17: two tiles "
                                   "of two n8 tiles, the last of one row"),
        ((2, 33, 2, 20), 2, 32, 4, "a 32-row tile (four n8 tiles), B = 33: the second tile of one row"),
        ((2, 9, 2, 64), 16, 8, 4, "a cluster of 16 blocks (non-portable) of 4 units each; B = 9: two 8-row tiles, the "
                                  "last of one row"),
        ((2, 20, 3, 150), 4, 24, 4, "H = 150 over 4 blocks of 38 units; B = 20 in a 24-row tile (three n8 tiles, the "
                                    "third by ldmatrix.x2); K split (TF32: both products' 20 k-steps in 3 parts of 7, "
                                    "7, 6; bf16: 10 in 2 of 5), TF32's 30 segments a block past the 24 its warps hold"),
    ],
    # The grid kernel's clusters: as many as the emulated SMs hold (SMs / cluster size), fewer where
    # a cluster would own no unit.
    "grid": [
        ((1, 1, 2, 3), 1, 16, 4, "T = 1, B = 1: 3 clusters of one block and one unit, one row of a 16-row chunk"),
        ((3, 17, 3, 37), 2, 16, 4, "H = 37 over 2 clusters of 19 + 18 units, K split 32 + 5 (backward: G H over 2); "
                                   "B = 17 in two chunks of 16 + 1 rows (cluster barriers between chunks)"),
        ((2, 33, 2, 20), 4, 48, 4, "one cluster of 4 whose last two K slices are empty (20 = 16 + 4 + 0 + 0); the "
                                   "whole batch of 33 in one chunk of 48"),
        ((3, 5, 2, 150), 8, 16, 16, "H = 150 over 2 clusters of 8 blocks (75 units each), K slices of 32 (the last "
                                    "of 6)"),
        ((2, 3, 2, 261), 1, 16, 16, "H = 261 over 16 clusters of one block (17 units, the last 6): h read 4 bytes at a "
                                    "time (H odd), dz 16 (G H = 1044), rows of 272 and 264 vectors, more than a "
                                    "block's 256 threads (the load's walk steps within a row)"),
        ((2, 3, 2, 260), 2, 16, 8, "H = 260 over 4 clusters of 2 blocks (65 units): the LSTM forward's 17 m-tiles, "
                                   "warp 0 three of them, its held fragments ending inside its second (TF32) or "
                                   "third (bf16) m-tile, the rest read from slots; the backward's 5 m-tiles of 33 "
                                   "(bf16) or 66 (TF32) k-steps, 9 or 42 of each from slots"),
        ((3, 17, 3, 37), 2, 16, 4, "each direction its own plan: the forward over 2 clusters of 2 blocks (19 + 18 "
                                   "units) in two chunks, the backward over one cluster of 4 (all 37 units, G H in 4 "
                                   "K slices) in one chunk of 32", (4, 32)),
    ],
}
# every cell, and each with a step input also with one given (variable Δt)
CELL_FORMS = [(name, dt) for name, cell in cells.CELLS.items() for dt in ((False, True) if cell.step_input else (False,))]


def cases(seeds, kernel: str = "cluster") -> list[Case]:
    """Every shape, cell form and precision of ``kernel``; clusters of 8 or more blocks and devices
    of more than 8 SMs (thousands of emulated threads) at TF32 only."""
    return [Case(cell, shape, c, tile, precision, dt, seed, edge, None, kernel, sms, backward=backward[0] if backward else None)
            for shape, c, tile, sms, edge, *backward in SHAPES[kernel] for cell, dt in CELL_FORMS
            for precision in PRECISIONS for seed in seeds if (c < 8 and sms <= 8) or precision == "tf32"]


def lengths_cases(seeds, kernel: str = "cluster") -> list[Case]:
    """Every LENGTH_CASES entry, for the LSTM and the pLSTM with variable Δt, TF32 and bf16, on
    clusters of 2 blocks (rows of several lengths over the tile or chunk; the cluster kernel: H = 6
    over 3 + 3 units; the grid kernel: 2 clusters of 3 units, K split 3 + 3)."""
    return [Case(cell, testing.LENGTH_SHAPES[0], 2, 16, precision, dt, seed, "packed rows", lengths, kernel)
            for lengths in testing.LENGTH_CASES for cell, dt in (("lstm", False), ("plstm_separate", True))
            for precision in ("tf32", "bf16") for seed in seeds]


def table(seeds, kernel: str = "cluster") -> list[Case]:
    """The whole table of ``kernel`` (tests/simt/run.py --cluster / --grid)."""
    return cases(seeds, kernel) + lengths_cases(seeds, kernel)


@contextlib.contextmanager
def registered(precision: str, kernel: str = "cluster"):
    """The registry with the emulated path of ``kernel`` and ``precision`` added (and the NaN fill
    of fresh memory on), as it was after."""
    with emulation.registered(path(precision, kernel)) as added:
        yield added


def check(case: Case) -> testing.Comparison:
    """``case`` on the emulated kernel against the float64 reference (values, final states and
    gradients), with the tolerance rows of its precision; both kernels must have launched."""
    emulation.emulate(case.multiprocessors, case.seed, case.shared_optin)
    before = emulation.recurrence_launches()
    with registered(case.precision, case.kernel) as path_name, forced(case.cluster, case.tile, case.kernel, case.backward):
        result = testing.compare(path_name, case.cell, case.shape, torch.float32, "cpu", dt=case.dt, seed=case.seed,
                                 lengths=case.lengths, products=case.precision)
    if emulation.recurrence_launches() - before != 2:
        result.errors["kernel launches (forward, backward)"] = (float("inf"), 2.0)
    return result


def check_traces(case: Case) -> dict[str, tuple[float, float]]:
    """``emulation.traces_error`` of ``case`` on the emulated kernel, with the value row of its
    precision."""
    emulation.emulate(case.multiprocessors, case.seed)
    with registered(case.precision, case.kernel) as path_name, forced(case.cluster, case.tile, case.kernel, case.backward):
        return emulation.traces_error(case.cell, case.shape, case.seed, case.dt, path_name,
                                      testing.rows(torch.float32, case.precision)[0])


def sanitized_cases(subset: str) -> list[str]:
    """The ids (run.py's --match texts) of the sanitized runs of a kernel's table: in ``subset`` (a
    shape, configuration and precision of its table), the LSTM (one state, four saved activations)
    and the separate pLSTM with variable Δt (two states, five saved, p and Δt read); and their packed
    cases, TF32 rows unsorted and bf16 with zeros."""
    packed = str(tuple(testing.LENGTH_SHAPES[0]))
    return [f"lstm-{subset}", f"plstm_separate-dt-{subset}", f"lstm-{packed}-c2-t16-tf32-unsorted",
            f"plstm_separate-dt-{packed}-c2-t16-bf16-with_zeros"]


def barrier_lines(source: Path) -> dict[str, int]:
    """The source line of each block or cluster barrier and mbarrier wait in the kernels of
    ``source`` (what run.py's --drop can remove), by "line N: text": the calls, and the calls of the
    helpers that wait for their caller's line (``wait<Skip>``, ``sync<Skip>``, ``exchange_sync<Skip>``,
    ``ptx::mbarrier_wait``),
    and the waits for cp.async copies (``ptx::cp_async_wait``);
    not the removal ladder's own barriers (lines naming probe::kBarriers, in the GPU probe's build
    only)."""
    lines = source.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "__global__" in line)
    found = {}
    for i, line in enumerate(lines[first:], first):
        if "probe::kBarriers" in line:
            continue
        if re.search(r"(__syncthreads\(\)|barrier_wait\(\)|cluster\.sync\(\)|(wait|sync)<Skip>\(cluster\))\s*;", line) \
                or "ptx::mbarrier_wait(" in line or "ptx::cp_async_wait<" in line:
            found[f"line {i + 1}: {line.strip()}"] = i + 1
    return found
