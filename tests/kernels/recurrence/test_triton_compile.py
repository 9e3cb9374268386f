"""Every Triton kernel variant compiles for sm_90 (Hopper) without a GPU.

The interpreter runs the kernels' Python, not Triton's compiler: a kernel can pass every
interpreted test and still fail to compile (a type that changes across a constexpr branch, an
unsupported op). Triton compiles for a named target without a device (``GPUTarget("cuda", 90,
32)``, its bundled ptxas), so CI compiles each (cell, dtype, autotuner config) variant of the
per-step kernels the dispatcher can send to a GPU (each cell of tsrnn/ops/recurrence/cells with its
Triton step, the kernels' constexpr CELL), and the linear scan's, for each precision of
the products a float32 call can ask for (PRECISION: IEEE, TF32 and bf16-rounded dots; the last two
for the LSTM only: they change the dots, the same code for every cell). The compiler must not see TRITON_INTERPRET (the
kernels would be interpreter functions, and the per-step kernel's autotuner would hold one
config), so the compile runs in a child process: this file is also its script. CI runs it under
the newest triton and under 3.6.0, the GPU machine's, which refuses some dots the newest takes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tsrnn import backend

pytestmark = pytest.mark.slow  # compiles every Triton kernel variant for sm_90

ARCH = 90


def _variants():
    """(name, kernel, pointer type, runtime int arguments, constexprs, options) of every variant."""
    import torch

    from tsrnn.ops.recurrence.cells import CELLS
    from tsrnn.ops.linear_scan import triton as linear_scan
    from tsrnn.ops.recurrence import triton_step as per_step
    from tsrnn.ops.recurrence.cells_triton import constexprs

    for cell, described in CELLS.items():
        # TF32 and bf16 change the dots only, the same code for every cell: compiled for the LSTM
        # (four gates) to keep CI's two compiles of this file in bounds.
        reduced = ("tf32", "bf16") if cell == "lstm" else ()
        for dtype, products in ((torch.float32, "ieee"), *((torch.float32, p) for p in reduced),
                                (torch.float64, "ieee")):
            f64, ptr = dtype == torch.float64, "*fp64" if dtype == torch.float64 else "*fp32"
            # every cell's own step (its CELL and sizes); the step input present where the cell has one
            flags = {"HAS_STEPS": described.step_input is not None, "ACC_F64": f64}
            label = f"{cell} {dtype} {products}"
            for config in per_step._forward_step.configs:  # every config the autotuner may pick
                tiles = ", ".join(f"{k}={v}" for k, v in config.kwargs.items())
                yield (f"per_step forward {label} {tiles}", per_step._forward_step, ptr, {"R", "B", "H"},
                       {**constexprs(cell, "forward"), **flags, "PRECISION": products, **config.kwargs},
                       {"num_warps": config.num_warps, "num_stages": config.num_stages})
            if products == "ieee":  # the pointwise backward has no dot: its GEMMs are torch's
                yield (f"per_step backward {cell} {dtype}", per_step._backward_step, ptr, {"R", "B", "H"},
                       {**constexprs(cell, "backward"), **flags, "HAS_GH": True, "BLOCK": per_step._BACKWARD_BLOCK},
                       {"num_warps": 4})
    for f64 in (False, True):
        yield (f"linear_scan f64={f64}", linear_scan._scan_kernel, "*fp64" if f64 else "*fp32", {"T", "N"},
               {"HAS_X0": True, "REVERSE": False, "ACC_F64": f64, "CHUNK": 16, "BLOCK_N": 64}, {"num_warps": 4})


def _compile_some(indices: list[int]) -> list[dict]:
    """Compile the variants at ``indices`` of ``_variants()``; one record each: name, ok, error,
    shared memory bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", ARCH, 32)
    variants = list(_variants())
    records = []
    for name, kernel, ptr, ints, constants, options in (variants[i] for i in indices):
        fn = kernel if isinstance(kernel, triton.runtime.JITFunction) else kernel.fn  # an autotuner's kernel
        signature = {a: "constexpr" if a in constants else "i32" if a in ints else ptr for a in fn.arg_names}
        try:
            compiled = triton.compile(ASTSource(fn, signature, constants), target=target, options=options)
        except Exception as exc:  # noqa: BLE001  (every failure is reported, with its variant)
            records.append({"name": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
            continue
        records.append({"name": name, "ok": True, "shared": compiled.metadata.shared})
    return records


def compile_all() -> list[dict]:
    """Every variant compiled, on every core (each compile is a process's single thread: on CI's two
    cores this halves the wall time), in processes of their own (spawned: no fork of a process
    that imported torch)."""
    import concurrent.futures
    import multiprocessing

    count, workers = len(list(_variants())), max(1, os.cpu_count() or 1)
    shares = [list(range(first, count, workers)) for first in range(workers)]
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [record for part in pool.map(_compile_some, shares) for record in part]


def _nvidia_backend() -> str | None:
    """Why Triton cannot compile for NVIDIA here, or None."""
    if not backend.triton_available():
        return "triton is not installed"
    from triton.backends import backends

    return None if "nvidia" in backends else "this triton has no NVIDIA backend"


@pytest.mark.skipif(_nvidia_backend() is not None, reason=str(_nvidia_backend()))
def test_every_triton_kernel_compiles_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(done.stdout)
    failed = [f"{r['name']}: {r['error']}" for r in records if not r["ok"]]
    assert not failed, "\n".join(failed)
    # every cell x (float32, float64) x (every forward config + the backward), the LSTM's float32
    # forward again in TF32 and bf16, + 2 scans (the configs as the child, without the interpreter, sees them)
    from tsrnn.ops.recurrence.cells import CELLS

    configs = sum(r["name"].startswith("per_step forward lstm torch.float64 ieee") for r in records)
    assert configs >= 1 and len(records) == len(CELLS) * 2 * (configs + 1) + 2 * configs + 2
    assert {r["name"].split()[2] for r in records if r["name"].startswith("per_step")} == set(CELLS)


if __name__ == "__main__":
    json.dump(compile_all(), sys.stdout)
