"""Every argument check of the compiled CPU operators (tsrnn._C: the recurrence, the linear scan,
the projection and the GEMMs) driven to fail, one case per check site: each raises a
RuntimeError("tsrnn: ...") that names the argument, and the process survives. Their messages are
built without C++ streams (csrc/check_message.h, TSRNN_CHECK): on the lent GPU machine every
message that held a number had crashed the process.

``SITES`` counts the TSRNN_CHECK sites of each CPU source; a check added without a case (or a
case for a check that is gone) fails ``test_every_check_site_has_a_case``. The checks that a CPU
call cannot reach (a tensor on another device makes torch dispatch to that device's kernel) are
listed in ``UNREACHABLE_ON_CPU`` with the reason.
"""
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from conftest import needs_native
from test_errors_ops import backward, backward_args, forward, op_args, scan_args

ROOT = pathlib.Path(__file__).resolve().parents[3]
OPS = torch.ops.tsrnn
F64 = torch.float64


def _packed(cell="lstm", batch_sizes=(2, 1), **changes):
    """recurrence_forward's arguments for packed rows of ``batch_sizes``."""
    args = op_args(cell)
    n = sum(batch_sizes)
    args["xg"] = args["xg"].reshape(-1, args["xg"].shape[-1])[:n]
    if args["steps"] is not None:
        args["steps"] = args["steps"].reshape(-1)[:n]
    args["batch_sizes"] = torch.tensor(batch_sizes)
    args.update(changes)
    return args


def _packed_backward(**changes):
    args = _packed()
    h_all, state_n, state_all, saved = forward(args)
    out = {"cell": "lstm", "grad_h": torch.ones_like(h_all), "grad_state_n": None, "w_hh": args["w_hh"],
           "h0": args["h0"], "state0": args["state0"], "h_all": h_all, "state_all": state_all, "saved": saved,
           "params": None, "steps": None, "constants": [], "batch_sizes": args["batch_sizes"]}
    out.update(changes)
    return out


def _with(build, **changes):
    args = build()
    args.update({k: (v(args[k]) if callable(v) else v) for k, v in changes.items()})
    return args


def _gemm(a=(3, 4), b=(4, 5), name=None, blocked=False, init=None, row_sums=False, dtype=torch.float32):
    a = torch.randn(*a, dtype=dtype) if isinstance(a, tuple) else a
    b = torch.randn(*b, dtype=dtype) if isinstance(b, tuple) else b
    return OPS.cpu_gemm(a, b, name or OPS.cpu_gemm_kernels()[0], blocked, init, row_sums)


def _scan(a=None, u=None, x0=None):
    a0, u0, x00 = scan_args()
    return OPS.linear_scan_forward(a0 if a is None else a, u0 if u is None else u, x00 if x0 is None else x0)


