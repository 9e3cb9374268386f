"""The CUDA kernels' source on the CPU (tests/simt/simt.h) as one more path of tsrnn's registry.

``load(library)`` defines the operators' namespace ``tsrnn_simt`` from tsrnn.ops's schemas (so
the autograd formula and the fake kernels are the package's own), loads a library that
tests/simt/build.py compiled, and returns ``path()``, a registry record ("cuda_simt", CPU
tensors) for ``registered`` to add while a check runs: ``tsrnn.testing.compare("cuda_simt", ...)``
then runs the persistent CUDA kernels' source through tsrnn.functional, exactly as it runs every
other path. ``emulate(multiprocessors, seed)`` picks the emulated GPU and the thread order of the
next launches. ``check(case)`` is one row of ``cases(seeds)``, ``check_packed(case)`` one of
``packed_cases(seeds)`` (packed sequences, against the CPU operator): the tables of the tests
(tests/kernels/recurrence/test_simt.py) and of the sanitized and planted-bug runs (tests/simt/run.py, ``table``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from tsrnn import backend, functional, reference, testing
from tsrnn.ops import library as ops_library
from tsrnn.ops import projection
from tsrnn.ops.recurrence import op as recurrence_op
from tsrnn.ops.recurrence import paths as recurrence_paths
from tsrnn.ops.recurrence import cells
from tsrnn.backend import tolerance

NAME = "cuda_simt"
NAMESPACE = "tsrnn_simt"
CLUSTER_NAMESPACE = "tsrnn_simt_cluster"
GRID_NAMESPACE = "tsrnn_simt_grid"
H100_SHARED_OPTIN = 232448  # bytes of shared memory one block may opt in to on an H100
_devices: dict[tuple[int, int], int] = {}
_loaded: dict[str, torch.library.Library] = {}  # the library file loaded -> the namespace's definitions


def load(library) -> None:
    """Defines tsrnn_simt's schemas and loads the kernels of ``library`` (once per process)."""
    if _loaded:
        if str(library) not in _loaded:
            raise RuntimeError(f"one emulation library per process: {next(iter(_loaded))} is loaded, not {library}")
        return
    recurrence_op.define(NAMESPACE, plan=True)
    for namespace in (CLUSTER_NAMESPACE, GRID_NAMESPACE):  # the tensor-core kernels' (tests/simt/cluster.py)
        recurrence_op.define(namespace, plan=True, config=True)
    torch.ops.load_library(str(library))
    _loaded[str(library)] = ops_library.library(NAMESPACE)


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

    return backend.Path(NAME, {"recurrence": recurrence_paths.run_operator}, ("cpu",), None, "operator", rule, NAMESPACE,
                        projection.torch_projection)


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
def registered(record: backend.Path | None = None):
    """The registry with an emulated path added (``record``, the cooperative kernel's by default)
    and the NaN fill of fresh memory on, as it was after; yields the path's name."""
    with testing.registered(record or path()) as name, nan_filled():
        yield name


def emulate(multiprocessors: int, seed: int, shared_optin: int = H100_SHARED_OPTIN, registers: int = 64) -> None:
    """The emulated device of the next launches (an H100 but for its SM count and shared memory)
    and the seed of their thread order; ``registers``: a thread's in its occupancy queries (g++
    cannot tell a kernel's: 64 unless a test knows better)."""
    key = (multiprocessors, shared_optin, registers)
    if key not in _devices:
        _devices[key] = torch.ops.simt.add_device(multiprocessors, shared_optin, registers)
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
# tests/kernels/recurrence/test_simt.py), the pLSTM coupled and separate, unit and variable Δt.
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


def traces_error(cell_name: str, shape, seed: int, dt: bool, path_name: str, row: dict) -> dict[str, tuple[float, float]]:
    """The saved activations of a float32 layer on ``path_name`` read back as traces (forget gates;
    the pLSTM's reset gates and ages) against the reference's, with ``row``: {name: (error, bound)}."""
    args = testing.layer_args(cell_name, *shape, seed=seed, dt=dt)
    cell = cells.get(cell_name)
    ours = {k: (v.float() if isinstance(v, torch.Tensor) and k != "dt" else v) for k, v in args.items()}
    states = (ours["c0"], ours["a0"]) if cell.has_p else (ours["c0"],)
    _, _, traces = functional._layer(cell, ours["x"], ours["h0"], states, ours["w_ih"], ours["w_hh"], ours["bias"],
                                     ours.get("p"), None if ours.get("dt") is None else ours["dt"].float(),
                                     1e-3, path_name, traces=True)
    want = {}
    if cell.has_p:
        _, _, want["f"] = reference.plstm(**args, trace=want)
    else:
        _, _, want["f"] = reference.lstm(**args)
    return {name: testing._error(traces[name], expected, row) for name, expected in want.items()}


def check_traces(case: Case) -> dict[str, tuple[float, float]]:
    """``traces_error`` of ``case`` on the emulated kernel, float32 tolerances."""
    emulate(case.multiprocessors, case.seed)
    with registered() as name:
        return traces_error(case.cell, case.shape, case.seed, case.dt, name, testing.TOLERANCE[torch.float32])


# -- packed sequences (batch_sizes, torch's PackedSequence layout) ----------------------------------
@dataclass(frozen=True)
class PackedCase:
    """One packed check: ``cell`` over ``batch_sizes`` (T = its length) of a batch of ``B`` rows
    and ``H`` units, variable Δt or not, on ``multiprocessors`` SMs, threads ordered by ``seed``."""

    cell: str
    batch_sizes: tuple[int, ...]
    B: int
    H: int
    multiprocessors: int
    dt: bool
    seed: int
    edge: str

    @property
    def id(self) -> str:
        sizes = ",".join(map(str, self.batch_sizes))
        return (f"packed-{self.cell}{'-dt' if self.dt else ''}-[{sizes}]-B{self.B}-H{self.H}"
                f"-sm{self.multiprocessors}-seed{self.seed}")


