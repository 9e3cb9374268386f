"""The paths: which implementations of each op exist, one ``Path`` record each in ``REGISTRY``
(``Call`` describes a call); also ``Run`` and ``warn_once`` for the dispatch's modules.

``reference`` (``tsrnn.reference``'s loops, any device), ``cpu`` (``tsrnn._C``), ``onednn`` and
``cudnn`` (torch's LSTM kernel: LSTM cells, no traces, not under ``torch.compile``),
``cuda_cluster`` and ``cuda_grid`` (``tsrnn._cuda``, float32 math), ``triton_step`` (the fallback
where no compiled kernel serves) and ``triton_scan``: docs/backends.md's table says what each is.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.ops import checks, library, projection
from tsrnn.ops.extensions import CUDA_LOAD_ERROR, LOAD_ERROR
from tsrnn.ops.linear_scan import paths as scan_paths
from tsrnn.ops.recurrence import paths as recurrence_paths
from tsrnn.ops.recurrence import tensor_core_plans
from tsrnn.ops.recurrence.cells import CELLS, math_dtype
from tsrnn.ops.recurrence.op import CLUSTER, GRID

BACKENDS = ("auto", "reference", "native", "triton")


@dataclass(frozen=True)
class Call:
    """What a dispatch decision depends on. ``shape``: (T, B, I, H) for a recurrence, (T, N) for
    a scan; ``cell``: a name of ``tsrnn.ops.recurrence.cells.CELLS`` or None; ``grad``: autograd will run the
    backward of this call; ``traces``: the caller wants per-step gate traces (the forget gates, the
    pLSTM's reset gates and ages); ``packed``: sequences of several lengths (``tsrnn.ops.recurrence.packing``),
    T the longest; ``projected``: an LSTM layer with torch.nn.LSTM's projection (proj_size > 0; H
    is then the size of c, the recurrence's h has P units)."""

    op: str
    device: torch.device
    dtype: torch.dtype
    shape: tuple[int, ...]
    cell: str | None = None
    bias: bool = True
    grad: bool = False
    traces: bool = False
    packed: bool = False
    projected: bool = False

    def __post_init__(self):
        # torch.jit.trace hands sizes over as tensors; only the choice of path depends on them.
        if any(isinstance(s, torch.Tensor) for s in self.shape):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def math_dtype(self) -> torch.dtype:
        """What the call computes in (``tsrnn.ops.recurrence.cells.math_dtype``)."""
        return math_dtype(self.dtype)

    def key(self) -> tuple:
        """The tuning key, a shape class: T and (for a recurrence) B as power-of-two buckets, the
        other sizes exactly, and the products' precision (``tsrnn.precision.products``)."""
        steps, *rest = self.shape
        if self.op == "recurrence":
            rest[0] = rest[0].bit_length()
        return (self.op, self.device.type, self.device.index, self.dtype, self.cell, steps.bit_length(),
                *rest, self.bias, self.grad, self.traces, self.packed, self.projected,
                precision.products(self.dtype, self.device))

    def recorded_key(self) -> str:
        """The key as ``tuned_choices`` and ``reuse_choices`` write it (``_recorded``)."""
        return _recorded(self.key())


def _recorded(key: tuple) -> str:
    """A call key without its device index, as text (every rank and GPU finds the same record)."""
    return repr(key[:2] + key[3:])


# run(path, dtype=None): the call's forward on ``path`` on detached copies of its inputs (cast to
# ``dtype`` if given); returns ({output name: tensor}, {input name: copy} of the inputs that need gradients).
Run = Callable[..., tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]]]

_warned: set[str] = set()


def warn_once(message: str) -> None:
    """A RuntimeWarning of ``message``, the first time this process asks for it only."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


TRANSFORMS = ("torch.func transforms (vmap, grad, jacrev, jvp, ...) run the reference loops only: the fused "
              "kernels have no batching or forward-mode rules; use backend='auto' or 'reference'")


def native_available() -> bool:
    """True when the compiled CPU kernels loaded."""
    return LOAD_ERROR is None


def triton_available() -> bool:
    """True when Triton imports (the kernels still need CUDA or TRITON_INTERPRET=1)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


# -- the conditions of each path beyond its ops and devices: None, or why it cannot serve ---------
def _always(call: Call) -> str | None:
    return None


def _compiled_cpu(call: Call) -> str | None:
    if LOAD_ERROR is not None:
        return f"the compiled extension tsrnn._C did not load ({LOAD_ERROR})"
    check.switch("TSRNN_CPU_PROFILE", default="0")  # read by the compiled loops (csrc/recurrence/cpu/phase_clock.cpp), checked here
    return None


def _torch_lstm(call: Call) -> str | None:
    if not CELLS[call.cell].torch_kernel:
        return f"torch's LSTM kernel runs the LSTM cell only, not {call.cell}"
    if call.traces:
        return "torch's LSTM kernel returns no forget-gate traces"
    if torch.compiler.is_compiling() and not torch.compiler.is_exporting():
        return "torch.compile does not trace torch's LSTM kernel"
    return None


def _planned(call: Call) -> tuple:
    """(device, cell, H, B, products), what a tensor-core plan reads of a call."""
    return call.device, call.cell, call.shape[3], call.shape[1], precision.products(call.dtype, call.device)


def _tensor_core(namespace: str) -> Callable[[Call], str | None]:
    """A tensor-core path's rule: tsrnn._cuda loaded, float32 math, a plan for the call."""

    def rule(call: Call) -> str | None:
        if CUDA_LOAD_ERROR is not None:
            return f"the extension tsrnn._cuda did not load ({CUDA_LOAD_ERROR})"
        if call.math_dtype != torch.float32:
            return "it computes in float32 only"
        return tensor_core_plans.refusal(namespace, *_planned(call))

    return rule


