"""The CUDA kernels' source on the CPU (tests/simt/simt.h) as one more path of tsrnn's registry.

``load(library)`` defines the operators' namespace ``tsrnn_simt`` from tsrnn.ops's schemas (so
the autograd formula and the fake kernels are the package's own), loads a library that
tests/simt/build.py compiled, and returns ``path()``, a registry record ("cuda_simt", CPU
tensors) for ``registered`` to add while a check runs: ``tsrnn.testing.compare("cuda_simt", ...)``
then runs the persistent CUDA kernels' source through tsrnn.functional, exactly as it runs every
other path. ``emulate(multiprocessors, seed)`` picks the emulated GPU and the thread order of the
next launches. ``check(case)`` is one row of CASES: the table of the tests (tests/test_simt.py)
and of the sanitized and planted-bug runs (tests/simt/run.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from tsrnn import backend, cells, functional, ops, reference, testing

NAME = "cuda_simt"
NAMESPACE = "tsrnn_simt"
H100_SHARED_OPTIN = 232448  # bytes of shared memory one block may opt in to on an H100
_devices: dict[tuple[int, int], int] = {}
_loaded: dict[str, torch.library.Library] = {}  # the library file loaded -> the namespace's definitions


def load(library) -> None:
    """Defines tsrnn_simt's schemas and loads the kernels of ``library`` (once per process)."""
    if _loaded:
        if str(library) not in _loaded:
            raise RuntimeError(f"one emulation library per process: {next(iter(_loaded))} is loaded, not {library}")
        return
    definitions = ops._define(NAMESPACE, ("recurrence",))
    definitions.define(ops.PLAN_SCHEMA)
    torch.ops.load_library(str(library))
    _loaded[str(library)] = definitions


def path() -> backend.Path:
    """The registry record of the emulated persistent kernel: an operator path on CPU tensors,
    float32 math only, refused where the kernel's plan refuses the shape (as ``cuda_coop``)."""

    def rule(call: backend.Call) -> str | None:
        if call.math_dtype != torch.float32:
            return "it computes in float32 only"
        probe = torch.empty(0, call.shape[3])
        if torch.ops.tsrnn_simt.recurrence_plan(call.cell, probe) < 1:
            return f"H={call.shape[3]} does not fit on the emulated device"
        return None

    return backend.Path(NAME, ("recurrence",), ("cpu",), None, "operator", rule, NAMESPACE)


@contextlib.contextmanager
def registered():
    """The registry with the emulated path added (and the NaN fill of fresh memory on: an output
    the kernels never wrote reads as NaN), as it was after."""
    saved = dict(backend.REGISTRY), dict(backend.PATHS)
    fill = torch.are_deterministic_algorithms_enabled()
    backend.REGISTRY[NAME] = path()
    backend.PATHS["recurrence"] = backend.PATHS["recurrence"] + (NAME,)
    torch.use_deterministic_algorithms(True)
    try:
        yield NAME
    finally:
        backend.REGISTRY.clear()
        backend.REGISTRY.update(saved[0])
        backend.PATHS.clear()
        backend.PATHS.update(saved[1])
        torch.use_deterministic_algorithms(fill)


def emulate(multiprocessors: int, seed: int, shared_optin: int = H100_SHARED_OPTIN) -> None:
    """The emulated device of the next launches (an H100 but for its SM count and shared memory)
    and the seed of their thread order."""
    key = (multiprocessors, shared_optin)
    if key not in _devices:
        _devices[key] = torch.ops.simt.add_device(multiprocessors, shared_optin)
    torch.ops.simt.use(_devices[key], seed)


@dataclass(frozen=True)
class Case:
    """One check: ``cell`` on ``shape`` (T, B, I, H) with variable Δt or not, on an emulated GPU
    of ``multiprocessors`` SMs, threads ordered by ``seed``; what the shape crosses in ``edge``."""

    cell: str
    shape: tuple[int, int, int, int]
    multiprocessors: int
    dt: bool
    seed: int
    edge: str

    @property
    def id(self) -> str:
        return f"{self.cell}{'-dt' if self.dt else ''}-{self.shape}-sm{self.multiprocessors}-seed{self.seed}"


# (T, B, I, H) and the emulated SM count: units = ceil(H / SMs) per block (at most 16).
SHAPES = [
    ((1, 1, 2, 3), 4, "one step, one row; three blocks of one unit"),
    ((3, 17, 3, 37), 4, "B = 17 over the 16 warps of a block; 10 units a block, the last block 7"),
    ((4, 5, 4, 13), 1, "one block of 13 units"),
    ((2, 3, 2, 64), 4, "16 units a block, the most a block takes"),
]
# An H100's own launch configuration (132 SMs): H = 301 takes 101 blocks of 3 units, the last
# block 1 (51,712 emulated threads; seconds a case).
H100_SHAPE = ((4, 3, 5, 301), 132, "an H100's plan: 101 blocks of 3 units, the last 1")
# Every cell form: the LSTM (the MTS-LSTM runs the same kernel, checked through its module in
# tests/test_simt.py), the pLSTM coupled and separate, unit and variable Δt.
CELL_FORMS = [("lstm", False), ("plstm_coupled", False), ("plstm_coupled", True), ("plstm_separate", False),
              ("plstm_separate", True)]


def cases(seeds) -> list[Case]:
    return [Case(cell, shape, sms, dt, seed, edge)
            for shape, sms, edge in SHAPES for cell, dt in CELL_FORMS for seed in seeds]


def check(case: Case) -> testing.Comparison:
    """``case`` on the emulated kernel against the float64 reference, forward, final states and
    gradients, with the float32 tolerances of tsrnn.testing; the kernel must have launched."""
    emulate(case.multiprocessors, case.seed)
    before = torch.ops.simt.launches()
    with registered():
        result = testing.compare(NAME, case.cell, case.shape, torch.float32, "cpu", dt=case.dt, seed=case.seed)
    if torch.ops.simt.launches() - before != 2:
        result.errors["kernel launches (forward, backward)"] = (float("inf"), 2.0)
    return result


def check_traces(case: Case) -> dict[str, tuple[float, float]]:
    """The saved activations read back as traces (forget gates; the pLSTM's reset gates and ages)
    against the reference's, float32 tolerances: {name: (error, bound)}."""
    emulate(case.multiprocessors, case.seed)
    args = testing.layer_args(case.cell, *case.shape, seed=case.seed, dt=case.dt)
    cell = cells.get(case.cell)
    ours = {k: (v.float() if isinstance(v, torch.Tensor) and k != "dt" else v) for k, v in args.items()}
    states = (ours["c0"], ours["a0"]) if cell.has_p else (ours["c0"],)
    with registered():
        _, _, traces = functional._layer(cell, ours["x"], ours["h0"], states, ours["w_ih"], ours["w_hh"], ours["bias"],
                                         ours.get("p"), None if ours.get("dt") is None else ours["dt"].float(),
                                         1e-3, NAME, traces=True)
    want = {}
    if cell.has_p:
        _, _, want["f"] = reference.plstm(**args, trace=want)
    else:
        _, _, want["f"] = reference.lstm(**args)
    return {name: testing._error(traces[name], expected, testing.TOLERANCE[torch.float32])
            for name, expected in want.items()}
