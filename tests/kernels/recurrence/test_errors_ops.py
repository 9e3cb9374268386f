"""The operators (torch.ops.tsrnn.recurrence_forward / recurrence_backward and
linear_scan_forward / linear_scan_backward, and the Triton scan's) called directly with bad
arguments: each raises RuntimeError("tsrnn: ...") naming the argument, and none crashes the process.

The checks of the public API in front of them: test_errors_modules.py, test_errors_functional.py.
"""
import faulthandler
import os
import signal
import time

import pytest
import torch

import tsrnn
from tsrnn import backend
from conftest import needs_native

OT, OB, OH = 3, 2, 4
F64 = torch.float64


def op_args(cell="lstm"):
    """Valid (cell, xg, w_hh, h0, state0, params, steps, constants, save) for recurrence_forward."""
    g = torch.Generator().manual_seed(0)
    G, S = tsrnn.ops.recurrence.cells.get(cell).num_gates, tsrnn.ops.recurrence.cells.get(cell).num_states
    power = cell != "lstm"
    return {
        "cell": cell,
        "xg": torch.randn(OT, OB, G * OH, generator=g, dtype=F64),
        "w_hh": torch.randn(G * OH, OH, generator=g, dtype=F64),
        "h0": torch.randn(OB, OH, generator=g, dtype=F64),
        "state0": torch.rand(S, OB, OH, generator=g, dtype=F64),
        "params": torch.rand(1, OH, generator=g, dtype=F64) if power else None,
        "steps": torch.rand(OT, OB, generator=g, dtype=F64) + 0.5 if power else None,
        "constants": [1e-3] if power else [],
        "save": True,
    }


def forward(args):
    return torch.ops.tsrnn.recurrence_forward(*args.values())


def backward_args(cell="lstm", save=True):
    args = op_args(cell)
    args["save"] = save
    h_all, state_n, state_all, saved = forward(args)
    return {
        "cell": cell, "grad_h": torch.ones_like(h_all), "grad_state_n": torch.ones_like(state_n),
        "w_hh": args["w_hh"], "h0": args["h0"], "state0": args["state0"], "h_all": h_all,
        "state_all": state_all, "saved": saved, "params": args["params"], "steps": args["steps"],
        "constants": args["constants"],
    }


def backward(args):
    return torch.ops.tsrnn.recurrence_backward(*args.values())


def _all_float(args, dtype):
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def _set(**changes):
    return lambda a: {**a, **{k: (fn(a[k]) if callable(fn) else fn) for k, fn in changes.items()}}


