"""The tensor-core kernels of the probe's build (csrc/recurrence/cuda/probe.h: phase trace and removal
ladder), one interface for the GPU and the CPU.

On a GPU, ``bench/probe/binding.cpp`` and the two kernel files compiled with -DTSRNN_PROBE=1 by
torch.utils.cpp_extension (about a minute; cached in BUILD, outside the output folder that a GPU
call brings back), as the operators of
``tsrnn_probe_cluster`` / ``tsrnn_probe_grid`` and ``tsrnn_probe.arm``. On the CPU, the same source
under the SIMT emulation's probe library (tests/simt/build.py ``library(probe=True)``), as
``tsrnn_simt_cluster`` / ``tsrnn_simt_grid`` and ``simt.probe_arm``, on an emulated H100 (132 SMs)
for the cluster kernel and 4 SMs for the grid kernel (the emulator runs every block of a launch).
Each call runs the recurrence operators directly (the kernel alone: no projection, no dW GEMM).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from simt.cluster import forced  # noqa: E402  (TSRNN_CLUSTER / TSRNN_GRID while a block runs)

from tsrnn.ops.recurrence import op as recurrence_op  # noqa: E402

KERNELS = ("cluster", "grid")
CELL = "lstm"  # the ladder's variants are built for the LSTM (the multi-timescale LSTM runs it too)
EMULATED_SMS = {"cluster": 132, "grid": 4}
BUILD = Path(tempfile.gettempdir()) / "tsrnn_probe_build"
STALE_LOCK_S = 1800  # a build takes minutes: a lock this old was left by a build that was killed


def unlock_stale(folder: Path) -> None:
    """torch's JIT build (cpp_extension.load) waits without end while the ``lock`` file of its
    folder exists, and a build killed mid-compile leaves it there (a machine kept between sessions,
    /tmp with it): one older than STALE_LOCK_S is removed, and the removal said."""
    lock = folder / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age > STALE_LOCK_S:
        print(f"probe: removed {lock}, left {age / 60:.0f} min ago by a build that did not finish", flush=True)
        lock.unlink(missing_ok=True)


def build() -> float:
    """Compiles (once per machine) and loads the probe's GPU extension; seconds taken."""
    from torch.utils import cpp_extension

    started = time.monotonic()
    folder = BUILD
    folder.mkdir(parents=True, exist_ok=True)
    unlock_stale(folder)
    for namespace in ("tsrnn_probe_cluster", "tsrnn_probe_grid"):
        recurrence_op.define(namespace, planned=True)
    flags = ["-O3", "-DTSRNN_PROBE=1"]  # the host binding takes torch's own C++ standard, the .cu files C++17
    cuda = os.path.join(ROOT, "csrc", "recurrence", "cuda")
    sys.path.insert(0, str(ROOT))
    from build_backend import cublas_include_dir  # the policies' dW_hh GEMM includes cuBLAS

    cublas = cublas_include_dir(cpp_extension.CUDA_HOME)
    if cublas is None:
        raise RuntimeError("the probe's build needs cuBLAS's headers (cublas_v2.h), found in neither CUDA_HOME nor an nvidia wheel")
    cpp_extension.load(name="tsrnn_probe", sources=[str(ROOT / "bench" / "probe" / "binding.cpp"),
                                                     os.path.join(cuda, "cluster_recurrence.cu"),
                                                     os.path.join(cuda, "grid_recurrence.cu"),
                                                     str(ROOT / "csrc" / "gemm" / "cuda" / "round_tf32.cu")],
                       extra_cflags=flags, extra_cuda_cflags=flags + ["-std=c++17", "-gencode=arch=compute_90,code=sm_90"],
                       extra_include_paths=[str(ROOT / "csrc"), cublas],
                       build_directory=str(folder),
                       is_python_module=False, verbose=False)
    return time.monotonic() - started