def _tensor_core_regime(namespace: str) -> Callable[[Call], tuple[int, ...]]:
    """The regime of a tensor-core kernel's call (``Path.regime``; ``tensor_core_plans.regime``)."""

    def regime(call: Call) -> tuple[int, ...]:
        return tensor_core_plans.regime(namespace, *_planned(call))

    return regime


@dataclass(frozen=True)
class Path:
    """One implementation of one or more ops. ``run``: {op: function(path, ...) running a call};
    ``devices``: the device types it runs on; ``family``: the backend that names it besides its
    own name ("native", "triton", None); ``kind``: "reference", "torch_lstm" (tried first by
    "auto", trusted as the reference is) or "operator" (the ops of ``namespace``); ``rule``: its
    other conditions; ``projection``: an operator path's x w^T + b; ``products``: its products'
    precision for (dtype, device); ``fallback``: "auto" offers it only where no other path of the
    device serves; ``regime``: a tuple of ints naming which of its code runs a call (None: one),
    "auto" verifying a path once per regime rather than per shape."""

    name: str
    run: Mapping[str, Callable]
    devices: tuple[str, ...] | None  # None: any device
    family: str | None
    kind: str
    rule: Callable[[Call], str | None]
    namespace: str | None = None
    projection: Callable | None = None
    products: Callable[[torch.dtype, torch.device], str] = precision.products
    fallback: bool = False
    regime: Callable[[Call], tuple[int, ...]] | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        """The ops this path runs."""
        return tuple(self.run)

    @property
    def operators(self):
        """``torch.ops.<namespace>``: the operators of an operator path."""
        return getattr(torch.ops, self.namespace)

    def why_not(self, call: Call) -> str | None:
        """None if this path can serve ``call`` (an op of ``ops``), else the reason it cannot."""
        device = call.device.type
        triton = self.family == "triton"
        if triton and not triton_available():
            return "it needs the triton package (pip install triton)"
        if triton:
            refused = checks.triton_refuses(device)
            if refused:
                return refused
        elif self.devices is not None and device not in self.devices:
            return f"it runs on {self.devices[0].upper()} tensors, got {device} tensors"
        if call.projected and self.kind == "operator":
            return ("its kernels recur on h of hidden_size units: a layer with proj_size > 0 runs on torch's "
                    "LSTM kernel (onednn, cudnn) or the reference")
        return self.rule(call)


def op(path: str, name: str):
    """The operator ``name`` (e.g. "recurrence_forward") of an operator path."""
    return getattr(REGISTRY[path].operators, name)


_TENSOR_CORE_PROJECTION = projection.tensor_core_projection()  # the tensor-core GEMMs of tsrnn._cuda (cuBLAS)

# In order of preference after torch's own LSTM kernels, which "auto" tries first on their device.
REGISTRY = {path.name: path for path in (
    Path(name="reference", run={"recurrence": recurrence_paths.run_reference, "linear_scan": scan_paths.run_reference},
         devices=None, family=None, kind="reference", rule=_always),
    Path(name="cpu", run={"recurrence": recurrence_paths.run_operator, "linear_scan": scan_paths.run_operator},
         devices=("cpu",), family="native", kind="operator", rule=_compiled_cpu,
         namespace=library.COMPILED, projection=projection.cpu_projection),
    Path(name="onednn", run={"recurrence": recurrence_paths.run_torch_lstm},
         devices=("cpu",), family=None, kind="torch_lstm", rule=_torch_lstm),
    Path(name="cudnn", run={"recurrence": recurrence_paths.run_torch_lstm},
         devices=("cuda",), family=None, kind="torch_lstm", rule=_torch_lstm),
    Path(name="cuda_cluster", run={"recurrence": recurrence_paths.run_operator},
         devices=("cuda",), family="native", kind="operator", rule=_tensor_core(CLUSTER),
         namespace=CLUSTER, projection=_TENSOR_CORE_PROJECTION, regime=_tensor_core_regime(CLUSTER)),
    Path(name="cuda_grid", run={"recurrence": recurrence_paths.run_operator},
         devices=("cuda",), family="native", kind="operator", rule=_tensor_core(GRID),
         namespace=GRID, projection=_TENSOR_CORE_PROJECTION, regime=_tensor_core_regime(GRID)),
    Path(name="triton_step", run={"recurrence": recurrence_paths.run_operator},
         devices=("cuda",), family="triton", kind="operator", rule=_always,
         namespace="tsrnn_triton_step", projection=_TENSOR_CORE_PROJECTION, fallback=True),
    Path(name="triton_scan", run={"linear_scan": scan_paths.run_operator},
         devices=("cuda",), family="triton", kind="operator", rule=_always,
         namespace="tsrnn_triton_scan"),
)}
PATHS = {op: tuple(name for name, path in REGISTRY.items() if op in path.ops) for op in ("recurrence", "linear_scan")}


def paths_on(device_type: str, op: str) -> list[str]:
    """The fused paths of ``op`` for tensors of ``device_type`` ("cpu", "cuda"), in registry order."""
    return [name for name in PATHS[op] if REGISTRY[name].devices is not None and device_type in REGISTRY[name].devices]


def why_not(path: str, call: Call) -> str | None:
    """None if ``path`` can serve ``call``, else the reason it cannot."""
    if path not in PATHS[call.op]:
        return f"{path!r} is not a path of {call.op} (those are {list(PATHS[call.op])})"
    return REGISTRY[path].why_not(call)