FORWARD_OP_CASES = {
    # id: (cell, mutate, match after "tsrnn: ")
    "unknown-cell": ("lstm", _set(cell="gru"), r"unknown cell 'gru'"),
    "empty-cell": ("lstm", _set(cell=""), r"unknown cell ''"),
    "int": ("lstm", lambda a: _all_float(a, torch.int64), r"the CPU kernels take float32 or float64, got Long"),
    "half": ("lstm", lambda a: _all_float(a, torch.float16), r"the CPU kernels take float32 or float64, got Half"),
    "bf16-plstm": ("plstm_coupled", lambda a: _all_float(a, torch.bfloat16), r"the CPU kernels take float32 or float64, got BFloat16"),
    "xg-2d": ("lstm", _set(xg=lambda v: v[0]), r"xg must have 3 dimensions"),
    "xg-columns": ("lstm", _set(xg=lambda v: v[..., :-1]), r"xg must be \[T, B, 16\]"),
    "xg-empty": ("lstm", _set(xg=lambda v: v[:0]), r"empty input"),
    "w_hh-rows": ("lstm", _set(w_hh=lambda v: v[:-1]), r"w_hh must be \[16, 4\]"),
    "w_hh-3d": ("lstm", _set(w_hh=lambda v: v[None]), r"w_hh must have 2 dimensions"),
    "w_hh-dtype": ("lstm", _set(w_hh=lambda v: v.float()), r"w_hh has dtype Float, expected Double"),
    "h0-batch": ("lstm", _set(h0=lambda v: v[:1]), r"h0 must be \[2, 4\]"),
    "h0-dtype": ("lstm", _set(h0=lambda v: v.float()), r"h0 has dtype Float"),
    "state0-count": ("lstm", _set(state0=lambda v: torch.cat([v, v])), r"state0 must be \[1, 2, 4\]"),
    "state0-2d": ("lstm", _set(state0=lambda v: v[0]), r"state0 must have 3 dimensions"),
    "state0-dtype": ("plstm_separate", _set(state0=lambda v: v.float()), r"state0 has dtype Float"),
    "params-for-lstm": ("lstm", _set(params=torch.rand(1, OH, dtype=F64)), r"params are not used for the cell lstm"),
    "steps-for-lstm": ("lstm", _set(steps=torch.ones(OT, OB, dtype=F64)), r"the cell lstm takes no step input \(steps\)"),
    "params-missing": ("plstm_coupled", _set(params=None), r"params are required for the cell plstm_coupled"),
    "params-length": ("plstm_coupled", _set(params=lambda v: v[:, :-1]), r"params must be \[1, 4\], got \[1, 3\]"),
    "params-count": ("plstm_coupled", _set(params=lambda v: torch.cat([v, v])), r"params must be \[1, 4\], got \[2, 4\]"),
    "params-1d": ("plstm_coupled", _set(params=lambda v: v[0]), r"params must have 2 dimensions"),
    "params-dtype": ("plstm_coupled", _set(params=lambda v: v.float()), r"params has dtype Float"),
    "steps-transposed": ("plstm_coupled", _set(steps=lambda v: v.t()), r"steps must be \[3, 2\], got \[2, 3\]"),
    "steps-3d": ("plstm_coupled", _set(steps=lambda v: v[..., None]), r"steps must have 2 dimensions"),
    "steps-dtype": ("plstm_separate", _set(steps=lambda v: v.float()), r"steps has dtype Float"),
    "constants-missing": ("plstm_coupled", _set(constants=[]), r"the cell plstm_coupled takes 1 constants, got 0"),
    "constants-for-lstm": ("lstm", _set(constants=[1e-3]), r"the cell lstm takes 0 constants, got 1"),
    "gates-coupled-as-separate": ("plstm_coupled", _set(cell="plstm_separate"), r"w_hh must be \[16, 4\]"),
}


@needs_native
@pytest.mark.parametrize("case", FORWARD_OP_CASES)
def test_recurrence_forward_op_errors(case):
    cell, mutate, match = FORWARD_OP_CASES[case]
    args = op_args(cell)
    forward(args)  # valid as built
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        forward(mutate(args))


BACKWARD_OP_CASES = {
    "unknown-cell": ("lstm", _set(cell="gru"), r"unknown cell 'gru'"),
    "saved-without-save": ("lstm", None, r"saved must be \[T, B, 16\], got \[0\] \(was the forward run with save=false\?\)"),
    "saved-shape": ("plstm_coupled", _set(saved=lambda v: v[:-1]), r"saved must be"),
    "h_all-2d": ("lstm", _set(h_all=lambda v: v[0]), r"h_all must be \[T, B, H\]"),
    "h_all-empty": ("lstm", _set(h_all=lambda v: v[:0]), r"empty input"),
    "state_all-shape": ("lstm", _set(state_all=lambda v: v[:-1]), r"state_all must be \[T, S, B, H\]"),
    "state_all-dtype": ("lstm", _set(state_all=lambda v: v.float()), r"state_all has dtype Float"),
    "grad_h-shape": ("lstm", _set(grad_h=lambda v: v[:-1]), r"grad_h must be \[3, 2, 4\], got \[2, 2, 4\]"),
    "grad_h-dtype": ("lstm", _set(grad_h=lambda v: v.float()), r"grad_h has dtype Float"),
    "grad_state_n-shape": ("plstm_coupled", _set(grad_state_n=lambda v: v[:, :1]),
                           r"grad_state_n must be \[2, 2, 4\], got \[2, 1, 4\]"),
    "grad_state_n-every-step": ("plstm_coupled", _set(grad_state_n=lambda v: v.expand(OT, *v.shape)),
                                r"grad_state_n must have 3 dimensions"),
    "w_hh-dtype": ("lstm", _set(w_hh=lambda v: v.float()), r"w_hh has dtype Float"),
    "params-missing": ("plstm_separate", _set(params=None), r"params are required for the cell plstm_separate"),
    "steps-shape": ("plstm_separate", _set(steps=lambda v: v[:-1]), r"steps must be \[3, 2\]"),
    "constants-count": ("plstm_separate", _set(constants=[1e-3, 1.0]), r"the cell plstm_separate takes 1 constants, got 2"),
    "half": ("lstm", lambda a: _all_float(a, torch.float16), r"the CPU kernels take float32 or float64, got Half"),
}


