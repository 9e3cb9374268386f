"""Compiles the SIMT emulation (tests/simt/simt.h) with g++ into a shared library of torch operators.

Nine objects: the kernels of csrc/recurrence/cuda/cluster_recurrence.cu and grid_recurrence.cu and
the GEMMs' rounding kernel csrc/gemm/cuda/round_tf32.cu (``KERNEL_SOURCES``), each compiled as C++
with tests/simt/include ahead of the system headers (its <cuda_runtime.h>, <cooperative_groups.h>,
<mma.h>, <cuda_bf16.h>, <cuda/atomic>, <cublas_v2.h> and <ATen/cuda/CUDAContext.h> are the
emulation); the emulation's runtime (simt.cpp); its probes (probes.cpp, cluster_probes.cpp,
flag_probes.cpp, ptx_probes.cpp); and the torch binding (binding.cpp, the CUDA binding's own policies). Three libraries:
the plain one; ``sanitize``, all but the binding built with AddressSanitizer and
UndefinedBehaviorSanitizer (a process must preload libasan: see ``sanitizer_environment``); and
``probe``, everything built with -DTSRNN_PROBE=1, as the GPU probe's own build (the tensor-core
kernels' phase trace and removal ladder, csrc/recurrence/cuda/probe.h, and the operators
torch.ops.simt.probe_arm, probe_layout and probe_rungs), with the GPU probe's microbenchmarks
(bench/probe/micro.cu and its operators torch.ops.tsrnn_micro, micro_ops.cpp) added. The
tests' planted bugs are no builds of their own: a dropped barrier (torch.ops.simt.drop_barrier) and
broken atomics (torch.ops.simt.plant) are chosen at run time in either library (tests/simt/run.py's
--drop and --plant). Libraries are cached under ``$TSRNN_SIMT_CACHE`` (default ~/.cache/tsrnn-simt,
else the temporary directory) by the hash of every source, flag and version, so a rerun of the tests
compiles nothing; the binding object (half a minute: the torch headers) is shared by both.
"""
from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils import cpp_extension

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLUSTER_KERNELS = ROOT / "csrc" / "recurrence" / "cuda" / "cluster_recurrence.cu"  # the cluster-resident kernel
GRID_KERNELS = CLUSTER_KERNELS.with_name("grid_recurrence.cu")  # the grid-resident tensor-core kernel
ROUNDING = ROOT / "csrc" / "gemm" / "cuda" / "round_tf32.cu"  # the tensor-core GEMMs' TF32 rounding kernel
KERNEL_SOURCES = (CLUSTER_KERNELS, GRID_KERNELS, ROUNDING)  # the kernel files of every library
PROBES = (HERE / "probes.cpp", HERE / "cluster_probes.cpp", HERE / "flag_probes.cpp", HERE / "ptx_probes.cpp")  # the emulation's own checks
MICRO = ROOT / "bench" / "probe"  # the GPU probe's microbenchmarks (micro.cu, micro_ops.cpp): in the probe library
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
PROBE = ["-DTSRNN_PROBE=1"]
INCLUDES = [f"-I{HERE / 'include'}", f"-I{HERE}", f"-I{ROOT / 'csrc'}"]
COMMON = ["g++", "-std=c++20", "-fPIC", "-O1", "-g0", "-w"]


def _sources() -> list[Path]:
    patterns = [(HERE, "*.h"), (HERE, "*.cpp"), (HERE / "include", "**/*"), (ROOT / "csrc", "**/*.h"),
                (ROOT / "csrc" / "recurrence" / "cuda", "*.cu"), (ROOT / "csrc" / "gemm" / "cuda", "*.cu"),
                (MICRO, "micro*")]
    return sorted(p for base, pattern in patterns for p in base.glob(pattern) if p.is_file())


def _digest() -> str:
    h = hashlib.sha256()
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout
    h.update(f"{compiler}{torch.__version__}{COMMON}{SANITIZE}{sys.version}".encode())
    for path in _sources():
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _compile(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"simt build failed: {' '.join(command)}\n{done.stderr[-4000:]}")


def _binding_flags() -> list[str]:
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]


def _cache_root() -> Path:
    if "TSRNN_SIMT_CACHE" in os.environ:
        return Path(os.environ["TSRNN_SIMT_CACHE"])
    home = Path.home() / ".cache" / "tsrnn-simt"
    try:
        home.mkdir(parents=True, exist_ok=True)
        return home
    except OSError:  # a read-only home: the temporary directory
        return Path(tempfile.gettempdir()) / f"tsrnn-simt-{os.getuid()}"


def library(sanitize: bool = False, probe: bool = False) -> Path:
    """The emulation's shared library (plain, built with the sanitizers, or the probe's build),
    compiled if not cached."""
    if sanitize and probe:
        raise ValueError("the probe's library is not sanitized")
    cache = _cache_root() / _digest()
    cache.mkdir(parents=True, exist_ok=True)
    base = "asan" if sanitize else "probe" if probe else "plain"
    target = cache / f"tsrnn_simt_{base}.so"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers build one at a time
        if target.exists():
            return target
        flags = COMMON + (SANITIZE if sanitize else []) + (PROBE if probe else []) + INCLUDES
        binding = cache / ("binding_probe.o" if probe else "binding.o")
        jobs = {cache / f"{source.stem}_{base}.o": flags + (["-x", "c++"] if source.suffix == ".cu" else []) + ["-c", str(source)]
                for source in (*KERNEL_SOURCES, *PROBES)}
        jobs.update({
            cache / f"simt_{base}.o": flags + ["-c", str(HERE / "simt.cpp")],
            binding: COMMON + (PROBE if probe else []) + INCLUDES + _binding_flags() + ["-c", str(HERE / "binding.cpp")],
        })
        if probe:  # the microbenchmarks of bench/probe/micro.py, as torch.ops.tsrnn_micro
            jobs.update({
                cache / "micro_probe.o": flags + ["-x", "c++", "-c", str(MICRO / "micro.cu")],
                cache / "micro_ops_probe.o": COMMON + PROBE + INCLUDES + _binding_flags() + ["-c", str(MICRO / "micro_ops.cpp")],
            })
        todo = [command + ["-o", str(out)] for out, command in jobs.items() if not out.exists()]
        with concurrent.futures.ThreadPoolExecutor(max(1, len(todo))) as pool:
            list(pool.map(_compile, todo))
        torch_lib = Path(torch.__file__).parent / "lib"
        partial = target.with_suffix(".tmp")
        _compile(["g++", "-shared", "-o", str(partial), *map(str, jobs), *(SANITIZE if sanitize else []),
                  f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", "-ldl", f"-Wl,-rpath,{torch_lib}"])
        partial.rename(target)
        return target


def sanitizer_environment() -> dict[str, str]:
    """The environment of a process that loads a sanitized library: the ASan runtime preloaded (it
    must come first), leak checks off (the interpreter's own), any report fatal."""
    asan = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True).stdout.strip()
    return {**os.environ, "LD_PRELOAD": asan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
