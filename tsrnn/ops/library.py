"""How tsrnn's operators are registered with torch.library, shared by every op folder.

Each op (``tsrnn.ops.recurrence``, ``tsrnn.ops.linear_scan``) is a ``{op}_forward`` /
``{op}_backward`` pair of schemas defined once per namespace: ``torch.ops.tsrnn.*``, whose kernels
are compiled (csrc/: ``tsrnn._C``, CPU tensors), ``torch.ops.tsrnn_cluster.*`` and
``tsrnn_grid.*``, whose kernels are the tensor-core ones of ``tsrnn._cuda`` (CUDA tensors), and one
namespace per Triton path, whose kernels are Python functions imported on their first call.
Registering the backward with ``torch.library.register_autograd`` and the shapes with
``register_fake`` lets ``torch.compile`` trace a module through a whole recurrence as one node.
A backward that is itself differentiated (create_graph=True) recomputes the layer through the
reference steps on CPU tensors (``tsrnn.ops.recurrence.recompute``; the scan's backward is torch
ops then); on CUDA tensors the fused recurrence kernels compute first derivatives only, as
torch.nn.LSTM's cuDNN kernel, and a second derivative through them raises (``first_order_only``).

An eager call goes through ``call``, not the dispatcher's Python autograd kernel: the same setup
and backward as one ``torch.autograd.Function`` whose forward runs the op's kernel below autograd.
torch.library's Python autograd wrapper redispatches on every call (its cost: bench/RESULTS.md);
traced, compiled or transformed calls keep the dispatcher, which records the op as one node.
"""
from __future__ import annotations

import contextlib
import importlib

import torch

from tsrnn import _validation as check

COMPILED = "tsrnn"  # the namespace of the compiled kernels (tsrnn._C, tsrnn._cuda)
_LIBRARIES: dict[str, torch.library.Library] = {}
# (namespace, op name) -> (the op, the apply of the autograd.Function that runs it eagerly with its formula)
_EAGER: dict[tuple[str, str], tuple] = {}
_APPLY = torch._C._FunctionBase.__dict__["apply"]


def library(namespace: str) -> torch.library.Library:
    """The ``torch.library.Library`` fragment through which tsrnn defines ops in ``namespace``."""
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _LIBRARIES[namespace]


def define(namespace: str, op: str, schemas: dict, fake_forward, fake_backward, autograd, setup,
           kernels: str | None = None) -> None:
    """Defines ``{op}_forward`` and ``{op}_backward`` in ``namespace`` with their fake kernels and
    the forward's autograd formula (``autograd(backward_op)``, ``setup`` its setup_context); with
    ``kernels`` (a module name), their CPU and CUDA kernels are that module's functions of the
    same names (imported at the first call)."""
    lib = library(namespace)
    forward, backward = f"{op}_forward", f"{op}_backward"
    lib.define(forward + schemas[forward])
    lib.define(backward + schemas[backward])
    torch.library.register_fake(f"{namespace}::{forward}", fake_forward, lib=lib)
    torch.library.register_fake(f"{namespace}::{backward}", fake_backward, lib=lib)
    register_autograd(namespace, forward, autograd(getattr(getattr(torch.ops, namespace), backward)), setup, lib)
    if kernels is not None:
        for name in (forward, backward):
            for device in ("CPU", "CUDA"):
                lib.impl(name, triton_kernel(kernels, name), device)


