"""One harness that checks every path of a recurrent layer against the float64 reference, shared
by the tests, ``tsrnn selftest`` and bench/gpu_report.py: ``layer_args`` (a layer's random float64
arguments), ``compare`` (one layer on a path against the reference on the same rounded values:
outputs, final states, gradients, within ``tsrnn.backend.tolerance``'s rows, re-exported here),
``compare_module`` (a whole two-layer module, ``MODULE_CASES``), and the shape tables (``SHAPES``,
every path's; the named sets after it, one kernel's edges each).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from tsrnn import backend, functional, precision, reference
from tsrnn.modules import LSTM, PowerLawLSTM, Recurrent
from tsrnn.ops.recurrence import cells
from tsrnn.backend.tolerance import GRAD_TOLERANCE, TOLERANCE, rows  # the tests import the tables from here
from tsrnn.backend.tolerance import error as _error

# (T, B, I, H) every path is checked on: one step, one row, odd sizes, H past the CPU kernel's
# per-thread slice (67, 130) and the GPU's SM count (301).
SHAPES = [(1, 1, 1, 1), (1, 4, 3, 5), (7, 1, 5, 3), (13, 3, 7, 9), (5, 2, 33, 17), (3, 2, 5, 67),
          (4, 3, 7, 130), (3, 2, 4, 301)]
# The CPU GEMM kernels' edges (csrc/gemm/panel_gemm.h, blocked_gemm.h): B past the AVX-512 and
# AVX2 tiles, G*H ending in partial panels, H over two threads' slices, T*B past 1024-deep blocks.
CPU_GEMM_SHAPES = [(3, 15, 4, 9), (2, 29, 3, 41), (3, 37, 5, 130), (30, 37, 5, 130)]
# Those the Triton interpreter runs in seconds.
INTERPRETED_SHAPES = [s for s in SHAPES if s[3] <= 67]
# bench/gpu_report.py's timed shapes, checked before they are timed.
TARGET_SHAPES = [(70, 20, 400, 400), (50, 128, 128, 128)]
# bench/gpu_report.py --quick's (the tests run it on CPU).
QUICK_SHAPES = [(5, 2, 3, 8)]
# ``tsrnn selftest``'s float64 check of every CPU path.
SELFTEST_SHAPE = (9, 3, 5, 7)
# (T, N...) of the linear scan: one step and one channel, odd sizes, trailing dimensions (into N).
SCAN_SHAPES = [(1, 1), (5, 3), (7, 3), (17, 2, 5)]
# N past one OpenMP task of the compiled CPU scan (csrc/linear_scan/cpu.cpp: 4096 channels).
CPU_SCAN_SHAPES = [(300, 4099)]
# The Triton scan's edges (tsrnn/ops/linear_scan/triton.py: 64 channels a program, 16-step chunks).
TRITON_SCAN_SHAPES = [(16, 64), (37, 70), (50, 2, 33)]
# On a GPU only: 1000 steps over 9 programs, the last with one channel.
GPU_SCAN_SHAPES = [(1000, 513)]
# bench/gpu_report.py --quick: one step; T past a chunk and N past a program.
QUICK_SCAN_SHAPES = [(1, 7), (37, 70)]
DTYPES = [torch.float64, torch.float32, torch.bfloat16]
# Variable-length batches (``lengths=``): patterns of B lengths in [0, T] (``lengths_for``).
LENGTH_CASES = ("unsorted", "equal", "one long", "ones", "with zeros")
# (T, B, I, H) of the lengths checks: several rows of odd sizes; one row.
LENGTH_SHAPES = [(7, 5, 3, 6), (4, 1, 2, 3)]
LAYER_PATHS = [p for p in backend.PATHS["recurrence"] if backend.REGISTRY[p].kind != "reference"]


def layer_args(cell: str, T: int, B: int, I: int, H: int, seed: int = 0, dt: bool = False) -> dict:
    """Random float64 arguments of one layer of ``cell``, keyed by name: x, h0 and the cell's
    initial states (``Cell.initial_states``), w_ih, w_hh, bias, its parameters (``Cell.params``,
    in [0.05, 0.95)) and, if asked for and the cell has one, its step input (in [0.1, 2.1)); the
    states of ``Cell.math_states`` (the age) in [0, 3)."""
    described = cells.get(cell)
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    rows = described.num_gates * H
    args = {"x": randn(T, B, I), "h0": randn(B, H, scale=0.5)}
    kept = described.initial_math_states  # drawn after the weights (the draws of every test's sample)
    args.update({name: randn(B, H) for name in described.initial_states[1:] if name not in kept})
    args.update(w_ih=randn(rows, I, scale=1 / math.sqrt(I)), w_hh=randn(rows, H, scale=1 / math.sqrt(H)),
                bias=randn(rows, scale=0.5))
    args.update({name: torch.rand(B, H, generator=g, dtype=torch.float64) * 3 for name in kept})
    for name in described.params:
        args[name] = torch.rand(H, generator=g, dtype=torch.float64) * 0.9 + 0.05
    if described.step_input is not None:
        args[described.step_input] = torch.rand(T, B, generator=g, dtype=torch.float64) * 2 + 0.1 if dt else None
    return args


def lengths_for(case: str, T: int, B: int, seed: int = 0) -> torch.Tensor:
    """(B,) int64 lengths in [0, T] of one of ``LENGTH_CASES``; "unsorted" and "with zeros" draw
    them (the longest is T; "with zeros" has a 0 where B > 1), "one long" puts its row of T in
    the middle."""
    g = torch.Generator().manual_seed(seed)
    if case == "equal":
        return torch.full((B,), T, dtype=torch.int64)
    if case == "ones":
        return torch.ones(B, dtype=torch.int64)
    if case == "one long":
        lengths = torch.ones(B, dtype=torch.int64)
        lengths[B // 2] = T
        return lengths
    if case not in ("unsorted", "with zeros"):
        raise ValueError(f"case must be one of {LENGTH_CASES}, got {case!r}")
    low = 0 if case == "with zeros" else 1
    lengths = torch.randint(low, T + 1, (B,), generator=g)
    lengths[torch.randint(0, B, (1,), generator=g)] = T
    if case == "with zeros" and B > 1:
        lengths[(int(lengths.argmax()) + 1) % B] = 0
    return lengths


def differentiable(args: dict) -> list[str]:
    """The names of the arguments that get gradients (a step input and lengths are data)."""
    data = {cell.step_input for cell in cells.CELLS.values()}
    return [k for k, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and k not in data]


def recurrence_args(cell: str, args: dict) -> dict:
    """``layer_args``'s dict as the keyword arguments of ``functional.recurrence`` /
    ``reference.layer``: the cell's constants from the dict by name where given (``lengths`` kept)."""
    described = cells.get(cell)
    named = {"x": args["x"], "h0": args["h0"], "states": tuple(args[n] for n in described.initial_states[1:]),
             "w_ih": args["w_ih"], "w_hh": args["w_hh"], "bias": args["bias"],
             "params": tuple(args[n] for n in described.params),
             "steps": args.get(described.step_input) if described.step_input else None,
             "constants": tuple(args.get(name, default) for name, default in described.constants)}
    if "lengths" in args:
        named["lengths"] = args["lengths"]
    return named


