"""The GPU probe's microbenchmarks of the Hopper primitives the second-generation tensor-core kernels
rely on (bench/probe/micro.cu, one kernel each; operators torch.ops.tsrnn_micro, micro_ops.cpp).

``run(ctx)`` builds micro.cu (on the GPU with torch.utils.cpp_extension for sm_90; on the CPU the
SIMT emulation's probe library of tests/simt/build.py, which holds the same source compiled by g++),
runs every benchmark and returns ``{status, results, build_seconds, emulated}``. ``results`` maps a
benchmark's name to ``{status, ns, cycles, iters, reps}``: the median over ``reps`` timed loops of
nanoseconds (%globaltimer) and SM cycles (clock64) per operation. A benchmark checks what it
computed before its time counts; a wrong result is ``failed`` with the reason, never timed. Under
the emulation (``emulated: true``) the repetitions are tiny and the times a counter: only the
statuses mean something there.

How to read them:
  ``cluster_barrier/c{c}/{release|relaxed}/stores{n}``  one arrive + wait of a cluster of c blocks
      (128 threads each), each thread issuing n global stores just before the arrive: the release
      arrive waits for them (MEMBAR.ALL.GPU), the relaxed one does not.
  ``dsmem_pingpong``  one round trip between 2 blocks of a cluster: st.async of 4 bytes into the
      peer's shared memory completing on its mbarrier, the peer's try_wait.parity, its push back.
  ``flag_barrier/{variant}/blocks{n}``  one arrive + wait of n resident blocks (cooperative launch)
      with one L2 read of a neighbour's slot: ``one_counter`` (flag_barrier.h: a release add per
      block, acquire polls), ``counter_per_cluster_c{c}`` (each block adds to its cluster's
      counter, every counter polled), ``cluster_head_c{c}`` (the grid kernel's since its
      cluster arrival: a cluster barrier, one add per cluster by its rank-0 block, every block
      polling the one counter).
  ``ldcg_chain``  one __ldcg load of a pointer chase through L2 (a random cycle of 4 MB).
  ``fragment_load/{wmma|ldmatrix}/pitch{p}``  one 16x16 bf16 tile by one warp from shared memory
      rows of p elements (wmma::load_matrix_sync, generic loads; ldmatrix x4), each load's address
      depending on the previous tile's data: latency, not throughput.
  ``active_clusters``  cudaOccupancyMaxActiveClusters of a 256-thread kernel by dynamic shared
      memory (KiB) and cluster size: ``clusters[kib][c]``; no timing.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from .context import Context, failed, skipped

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLUSTERS = (2, 4, 8, 16)
STORES = (0, 8, 64)
PITCHES = (128, 144, 400, 576)  # bf16 elements a row
SHARED_KIB = (100, 150, 200, 227)
MARGIN_S = 10.0  # left before the deadline: no further benchmark starts
BUILD = Path(tempfile.gettempdir()) / "tsrnn_micro_build"  # outside the output folder a GPU call brings back


def build(device: str) -> None:
    """Loads torch.ops.tsrnn_micro: compiled by nvcc for sm_90, or the emulation's probe library."""
    if device == "cpu":
        if str(ROOT / "tests") not in sys.path:
            sys.path.insert(0, str(ROOT / "tests"))
        from simt import build as simt_build, emulation

        emulation.load(simt_build.library(probe=True))
        emulation.emulate(4, 0)
        return
    from torch.utils import cpp_extension

    from .kernels import unlock_stale

    BUILD.mkdir(parents=True, exist_ok=True)
    unlock_stale(BUILD)
    # the host binding at torch's own C++ standard (C++20 from torch 2.14), the .cu file at C++17
    cpp_extension.load(name="tsrnn_micro", sources=[str(HERE / "micro.cu"), str(HERE / "micro_ops.cpp")],
                       extra_cflags=["-O3"],
                       extra_cuda_cflags=["-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90"],  # st.async: sm_90
                       extra_include_paths=[str(ROOT / "csrc"), str(HERE)], build_directory=str(BUILD),
                       is_python_module=False, verbose=False)