@dataclass
class Probe:
    """The probe's kernels on ``device`` ("cuda" after ``build``, or "cpu")."""

    device: str

    def __post_init__(self):
        if self.device == "cpu":
            from simt import build as simt_build, emulation

            emulation.load(simt_build.library(probe=True))
            self._emulation = emulation
            self._ops = torch.ops.simt
            self._arm, self.namespaces = self._ops.probe_arm, {k: f"tsrnn_simt_{k}" for k in KERNELS}
            self.phases, self.parts, self.header = self._ops.probe_layout()
            self._rungs = self._ops.probe_rungs
        else:
            self._ops = torch.ops.tsrnn_probe
            self._arm, self.namespaces = self._ops.arm, {k: f"tsrnn_probe_{k}" for k in KERNELS}
            self.phases, self.parts, self.header = self._ops.layout()
            self._rungs = self._ops.rungs

    def rungs(self, kernel: str) -> list[int]:
        return list(self._rungs(kernel))

    def part_names(self, rung: int) -> str:
        """"baseline" or the names of the parts a rung leaves out, joined by "+"."""
        return "+".join(name for i, name in enumerate(self.parts) if rung >> i & 1) or "baseline"

    @contextlib.contextmanager
    def armed(self, kernel: str, skip: int = 0, trace: torch.Tensor | None = None, ignore_skip: bool = False,
              seed: int = 0):
        """The next launches run rung ``skip`` and record into ``trace``; disarmed after."""
        if self.device == "cpu":
            self._emulation.emulate(EMULATED_SMS[kernel], seed)
        self._arm(skip, trace, ignore_skip)
        try:
            yield
        finally:
            self._arm(0, None, False)

    def config(self, kernel: str, H: int, B: int, precision: str) -> list[int]:
        """The plan under the current forcing, as recurrence_config gives it: [cluster, tile or chunk,
        clusters, units, fwd bytes, bwd bytes, ...] (the grid kernel's backward's own four after)."""
        if self.device == "cpu":
            self._emulation.emulate(EMULATED_SMS[kernel], 0)
        ops = getattr(torch.ops, self.namespaces[kernel])
        return list(ops.recurrence_config(CELL, torch.empty(0, H, device=self.device), B, precision))

    def inputs(self, T: int, B: int, H: int, seed: int = 0) -> dict:
        """Random float32 operands of one LSTM layer (xg, w_hh, h0, c0) and an upstream gradient."""
        g = torch.Generator().manual_seed(seed)
        draw = lambda *shape, scale=1.0: (scale * torch.randn(*shape, generator=g)).to(self.device)  # noqa: E731
        return {"xg": draw(T, B, 4 * H), "w_hh": draw(4 * H, H, scale=H ** -0.5), "h0": draw(B, H, scale=0.5),
                "state0": draw(1, B, H, scale=0.5), "grad_h": draw(T, B, H)}

    def forward(self, kernel: str, x: dict, precision: str):
        ops = getattr(torch.ops, self.namespaces[kernel])
        return ops.recurrence_forward(CELL, x["xg"], x["w_hh"], x["h0"], x["state0"], None, None, [], True, None,
                                      precision)

    def backward(self, kernel: str, x: dict, outputs, precision: str):
        ops = getattr(torch.ops, self.namespaces[kernel])
        h_all, _, state_all, saved = outputs
        return ops.recurrence_backward(CELL, x["grad_h"], None, x["w_hh"], x["h0"], x["state0"], h_all, state_all,
                                       saved, None, None, [], None, precision)

    def blocks(self, config: list[int]) -> dict[str, int]:
        """Each direction's blocks: the grid kernel plans its forward and backward apart
        (recurrence_config's [6:10] the backward's), the cluster kernel one configuration for both."""
        backward = config[6:10] if len(config) >= 10 else config[:4]
        return {"forward": config[0] * config[2], "backward": backward[0] * backward[2]}

    def trace_buffer(self, blocks: int, steps: int) -> torch.Tensor:
        return torch.zeros(blocks, self.header + steps * len(self.phases), dtype=torch.int64, device=self.device)


__all__ = ["Probe", "build", "forced", "KERNELS", "CELL"]