# (source, the check's place in it) -> (the failing call, what the message must say)
CASES = {
    # csrc/recurrence/op.h, in source order
    ("op.h", "unknown cell"): (lambda: forward(_with(op_args, cell="gru")), r"unknown cell 'gru'"),
    ("op.h", "rank"): (lambda: forward(_with(op_args, xg=lambda v: v[0])), r"xg must have 3 dimensions, got \[2, 16\]"),
    ("op.h", "dtype"): (lambda: forward(_with(op_args, w_hh=lambda v: v.float())), r"w_hh has dtype Float, expected Double"),
    ("op.h", "unknown precision"): (lambda: forward({**op_args(), "batch_sizes": None, "precision": "fp8"}),
                                    r"unknown precision 'fp8'"),
    ("op.h", "batch_sizes in [1, B]"): (lambda: forward(_packed(batch_sizes=(3, 1), h0=torch.zeros(2, 4, dtype=F64))),
                                        r"batch_sizes must be in \[1, B=2\], got 3"),
    ("op.h", "non-increasing"): (lambda: forward(_packed(batch_sizes=(1, 2))), r"batch_sizes must be non-increasing"),
    ("op.h", "packed rows"): (lambda: forward(_packed(xg=torch.zeros(4, 16, dtype=F64))),
                              r"the packed tensors have 4 rows, batch_sizes sums to 3"),
    ("op.h", "batch_sizes rank"): (lambda: forward({**_packed(), "batch_sizes": torch.tensor([[2, 1]])}),
                                   r"batch_sizes must be \[T\] with T >= 1, got \[1, 2\]"),
    ("op.h", "batch_sizes dtype"): (lambda: forward(_packed(batch_sizes=torch.tensor([2, 1], dtype=torch.int32))),
                                    r"batch_sizes must be int64, got Int"),
    ("op.h", "packed width"): (lambda: forward(_packed(xg=torch.zeros(3, 15, dtype=F64))),
                               r"xg must be \[N, 16\] \(packed\), got \[3, 15\]"),
    ("op.h", "padded rows"): (lambda: forward(_with(op_args, xg=lambda v: v[..., :-1])),
                              r"xg must be \[T, B, 16\], got \[3, 2, 15\]"),
    ("op.h", "w_hh shape"): (lambda: forward(_with(op_args, w_hh=lambda v: v[:-1])), r"w_hh must be \[16, 4\], got \[15, 4\]"),
    ("op.h", "h0 shape"): (lambda: forward(_with(op_args, h0=lambda v: v[:1])), r"h0 must be \[2, 4\], got \[1, 4\]"),
    ("op.h", "state0 shape"): (lambda: forward(_with(op_args, state0=lambda v: torch.cat([v, v]))),
                               r"state0 must be \[1, 2, 4\], got \[2, 2, 4\]"),
    ("op.h", "params used"): (lambda: forward(_with(lambda: op_args("plstm_coupled"), params=None)),
                              r"params are required for the cell plstm_coupled"),
    ("op.h", "params shape"): (lambda: forward(_with(lambda: op_args("plstm_coupled"), params=lambda v: v[:, :-1])),
                               r"params must be \[1, 4\], got \[1, 3\]"),
    ("op.h", "steps unused"): (lambda: forward(_with(op_args, steps=torch.ones(3, 2, dtype=F64))),
                               r"the cell lstm takes no step input \(steps\)"),
    ("op.h", "packed steps"): (lambda: forward(_packed("plstm_coupled", steps=torch.ones(4, dtype=F64))),
                               r"steps must be \[N\], got \[4\]"),
    ("op.h", "padded steps"): (lambda: forward(_with(lambda: op_args("plstm_coupled"), steps=lambda v: v.t())),
                               r"steps must be \[3, 2\], got \[2, 3\]"),
    ("op.h", "constants count"): (lambda: forward(_with(lambda: op_args("plstm_coupled"), constants=[])),
                                  r"the cell plstm_coupled takes 1 constants, got 0"),
    ("op.h", "empty xg"): (lambda: forward(_with(op_args, xg=lambda v: v[:0])), r"empty input, xg \[0, 2, 16\]"),
    ("op.h", "h_all rank"): (lambda: backward(_with(backward_args, h_all=lambda v: v[0])),
                             r"h_all must be \[T, B, H\], got \[2, 4\]"),
    ("op.h", "empty h_all"): (lambda: backward(_with(backward_args, h_all=lambda v: v[:0])),
                              r"empty input, h_all \[0, 2, 4\]"),
    ("op.h", "state_all"): (lambda: backward(_with(backward_args, state_all=lambda v: v[:, :, :1])),
                            r"state_all must be \[T, S, B, H\], got \[3, 1, 1, 4\]"),
    ("op.h", "saved rank"): (lambda: backward(backward_args(save=False)),
                             r"saved must be \[T, B, 16\], got \[0\] \(was the forward run with save=false\?\)"),
    ("op.h", "saved sizes"): (lambda: backward(_with(backward_args, saved=lambda v: v[:, :, :-1])),
                              r"saved must be \[T, B, 16\], got \[3, 2, 15\]"),
    ("op.h", "grad_h"): (lambda: backward(_with(backward_args, grad_h=lambda v: v[:-1])),
                         r"grad_h must be \[3, 2, 4\], got \[2, 2, 4\]"),
    ("op.h", "grad_state_n"): (lambda: backward(_with(backward_args, grad_state_n=lambda v: v[:, :1])),
                               r"grad_state_n must be \[1, 2, 4\], got \[1, 1, 4\]"),
    # csrc/recurrence/cpu/recurrence.cpp
    ("recurrence.cpp", "dtype"): (lambda: forward({k: v.half() if isinstance(v, torch.Tensor) else v
                                                   for k, v in op_args().items()}),
                                  r"the CPU kernels take float32 or float64, got Half"),
    # csrc/linear_scan/cpu.cpp
    ("cpu.cpp", "u shape"): (lambda: _scan(a=torch.rand(0, 5, dtype=F64), u=torch.rand(0, 5, dtype=F64)),
                             r"linear_scan u must be \[T, N\] with T >= 1, got \[0, 5\]"),
    ("cpu.cpp", "a shape"): (lambda: _scan(a=torch.rand(3, 4, dtype=F64)), r"linear_scan a must match u \[3, 5\], got \[3, 4\]"),
    ("cpu.cpp", "x0 shape"): (lambda: _scan(x0=torch.rand(4, dtype=F64)), r"linear_scan x0 must be \[5\], got \[4\]"),
    ("cpu.cpp", "dtypes differ"): (lambda: _scan(x0=torch.rand(5)), r"linear_scan dtypes differ: Float vs Double"),
    ("cpu.cpp", "float dtype"): (lambda: _scan(*(t.half() for t in scan_args())),
                                 r"linear_scan takes float32 or float64, got Half"),
    ("cpu.cpp", "grad_x"): (lambda: OPS.linear_scan_backward(torch.ones(3, 4, dtype=F64), *scan_args()),
                            r"linear_scan grad_x must match x"),
    # csrc/gemm/panel_gemm.cpp
    ("panel_gemm.cpp", "TSRNN_CPU_GEMM value"): ("TSRNN_CPU_GEMM=avx1024",
                                                 r"TSRNN_CPU_GEMM must be 'avx512', 'avx2' or 'aten', got 'avx1024'"),
    ("panel_gemm.cpp", "TSRNN_CPU_GEMM kernel"): ("TSRNN_CPU_GEMM=avx512", r"TSRNN_CPU_GEMM=avx512 but this CPU or build"),
    ("panel_gemm.cpp", "rank"): (lambda: _gemm(a=(3,)), r"cpu_gemm takes 2-D a and b, got \[3\] and \[4, 5\]"),
    ("panel_gemm.cpp", "dtype"): (lambda: _gemm(dtype=F64), r"cpu_gemm takes float32, got Double and Double"),
    ("panel_gemm.cpp", "multiply"): (lambda: _gemm(b=(3, 5)), r"cpu_gemm: a \[3, 4\] and b \[3, 5\] do not multiply"),
    ("panel_gemm.cpp", "kernel"): (lambda: _gemm(name="avx1024"), r"this CPU or build does not run the 'avx1024' kernel; it runs: "),
    ("panel_gemm.cpp", "blocked"): (lambda: _gemm(row_sums=True), r"cpu_gemm takes init and row_sums only with blocked=True"),
    ("panel_gemm.cpp", "init"): (lambda: _gemm(blocked=True, init=torch.zeros(4)),
                                 r"cpu_gemm: init must be float32 \[5\] or \[3, 5\], got \[4\]"),
    # csrc/gemm/projection.cpp
    ("projection.cpp", "x and w"): (lambda: OPS.cpu_projection(torch.zeros(3, 4), torch.zeros(5, 3), None),
                                    r"cpu_projection takes x \[M, I\] and w \[N, I\], got \[3, 4\] and \[5, 3\]"),
    ("projection.cpp", "bias"): (lambda: OPS.cpu_projection(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(4)),
                                 r"cpu_projection's bias must be \[5\], got \[4\]"),
    ("projection.cpp", "grad"): (lambda: OPS.cpu_projection_backward(torch.zeros(3, 4), torch.zeros(3, 4),
                                                                     torch.zeros(5, 4), [True, True, True]),
                                 r"cpu_projection_backward's grad must be \[3, 5\], got \[3, 4\]"),
}
# Checks a CPU call cannot reach: a tensor on another device (CUDA, meta) makes torch dispatch the
# call to that device's kernel, which checks it there (tsrnn._cuda; the fake kernels).
UNREACHABLE_ON_CPU = {
    ("op.h", "device"): "check_tensor's device check: the CUDA binding's (tsrnn._cuda) reaches it",
    ("op.h", "batch_sizes device"): "batch_sizes on another device dispatches away from the CPU kernel",
    ("cpu.cpp", "CPU tensors"): "a tensor on another device dispatches away from the CPU kernel",
}
SOURCES = {"op.h": "csrc/recurrence/op.h", "recurrence.cpp": "csrc/recurrence/cpu/recurrence.cpp",
           "cpu.cpp": "csrc/linear_scan/cpu.cpp", "panel_gemm.cpp": "csrc/gemm/panel_gemm.cpp",
           "projection.cpp": "csrc/gemm/projection.cpp"}