def _plan(emulated: bool, quick: bool, sms: int) -> list[tuple[str, object, tuple, int, int]]:
    """(name, operator, its arguments before iters, iters, reps) of every timed benchmark."""
    ops = torch.ops.tsrnn_micro
    small = emulated or quick
    reps = 3 if emulated else 5 if quick else 11
    iters = {"barrier": 2 if emulated else 100 if quick else 1000, "chase": 8 if emulated else 1000 if quick else 10000}
    plan = []
    for c in CLUSTERS:
        for relaxed in (False, True):
            for stores in STORES:
                name = f"cluster_barrier/c{c}/{'relaxed' if relaxed else 'release'}/stores{stores}"
                plan.append((name, ops.cluster_barrier, (c, relaxed, stores), iters["barrier"], reps))
    plan.append(("dsmem_pingpong", ops.dsmem_pingpong, (), iters["barrier"], reps))
    for blocks in ((4, 8) if emulated else tuple(n for n in (8, 32, 66, 132) if n <= sms)):
        plan.append((f"flag_barrier/one_counter/blocks{blocks}", ops.flag_barrier, (0, blocks, 1), iters["barrier"], reps))
        for c in (2, 8):
            if blocks % c == 0 and (not small or c == 2):
                for mode, variant in ((1, "counter_per_cluster"), (2, "cluster_head")):
                    plan.append((f"flag_barrier/{variant}_c{c}/blocks{blocks}", ops.flag_barrier, (mode, blocks, c),
                                 iters["barrier"], reps))
    plan.append(("ldcg_chain", ops.ldcg_chain, (64 if emulated else 1 << 20,), iters["chase"], reps))
    for pitch in PITCHES:
        for ldmatrix in (False, True):
            plan.append((f"fragment_load/{'ldmatrix' if ldmatrix else 'wmma'}/pitch{pitch}", ops.fragment_loads,
                         (ldmatrix, pitch), iters["barrier"], reps))
    return plan


def _timed(op, args: tuple, iters: int, reps: int, device: torch.device) -> dict:
    try:
        status, ns, cycles = op(*args, iters, reps, device)
    except RuntimeError as e:
        return failed(str(e).splitlines()[0] if str(e) else repr(e))
    if status != "ok":
        return failed(status)
    return {"status": "ok", "ns": ns, "cycles": cycles, "iters": iters, "reps": reps}


def _active_clusters() -> dict:
    try:
        clusters = {str(kib): {str(c): torch.ops.tsrnn_micro.active_clusters(c, kib * 1024) for c in range(2, 17)}
                    for kib in SHARED_KIB}
    except RuntimeError as e:
        return failed(str(e).splitlines()[0])
    return {"status": "ok", "threads": 256, "clusters": clusters}


def run(ctx: Context) -> dict:
    """Every microbenchmark's record (see the module's docstring); ``failed`` overall where the
    build fails or any benchmark does, the others' results kept."""
    emulated = ctx.device == "cpu"
    start = time.monotonic()
    try:
        build(ctx.device)
    except Exception as e:  # noqa: BLE001 - a build error of any kind is this part's failure
        return failed(f"micro.cu did not build: {e}", build_seconds=time.monotonic() - start, emulated=emulated)
    build_seconds = time.monotonic() - start
    ctx.log(f"micro: built in {build_seconds:.0f} s")
    device = torch.device("cpu" if emulated else "cuda")
    results = {}
    for name, op, args, iters, reps in _plan(emulated, ctx.quick, torch.ops.tsrnn_micro.multiprocessors()):
        results[name] = skipped("the deadline") if ctx.left() < MARGIN_S else _timed(op, args, iters, reps, device)
        ctx.save({"status": "partial", "results": results, "build_seconds": build_seconds, "emulated": emulated})
    results["active_clusters"] = _active_clusters()
    bad = [name for name, r in results.items() if r["status"] == "failed"]
    record = {"status": "failed" if bad else "ok", "results": results, "build_seconds": build_seconds, "emulated": emulated}
    if bad:
        record["reason"] = f"{len(bad)} of {len(results)} benchmarks failed: {', '.join(bad)}"[:500]
    ctx.log(f"micro: {len(results) - len(bad)} of {len(results)} benchmarks ok")
    return record