@needs_native
@pytest.mark.parametrize("case", BACKWARD_OP_CASES)
def test_recurrence_backward_op_errors(case):
    cell, mutate, match = BACKWARD_OP_CASES[case]
    if mutate is None:  # the forward ran with save=False
        args = backward_args(cell, save=False)
    else:
        args = backward_args(cell)
        backward(args)  # valid as built
        args = mutate(args)
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        backward(args)


@needs_native
def test_backward_through_autograd_after_save_false():
    args = op_args("plstm_coupled")
    args["save"] = False
    args["xg"].requires_grad_(True)
    h_all, _, _, saved = forward(args)
    assert saved.numel() == 0
    with pytest.raises(RuntimeError, match=r"tsrnn: saved must be .*save=false"):
        h_all.sum().backward()


@needs_native
def test_recurrence_backward_saved_dtype():
    args = backward_args("lstm")
    args["saved"] = args["saved"].float()
    with pytest.raises(RuntimeError, match=r"^tsrnn: saved"):
        backward(args)


SCAN_OP_CASES = {
    # id: (mutate (a, u, x0) -> (a, u, x0), match after "tsrnn: linear_scan ")
    "u-3d": (lambda a, u, x0: (a[None], u[None], x0), r"u must be \[T, N\]"),
    "u-1d": (lambda a, u, x0: (a[:, 0], u[:, 0], x0), r"u must be \[T, N\]"),
    "a-shape": (lambda a, u, x0: (a[:, :1], u, x0), r"a must match u"),
    "x0-shape": (lambda a, u, x0: (a, u, x0[:-1]), r"x0 must be \[5\], got \[4\]"),
    "x0-2d": (lambda a, u, x0: (a, u, x0[None]), r"x0 must be \[5\]"),
    "a-dtype": (lambda a, u, x0: (a.float(), u, x0), r"dtypes differ"),
    "x0-dtype": (lambda a, u, x0: (a, u, x0.float()), r"dtypes differ"),
    "int": (lambda a, u, x0: (a.long(), u.long(), x0.long()), r"takes float32 or float64, got (Long|torch.int64)"),
    "half": (lambda a, u, x0: (a.half(), u.half(), x0.half()), r"takes float32 or float64, got (Half|torch.float16)"),
}
# Every operator path of the scan (the compiled one and the Triton one): each checks its arguments
# alike (C++ spells a dtype Long where Python spells it torch.int64).
SCAN_OPERATOR_PATHS = [p for p in backend.PATHS["linear_scan"] if backend.REGISTRY[p].kind == "operator"]


def scan_args():
    g = torch.Generator().manual_seed(0)
    return (torch.rand(OT, 5, generator=g, dtype=F64), torch.randn(OT, 5, generator=g, dtype=F64),
            torch.randn(5, generator=g, dtype=F64))