def test_every_check_site_has_a_case():
    for short, path in SOURCES.items():
        sites = len(re.findall(r"\bTSRNN_CHECK\(", (ROOT / path).read_text()))
        covered = sum(1 for key in (*CASES, *UNREACHABLE_ON_CPU) if key[0] == short)
        assert covered == sites, f"{path}: {sites} TSRNN_CHECK sites, {covered} cases"
    stray = [p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cpp", ".cu")
             and re.search(r"\bTORCH_CHECK\(|c10::str\(|ostringstream|c10::Join\(", p.read_text())]
    assert [str(p.relative_to(ROOT)) for p in stray if p.name != "check_message.h"] == []


@needs_native
@pytest.mark.parametrize("key", list(CASES), ids=lambda k: f"{k[0]}:{k[1]}")
def test_each_check_raises_a_runtime_error_naming_the_argument(key):
    call, match = CASES[key]
    if isinstance(call, str):  # an environment setting, read by a fresh process's CPU loops
        variable, value = call.split("=")
        if key[1] == "TSRNN_CPU_GEMM kernel" and value in OPS.cpu_gemm_kernels():
            pytest.skip(f"this CPU runs {value}: the check needs a CPU without it")
        code = ("import torch, tsrnn; z = torch.zeros(2, 1, 3); h = torch.zeros(1, 4)\n"
                "tsrnn.functional.lstm(z, h, h, torch.zeros(16, 3), torch.zeros(16, 4), backend='cpu')")
        done = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, variable: value},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "RuntimeError: tsrnn: " in done.stderr, done.stderr[-2000:]
        assert re.search(match, done.stderr), done.stderr[-2000:]
        return
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        call()
