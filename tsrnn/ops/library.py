"""How tsrnn's operators are registered with torch.library, shared by every op folder.

Each op (``tsrnn.ops.recurrence``, ``tsrnn.ops.linear_scan``) is a ``{op}_forward`` /
``{op}_backward`` pair of schemas defined once per namespace: ``torch.ops.tsrnn.*``, whose kernels
are compiled (csrc/: ``tsrnn._C``, CPU tensors), ``torch.ops.tsrnn_cluster.*`` and
``tsrnn_grid.*``, whose kernels are the tensor-core ones of ``tsrnn._cuda`` (CUDA tensors), and one
namespace per Triton path, whose kernels are Python functions imported on their first call.
With ``register_autograd`` and ``register_fake``, ``torch.compile`` traces a recurrence as one
node. Second derivatives: docs/backends.md, "Double backward" (``first_order_only`` on CUDA).
An eager call goes through ``call``, the same formula as one ``torch.autograd.Function`` without
the dispatcher's Python autograd wrapper (its cost: bench/RESULTS.md).
"""
from __future__ import annotations

import contextlib
import importlib

import torch

from tsrnn import _validation as check

COMPILED = "tsrnn"  # the namespace of the compiled kernels (tsrnn._C, tsrnn._cuda)
_LIBRARIES: dict[str, torch.library.Library] = {}
# (namespace, op name) -> (the op, its eager autograd.Function's apply)
_EAGER: dict[tuple[str, str], tuple] = {}
_APPLY = torch._C._FunctionBase.__dict__["apply"]


def library(namespace: str) -> torch.library.Library:
    """The ``torch.library.Library`` fragment through which tsrnn defines ops in ``namespace``."""
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _LIBRARIES[namespace]


def define(namespace: str, op: str, schemas: dict, fake_forward, fake_backward, autograd, setup,
           kernels: str | None = None) -> None:
    """Defines ``{op}_forward`` and ``{op}_backward`` in ``namespace``: fake kernels, the autograd
    formula ``autograd(backward_op)`` with ``setup``, and with ``kernels`` (a module name) CPU and
    CUDA kernels from that module's functions of the same names."""
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
    # Function.apply's C++ half: its Python half has nothing to do for ``call``.
    _EAGER[namespace, name] = (op, _APPLY.__get__(None, function))


def call(namespace: str, name: str, *args):
    """``torch.ops.<namespace>.<name>(*args)``, every argument given: eagerly through the op's
    autograd Function (or below autograd when no gradient flows); through the dispatcher while
    torch.compile, torch.export or torch.jit.trace record, or under torch.func transforms."""
    op, apply = _EAGER[namespace, name]
    if not check.eager():
        return op(*args)
    if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
        return apply(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def needs_grad(*tensors) -> bool:
    """Whether autograd will record a call on ``tensors`` (None entries allowed)."""
    if not torch.is_grad_enabled():
        return False
    if torch.compiler.is_compiling():
        return any(t is not None and t.requires_grad for t in tensors)
    return torch._C._any_requires_grad(*tensors)


def without_autocast(like: torch.Tensor):
    """Autocast off for ``like``'s device type (a backward computes in its forward's dtypes)."""
    if like.device.type not in ("cpu", "cuda"):
        return contextlib.nullcontext()
    return torch.autocast(like.device.type, enabled=False)


DOUBLE_BACKWARD = ("tsrnn: on CUDA the fused {op} kernels compute first derivatives only (as torch.nn.LSTM's "
                   "cuDNN kernel), and this backward was differentiated again (create_graph=True: a gradient "
                   "penalty, a Hessian-vector product); run this layer with backend='reference', whose step loops "
                   "torch differentiates to any order (on the CPU every path does)")


class _FirstOrderOnly(torch.autograd.Function):
    """``tensors`` unchanged, as results that depend on ``anchors`` (the forward's saved output and
    the incoming gradients), whose backward raises ``message``: so a second derivative through a
    fused kernel's backward raises instead of treating its results as constants."""

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
    """The tensors' CUDA device as current (Triton launches on the current one); no flag touched."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
    return contextlib.nullcontext() if device is None else torch.cuda.device(device)


def triton_kernel(module: str, name: str):
    """Calls ``module.name``, imported at the first call (TRITON_INTERPRET must be set before)."""

    def kernel(*args):
        with _on_device(args):
            return getattr(importlib.import_module(module), name)(*args)

    return kernel