def scan_ops(path):
    """(forward, backward) scan operators of ``path``; skips where the path cannot run here."""
    reason = backend.why_not(path, backend.Call("linear_scan", torch.device("cpu"), F64, (OT, 5)))
    if reason:
        pytest.skip(reason)
    return backend.op(path, "linear_scan_forward"), backend.op(path, "linear_scan_backward")


@pytest.mark.parametrize("path", SCAN_OPERATOR_PATHS)
@pytest.mark.parametrize("case", SCAN_OP_CASES)
def test_linear_scan_op_errors(case, path):
    forward, backward = scan_ops(path)
    mutate, match = SCAN_OP_CASES[case]
    a, u, x0 = scan_args()
    x = forward(a, u, x0)
    backward(torch.ones_like(x), a, x, x0)  # valid as built
    with pytest.raises(RuntimeError, match=r"^tsrnn: linear_scan " + match):
        forward(*mutate(a, u, x0))
    with pytest.raises(RuntimeError, match=r"^tsrnn: linear_scan " + match):
        backward(torch.ones_like(x), *mutate(a, x, x0))


@pytest.mark.parametrize("path", SCAN_OPERATOR_PATHS)
@pytest.mark.parametrize("bad", ["shape", "dtype"])
def test_linear_scan_backward_grad_mismatch(bad, path):
    forward, backward = scan_ops(path)
    a, u, x0 = scan_args()
    x = forward(a, u, x0)
    grad = torch.ones_like(x)[:-1] if bad == "shape" else torch.ones_like(x, dtype=torch.float32)
    with pytest.raises(RuntimeError, match=r"^tsrnn: linear_scan grad_x must match x"):
        backward(grad, a, x, x0)


def outcome_in_child(fn, timeout=60.0):
    """Run fn() in a forked child (no new interpreter, so no second torch import) and return
    ("returned", text) / ("raised", "Type: message") / ("died", "signal N") / ("timeout", "")."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        try:
            faulthandler.disable()  # a crash is the expected outcome here, not worth a dump
            os.close(read_end)
            try:
                text = "returned\0" + str(fn())
            except BaseException as exc:  # noqa: BLE001
                text = f"raised\0{type(exc).__name__}: {exc}"
            os.write(write_end, text.encode()[:4000])
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            return "timeout", ""
        time.sleep(0.005)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read().decode()
    if os.WIFSIGNALED(status):
        return "died", f"signal {os.WTERMSIG(status)}"
    kind, _, text = data.partition("\0")
    return (kind or "died"), text


def _scan_zero_steps_backward():
    # N below the kernel's grain: the child runs no OpenMP region (safe after fork).
    n = 8
    a = torch.rand(0, n, dtype=F64, requires_grad=True)
    u = torch.randn(0, n, dtype=F64, requires_grad=True)
    x0 = torch.randn(n, dtype=F64, requires_grad=True)
    x = torch.ops.tsrnn.linear_scan_forward(a, u, x0)
    x.sum().backward()
    return "zero grad" if bool((x0.grad == 0).all()) else f"grad_x0 = {x0.grad.tolist()}"


@needs_native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_linear_scan_op_zero_steps_does_not_crash():
    kind, text = outcome_in_child(_scan_zero_steps_backward)
    assert kind != "died" and kind != "timeout", f"the process {kind}: {text}"
    # Either the op refuses T=0, or the gradient of x0 through zero steps is zero.
    assert (kind == "raised" and text.startswith("RuntimeError: tsrnn:")) or text == "zero grad", (kind, text)


@needs_native
@pytest.mark.parametrize("op", ["linear_scan_forward", "recurrence_forward"])
def test_op_device_mismatch_raises(op):
    if op == "linear_scan_forward":
        a, u, x0 = scan_args()
        call = lambda: torch.ops.tsrnn.linear_scan_forward(a.to("meta"), u, x0)  # noqa: E731
    else:
        args = op_args("lstm")
        args["w_hh"] = args["w_hh"].to("meta")
        call = lambda: forward(args)  # noqa: E731
    with pytest.raises(RuntimeError):
        call()