def register_autograd(namespace: str, name: str, backward, setup, lib: torch.library.Library) -> None:
    """Registers ``backward`` (with ``setup`` its setup_context) as the autograd formula of
    ``namespace::name`` for the dispatcher, and as the eager Function of ``call``."""
    torch.library.register_autograd(f"{namespace}::{name}", backward, setup_context=setup, lib=lib)
    op = getattr(getattr(torch.ops, namespace), name)

    def forward(ctx, *args):
        with torch._C._AutoDispatchBelowAutograd():
            result = op(*args)
        setup(ctx, args, result)
        return result

    function = type(f"{namespace}_{name}", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    # Function.apply's C++ half: its Python half only binds defaults (there are none) and unwraps
    # the dead wrappers of finished torch.func transforms, which ``call`` leaves to the dispatcher.
    _EAGER[namespace, name] = (op, _APPLY.__get__(None, function))


def call(namespace: str, name: str, *args):
    """``torch.ops.<namespace>.<name>(*args)`` with every argument given (setup functions read
    them all): eagerly, the kernel below autograd, through the op's autograd Function where a
    gradient will flow; through the dispatcher while torch.compile, torch.export or
    torch.jit.trace record, or under torch.func transforms."""
    op, apply = _EAGER[namespace, name]
    if not check.eager():
        return op(*args)
    if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
        return apply(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def needs_grad(*tensors) -> bool:
    """Whether autograd will record a call on ``tensors`` (None entries allowed): grad mode on and
    one of them requires grad (torch's C++ test eagerly; a loop that torch.compile can trace)."""
    if not torch.is_grad_enabled():
        return False
    if torch.compiler.is_compiling():
        return any(t is not None and t.requires_grad for t in tensors)
    return torch._C._any_requires_grad(*tensors)


def without_autocast(like: torch.Tensor):
    """Autocast off for ``like``'s device type: a backward run inside an autocast region computes
    in the dtypes its forward saved, as the forward did (tsrnn.precision)."""
    if like.device.type not in ("cpu", "cuda"):
        return contextlib.nullcontext()
    return torch.autocast(like.device.type, enabled=False)


DOUBLE_BACKWARD = ("tsrnn: on CUDA the fused {op} kernels compute first derivatives only (as torch.nn.LSTM's "
                   "cuDNN kernel), and this backward was differentiated again (create_graph=True: a gradient "
                   "penalty, a Hessian-vector product); run this layer with backend='reference', whose step loops "
                   "torch differentiates to any order (on the CPU every path does)")


class _FirstOrderOnly(torch.autograd.Function):
    """``tensors`` unchanged, as results that depend on ``anchors``, whose backward raises
    ``message``: a fused kernel's backward run under create_graph=True. Without it torch would
    treat the kernel's results as constants, and a second derivative would silently miss every
    term through them. The anchors, the forward's saved output and the incoming gradients, put
    this node on every path from the results back to what the forward or the gradients depend on."""

    @staticmethod
    def forward(ctx, message, num_anchors, *tensors):
        ctx.message = message
        return tuple(t.view_as(t) for t in tensors[num_anchors:])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def first_order_only(op: str, anchors, results: tuple) -> tuple:
    """``results`` (tensors or None) as they are or, when the backward that computed them is itself
    being recorded (create_graph=True), as results whose own backward raises DOUBLE_BACKWARD."""
    if not torch.is_grad_enabled():
        return results
    present = [i for i, r in enumerate(results) if r is not None]
    anchors = [a for a in anchors if a is not None and a.requires_grad]
    marked = _FirstOrderOnly.apply(DOUBLE_BACKWARD.format(op=op), len(anchors), *anchors,
                                   *(results[i] for i in present))
    results = list(results)
    for i, r in zip(present, marked):
        results[i] = r
    return tuple(results)


def _on_device(args):
    """Triton launches on the current CUDA device, not the tensors' one: run on the tensors' device.
    No torch flag is touched: the drivers' own torch GEMMs (dh, dW_hh) round their operands to the
    call's precision (``tsrnn.precision.round_operands``)."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
    return contextlib.nullcontext() if device is None else torch.cuda.device(device)


def triton_kernel(module: str, name: str):
    """Calls ``module.name``, imported at the first call: importing triton costs a second, and
    TRITON_INTERPRET must be set before the kernels' module is imported."""

    def kernel(*args):
        with _on_device(args):
            return getattr(importlib.import_module(module), name)(*args)

    return kernel