# (batch_sizes, B, H, SMs): what the packed steps cross.
PACKED_SHAPES = [
    ((4, 4, 4), 4, 13, 4, "every row the same length (the padded steps)"),
    ((5, 1, 1, 1), 5, 13, 4, "one row of length T, the rest of length 1"),
    ((4, 3, 1), 6, 13, 4, "batch_sizes[0] < B: rows 4 and 5 of no step"),
    ((2,), 3, 13, 4, "T = 1, row 2 of no step"),
    ((1, 1, 1), 1, 5, 2, "B = 1"),
    ((17, 17, 9, 2), 18, 37, 4, "17 rows over the 16 warps of a block, then fewer; row 17 of no step"),
]
PACKED_FORMS = [("lstm", False), ("plstm_coupled", True), ("plstm_separate", True)]


def packed_cases(seeds) -> list[PackedCase]:
    return [PackedCase(cell, sizes, B, H, sms, dt, seed, edge)
            for sizes, B, H, sms, edge in PACKED_SHAPES for cell, dt in PACKED_FORMS for seed in seeds]


def table(seeds) -> list:
    """The whole table of tests/simt/run.py: ``cases(seeds)``, then ``packed_cases(seeds)``."""
    return cases(seeds) + packed_cases(seeds)


def packed_args(case: PackedCase) -> dict:
    """Random float64 operator arguments of ``case`` (rounded to float32 values):
    xg [N, G*H], w_hh, h0, state0 [S, B, H], p, dt [N], and batch_sizes."""
    g = torch.Generator().manual_seed(case.seed)
    cell = cells.get(case.cell)
    N, B, H, G = sum(case.batch_sizes), case.B, case.H, cell.num_gates

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    states = [randn(B, H)]
    if cell.has_p:
        states.append(torch.rand(B, H, generator=g, dtype=torch.float64) * 3)  # the age a0
    args = {
        "xg": randn(N, G * H),
        "w_hh": randn(G * H, H, scale=1 / H ** 0.5),
        "h0": randn(B, H, scale=0.5),
        "state0": torch.stack(states),
        "p": torch.rand(H, generator=g, dtype=torch.float64) * 0.9 + 0.05 if cell.has_p else None,
        "dt": torch.rand(N, generator=g, dtype=torch.float64) * 2 + 0.1 if case.dt else None,
    }
    args = {k: None if v is None else v.float().double() for k, v in args.items()}
    args["batch_sizes"] = torch.tensor(case.batch_sizes, dtype=torch.int64)
    return args


DIFFERENTIABLE = ("xg", "w_hh", "h0", "state0", "p")


def _packed_run(forward, case: PackedCase, args: dict, dtype: torch.dtype):
    """h_all, state_n and the gradients of a random loss over both (DIFFERENTIABLE order, None
    where the cell has no p) of ``forward`` on ``args`` in ``dtype``."""
    ours = {k: (v.to(dtype).requires_grad_(k in DIFFERENTIABLE) if isinstance(v, torch.Tensor) and k != "batch_sizes"
                else v) for k, v in args.items()}
    h_all, state_n, _, _ = forward(case.cell, ours["xg"], ours["w_hh"], ours["h0"], ours["state0"], ours["p"],
                                   ours["dt"], 1e-3, True, ours["batch_sizes"])
    g = torch.Generator().manual_seed(case.seed + 1)
    loss = ((h_all.double() * torch.randn(h_all.shape, generator=g, dtype=torch.float64)).sum()
            + (state_n.double() * torch.randn(state_n.shape, generator=g, dtype=torch.float64)).sum())
    wrt = [ours[k] for k in DIFFERENTIABLE if ours[k] is not None]
    grads = iter(torch.autograd.grad(loss, wrt))
    return h_all, state_n, [next(grads) if ours[k] is not None else None for k in DIFFERENTIABLE]


def check_packed(case: PackedCase) -> testing.Comparison:
    """``case`` on the emulated kernel in float32 against the CPU operator in float64 on the same
    values (checked by gradcheck), h_all, state_n and the gradients of a random loss over both,
    with tsrnn.backend.tolerance's float32 rows; the kernel must have launched (forward, backward)."""
    emulate(case.multiprocessors, case.seed)
    args = packed_args(case)
    before = torch.ops.simt.launches()
    with nan_filled():
        h_all, state_n, grads = _packed_run(torch.ops.tsrnn_simt.recurrence_forward, case, args, torch.float32)
    launched = torch.ops.simt.launches() - before
    h_ref, state_ref, grads_ref = _packed_run(torch.ops.tsrnn.recurrence_forward, case, args, torch.float64)
    values, gradients = tolerance.TOLERANCE[torch.float32], tolerance.GRAD_TOLERANCE[torch.float32]
    errors = {"h_all": tolerance.error(h_all, h_ref, values), "state_n": tolerance.error(state_n, state_ref, values)}
    if h_all.dtype != torch.float32:
        errors["h_all dtype"] = (float("inf"), 0.0)
    errors.update({f"grad {k}": tolerance.error(got, want, gradients)
                   for k, got, want in zip(DIFFERENTIABLE, grads, grads_ref) if want is not None})
    if launched != 2:
        errors["kernel launches (forward, backward)"] = (float("inf"), 2.0)
    shape = (len(case.batch_sizes), case.B, 0, case.H)
    return testing.Comparison(NAME, case.cell, shape, torch.float32, errors)
