"""The CUDA kernels' source on the CPU (tests/simt/simt.h): what every emulated table shares.

``load(library)`` defines the operators' namespaces ``tsrnn_simt_cluster``, ``tsrnn_simt_grid`` and
``tsrnn_simt_tensor_core`` (the GEMMs) from tsrnn.ops's schemas (so the autograd formula and the fake kernels are the package's own) and
loads a library that tests/simt/build.py compiled; tests/simt/cluster.py makes registry records of
them, which ``registered`` adds while a check runs, so that ``tsrnn.testing.compare`` runs the
kernels' source through tsrnn.functional, exactly as it runs every other path.
``emulate(multiprocessors, seed)`` picks the emulated GPU and the thread order of the next
launches; ``traces_error`` reads a layer's saved activations back as traces.
"""
from __future__ import annotations

import contextlib

import torch

from tsrnn import backend, functional, reference, testing
from tsrnn.ops import library as ops_library
from tsrnn.ops import projection
from tsrnn.ops.recurrence import op as recurrence_op
from tsrnn.ops.recurrence import cells

CLUSTER_NAMESPACE = "tsrnn_simt_cluster"
GRID_NAMESPACE = "tsrnn_simt_grid"
TENSOR_CORE_NAMESPACE = "tsrnn_simt_tensor_core"  # the GEMMs of csrc/gemm/cuda/tensor_core_gemm.h on the emulated cuBLAS
H100_SHARED_OPTIN = 232448  # bytes of shared memory one block may opt in to on an H100
_devices: dict[tuple[int, int], int] = {}
_loaded: dict[str, list] = {}  # the library file loaded -> the namespaces' definitions


def load(library) -> None:
    """Defines the namespaces' schemas and loads the kernels of ``library`` (once per process)."""
    if _loaded:
        if str(library) not in _loaded:
            raise RuntimeError(f"one emulation library per process: {next(iter(_loaded))} is loaded, not {library}")
        return
    for namespace in (CLUSTER_NAMESPACE, GRID_NAMESPACE):
        recurrence_op.define(namespace, planned=True)
    projection.define_tensor_core(TENSOR_CORE_NAMESPACE)
    torch.ops.load_library(str(library))
    _loaded[str(library)] = [ops_library.library(namespace)
                             for namespace in (CLUSTER_NAMESPACE, GRID_NAMESPACE, TENSOR_CORE_NAMESPACE)]


@contextlib.contextmanager
def nan_filled():
    """The NaN fill of fresh memory on (an output the kernels never wrote reads as NaN), as it was
    after."""
    fill = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(fill)


@contextlib.contextmanager
def registered(record: backend.Path):
    """The registry with an emulated path ``record`` added and the NaN fill of fresh memory on, as
    it was after; yields the path's name."""
    with testing.registered(record) as name, nan_filled():
        yield name


def recurrence_launches() -> int:
    """The emulated launches so far but the GEMMs' rounding kernel's (csrc/gemm/cuda/round_tf32.cu)."""
    return torch.ops.simt.launches() - torch.ops.simt.launches_of("round_tf32_kernel")


def emulate(multiprocessors: int, seed: int, shared_optin: int = H100_SHARED_OPTIN, registers: int = 64) -> None:
    """The emulated device of the next launches (an H100 but for its SM count and shared memory)
    and the seed of their thread order; ``registers``: a thread's in its occupancy queries (g++
    cannot tell a kernel's: 64 unless a test knows better)."""
    key = (multiprocessors, shared_optin, registers)
    if key not in _devices:
        _devices[key] = torch.ops.simt.add_device(multiprocessors, shared_optin, registers)
    torch.ops.simt.use(_devices[key], seed)


def traces_error(cell_name: str, shape, seed: int, dt: bool, path_name: str, row: dict) -> dict[str, tuple[float, float]]:
    """The saved activations of a float32 layer on ``path_name`` read back as traces (forget gates;
    the pLSTM's reset gates and ages) against the reference's, with ``row``: {name: (error, bound)}."""
    args = testing.layer_args(cell_name, *shape, seed=seed, dt=dt)
    cell = cells.get(cell_name)
    data = {cell.step_input}
    ours = {k: (v.float() if isinstance(v, torch.Tensor) and k not in data else v) for k, v in args.items()}
    if cell.step_input and ours.get(cell.step_input) is not None:
        ours[cell.step_input] = ours[cell.step_input].float()
    _, _, traces = functional.recurrence(cell_name, **testing.recurrence_args(cell_name, ours), backend=path_name,
                                         return_traces=True)
    _, _, want = reference.layer(cell, **testing.recurrence_args(cell_name, args))
    return {name: testing._error(traces[name], expected, row) for name, expected in want.items()}