def run_layer(cell: str, args: dict, backend_name: str):
    """``(out, final states)`` of ``functional.recurrence`` on a path or requested backend."""
    return functional.recurrence(cell, **recurrence_args(cell, args), backend=backend_name)


def reference_layer(cell: str, args: dict):
    """``(out, final states)`` of the reference loop (``reference.layer``)."""
    named = recurrence_args(cell, args)
    lengths = named.pop("lengths", None)
    if lengths is not None:
        lengths = torch.as_tensor(lengths)
    out, state, _ = reference.layer(cells.get(cell), **named, lengths=lengths)
    return out, state


def loss_of(out, state) -> torch.Tensor:
    """A float64 loss that reaches every step of h and every final state."""
    weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64, device=out.device).view(out.shape)
    return (out.double() * weights).sum() + sum(s.double().square().sum() for s in state)


def why_not(path: str, cell: str, shape, dtype, device) -> str | None:
    """None if ``path`` runs this layer on ``device``, else why not (tsrnn.backend's rule)."""
    if path not in backend.PATHS["recurrence"]:
        return f"{path!r} is not a recurrence path"
    call = backend.Call("recurrence", torch.device(device), dtype, tuple(shape), cell)
    return backend.why_not(path, call)


def gradcheck(path: str, cell: str, shape, device="cpu", seed: int = 0, lengths: list[int] | None = None,
              fast: bool = False, second_order: bool = False) -> bool:
    """``torch.autograd.gradcheck`` of the layer on ``path`` in float64 (out and every final state
    against every differentiable argument), padded or with ``lengths``; ``fast``: its fast mode (a
    random projection of the Jacobian, for the Triton interpreter); ``second_order``:
    ``gradgradcheck``, the second derivatives."""
    args = layer_args(cell, *shape, seed=seed, dt=cells.get(cell).step_input is not None)
    args = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    if lengths is not None:
        args["lengths"] = torch.tensor(lengths)
    names = differentiable(args)

    def layer(*tensors):
        out, state = run_layer(cell, {**args, **dict(zip(names, tensors))}, path)
        return out, *state

    check = torch.autograd.gradgradcheck if second_order else torch.autograd.gradcheck
    return check(layer, tuple(args[k].clone().requires_grad_() for k in names), fast_mode=fast)


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout."""
    if t.dim() >= 2:
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    return torch.stack([t, t], -1)[..., 0]


@dataclass
class Comparison:
    """Errors of one run against the reference; ``errors`` maps each output or gradient to
    (max abs error, bound)."""

    path: str
    cell: str
    shape: tuple
    dtype: torch.dtype
    errors: dict[str, tuple[float, float]]

    @property
    def ok(self) -> bool:
        return all(err <= bound for err, bound in self.errors.values())

    def worst(self, grads: bool) -> float:
        """The largest error as a fraction of its bound (<= 1 passes), over the outputs (False)
        or the gradients (True)."""
        return max((err / bound if bound > 0 else math.inf * (err > 0) for name, (err, bound) in self.errors.items()
                    if name.startswith("grad") == grads), default=0.0)

    def failures(self) -> str:
        return "; ".join(f"{n}: {e:.3e} > {b:.3e}" for n, (e, b) in self.errors.items() if e > b)


@contextlib.contextmanager
def registered(record: backend.Path):
    """The registry with one more recurrence path, ``record`` (an emulated kernel, a path with its
    products fixed), while the block runs; the registry and every remembered choice as before after."""
    saved = dict(backend.REGISTRY), dict(backend.PATHS)
    backend.REGISTRY[record.name] = record
    backend.PATHS["recurrence"] = backend.PATHS["recurrence"] + (record.name,)
    backend.forget()
    try:
        yield record.name
    finally:
        backend.forget()
        backend.REGISTRY.clear()
        backend.REGISTRY.update(saved[0])
        backend.PATHS.clear()
        backend.PATHS.update(saved[1])


def compare(path: str, cell: str, shape, dtype: torch.dtype = torch.float64, device="cpu", dt: bool = False,
            seed: int = 0, contiguous: bool = True, grads: bool = True, lengths: str | None = None,
            products: str | None = None) -> Comparison:
    """Run the layer on ``path`` in ``dtype`` on ``device`` and the reference in float64 on the
    same rounded values; ``contiguous=False`` passes every tensor in a strided layout; ``lengths``
    a case of ``LENGTH_CASES``: the rows of that many steps (the reference's masked loop). The
    bounds are ``rows(dtype, products)``, the products' precision ``tsrnn.precision.products`` of
    the dtype and device where None (TF32 on CUDA with torch's default flags)."""
    args = layer_args(cell, *shape, seed=seed, dt=dt)
    if lengths is not None:
        args["lengths"] = lengths_for(lengths, shape[0], shape[1], seed)
    names = differentiable(args)
    rounded = {k: (v.to(dtype).double() if k in names else v) for k, v in args.items()}
    ours = {k: (v.to(device, dtype) if k in names else v.to(device) if isinstance(v, torch.Tensor) else v)
            for k, v in rounded.items()}
    if not contiguous:
        ours = {k: (_strided(v) if isinstance(v, torch.Tensor) else v) for k, v in ours.items()}
    ours = {k: (v.detach().requires_grad_(grads) if k in names else v) for k, v in ours.items()}
    theirs = {k: (v.clone().requires_grad_(grads) if k in names else v) for k, v in rounded.items()}
    out, state = run_layer(cell, ours, path)
    out_r, state_r = reference_layer(cell, theirs)
    value_row, grad_row = rows(dtype, products or precision.products(dtype, torch.device(device)))
    errors = {"out": _error(out, out_r, value_row)}
    errors.update({f"{n}_n": _error(s, s_r, value_row)
                   for n, s, s_r in zip(("h", *cells.get(cell).states), state, state_r)})
    if out.dtype != dtype:
        errors["out dtype"] = (math.inf, 0.0)
    if grads:
        got = torch.autograd.grad(loss_of(out, state), [ours[k] for k in names])
        want = torch.autograd.grad(loss_of(out_r, state_r), [theirs[k] for k in names])
        errors.update({f"grad {k}": _error(g, w, grad_row) for k, g, w in zip(names, got, want)})
    return Comparison(path, cell, tuple(shape), dtype, errors)


def compare_scan(path: str, shape, dtype: torch.dtype = torch.float64, device="cpu", seed: int = 0) -> Comparison:
    """``functional.linear_scan`` on ``path`` against ``reference.linear_scan`` in float64, forward
    and the gradients of a, u and x0; a in [0, 1), u and x0 standard normal, shape (T, ...)."""
    g = torch.Generator().manual_seed(seed)
    values = {"a": torch.rand(shape, generator=g, dtype=torch.float64),
              "u": torch.randn(shape, generator=g, dtype=torch.float64),
              "x0": torch.randn(shape[1:], generator=g, dtype=torch.float64)}
    ours = {k: v.to(device, dtype).requires_grad_() for k, v in values.items()}
    theirs = {k: v.to(dtype).double().requires_grad_() for k, v in values.items()}
    x = functional.linear_scan(**ours, backend=path)
    x_r = reference.linear_scan(**theirs)
    errors = {"x": _error(x, x_r, TOLERANCE[dtype])}
    weights = torch.randn(shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((x.double() * weights.to(device)).sum(), list(ours.values()))
    want = torch.autograd.grad((x_r * weights).sum(), list(theirs.values()))
    errors.update({f"grad {k}": _error(a, b, GRAD_TOLERANCE[dtype]) for k, a, b in zip(ours, got, want)})
    return Comparison(path, "linear_scan", tuple(shape), dtype, errors)


# Whole modules with torch.nn.LSTM's options (``compare_module``): (kind, bidirectional, proj_size,
# input layout), each on every path that takes it. "mts" is tsrnn.LSTM with fixed timescales in its
# first layer; "cell:<name>" tsrnn.Recurrent of that cell (every cell it runs that torch's LSTM
# kernel does not); "packed" a PackedSequence, "lengths" a padded batch with lengths= ("unsorted").
MODULE_CASES = [("lstm", True, 0, "padded"), ("lstm", True, 0, "packed"), ("lstm", False, 3, "padded"),
                ("lstm", True, 3, "lengths"), ("mts", True, 0, "lengths"), ("plstm", True, 0, "padded"),
                ("plstm", True, 0, "packed")] + [
    (f"cell:{name}", True, 0, layout) for name, cell in cells.CELLS.items()
    if not (cell.params or cell.step_input or cell.torch_kernel) for layout in ("padded", "packed")]
MODULE_SHAPES = [(5, 3, 4, 6), (1, 1, 2, 5)]  # (T, B, I, H): odd sizes; one step and one row


def module_for(kind: str, shape, bidirectional: bool = False, proj_size: int = 0, backend: str = "auto",
               dtype: torch.dtype = torch.float64, seed: int = 0):
    """A two-layer module of ``kind`` ("lstm", "mts", "plstm", "cell:<name>") for (T, B, I, H)
    ``shape``, its parameters drawn from ``seed``."""
    _, _, input_size, hidden = shape
    torch.manual_seed(seed)
    options = dict(num_layers=2, bidirectional=bidirectional, backend=backend, dtype=dtype)
    if kind == "plstm":
        return PowerLawLSTM(input_size, hidden, **options)
    if kind.startswith("cell:"):
        return Recurrent(input_size, hidden, kind.removeprefix("cell:"), **options)
    timescales = [torch.linspace(1.5, 500.0, hidden), None] if kind == "mts" else None
    return LSTM(input_size, hidden, proj_size=proj_size, timescales=timescales, **options)


def compare_module(path: str, kind: str, shape, dtype: torch.dtype = torch.float64, bidirectional: bool = False,
                   proj_size: int = 0, layout: str = "padded", device="cpu", seed: int = 0,
                   products: str | None = None) -> Comparison:
    """A two-layer module of ``kind`` (``module_for``) on ``path`` in ``dtype`` on ``device``
    against the same module on the reference loops in float64 with its weights rounded to
    ``dtype``: the output, every final state and the gradients of the input and of every
    parameter (the loss of ``loss_of``), within ``rows(dtype, products)``. ``layout``: "padded",
    "lengths" (``lengths_for("unsorted")``) or "packed" (a PackedSequence of those lengths); the
    pLSTM gets Δt in [0.1, 2.1)."""
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

    steps, batch, input_size, _ = shape
    ours = module_for(kind, shape, bidirectional, proj_size, path, dtype, seed).to(device)
    theirs = module_for(kind, shape, bidirectional, proj_size, "reference", torch.float64, seed)
    theirs.load_state_dict({k: v.double().cpu() for k, v in ours.state_dict().items()})
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, batch, input_size, generator=g, dtype=torch.float64).to(dtype).double()
    inputs = {}
    if kind == "plstm":
        inputs["dt"] = torch.rand(steps, batch, generator=g, dtype=torch.float64) * 2 + 0.1
    lengths = lengths_for("unsorted", steps, batch, seed) if layout != "padded" else None

    def run(module, x, dev, dt_type):
        x = x.to(dev, dt_type).requires_grad_()
        extra = {k: v.to(dev) for k, v in inputs.items()}
        if layout == "packed":
            packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
            if "dt" in extra:
                extra["dt"] = pack_padded_sequence(extra["dt"], lengths, enforce_sorted=False)
            out, state = module(packed, **extra)
        else:
            out, state = module(x, lengths=lengths, **extra)
        out = out.data if isinstance(out, PackedSequence) else out
        params = [p for p in module.parameters()]
        grads = torch.autograd.grad(loss_of(out, state), [x, *params])
        return out, state, dict(zip(["x", *(n for n, _ in module.named_parameters())], grads))

    out, state, grads = run(ours, x, device, dtype)
    out_r, state_r, grads_r = run(theirs, x, "cpu", torch.float64)
    value_row, grad_row = rows(dtype, products or precision.products(dtype, torch.device(device)))
    errors = {"out": _error(out, out_r, value_row)}
    names = ("h", "c", "a")
    errors.update({f"{n}_n": _error(s, s_r, value_row) for n, s, s_r in zip(names, state, state_r)})
    errors.update({f"grad {k}": _error(grads[k], grads_r[k], grad_row) for k in grads_r})
    label = f"{kind}{' bidirectional' if bidirectional else ''}{f' proj {proj_size}' if proj_size else ''} {layout}"
    return Comparison(path, label, tuple(shape), dtype, errors)


def module_why_not(path: str, kind: str, shape, proj_size: int, dtype: torch.dtype, device="cpu") -> str | None:
    """None if ``path`` runs the layers of a module of ``kind`` for (T, B, I, H) ``shape`` with
    ``proj_size``, else why not."""
    cell = kind.removeprefix("cell:") if kind.startswith("cell:") else (
        "lstm" if kind in ("lstm", "mts") else "plstm_coupled")
    call = backend.Call("recurrence", torch.device(device), dtype, tuple(shape), cell, projected=proj_size > 0)
    return backend.why_not(path, call)
