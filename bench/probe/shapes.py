"""Where the phase trace and the removal ladder look: (kernel, (T, B, H), precision, forced
configuration) at the target shapes on a GPU, and tiny ones under the CPU's emulation.

Forced (cluster, tile or chunk), 0 for the plan's choice: the plan's own configuration except at
(1000, 128, 128) TF32, where clusters of 8 (the best measured there, 2026-11-28) are forced.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Site:
    kernel: str
    shape: tuple[int, int, int]
    precision: str
    forced: tuple[int, int] = (0, 0)

    @property
    def id(self) -> str:
        T, B, H = self.shape
        force = f" c={self.forced[0]}" if self.forced[0] else ""
        return f"{self.kernel} ({T},{B},{H}) {self.precision}{force}"


GPU_SITES = [Site("cluster", (70, 20, 400), "tf32"), Site("cluster", (70, 20, 400), "bf16"),
             Site("cluster", (1000, 128, 128), "tf32", (8, 0)), Site("grid", (70, 20, 1150), "bf16")]
# The CPU's: tiny, but one as the GPU's are in what a launch must be allowed: clusters of 16
# (non-portable) with 52 KB of shared memory a block (over the 48 KB a kernel gets by default).
CPU_SITES = [Site("cluster", (3, 17, 20), "tf32", (2, 16)), Site("cluster", (3, 17, 20), "bf16", (2, 16)),
             Site("cluster", (2, 5, 192), "tf32", (16, 16)), Site("grid", (3, 17, 37), "bf16", (2, 16))]


def sites(device: str) -> list[Site]:
    return CPU_SITES if device == "cpu" else GPU_SITES
