"""The cluster-resident kernel's configurations, each checked then timed beside cuDNN in one job.

For each target shape (T, B, H), cell (the LSTM, which the multi-timescale LSTM runs too, and the
coupled pLSTM) and precision (TF32: float32 layers with torch's default
torch.backends.cudnn.allow_tf32; bf16: bfloat16 layers), every (cluster size, batch tile) the
kernel's plan accepts (forced through TSRNN_CLUSTER, csrc/recurrence/cuda/cluster_policy.h) is first
checked against the float64 reference (tsrnn.testing.compare, the precision's tolerance rows) and,
if it passes, timed forward+backward (fwd+bwd ms, median); torch.nn.LSTM of the same dtype (cuDNN,
torch's defaults) is timed in the same job, and the plan's own choice (TSRNN_CLUSTER unset) is
recorded. bench/gpu_report.py runs ``sweep`` as its job "sweep" and keeps the rows in its JSON.

On the CPU (``--quick --device cpu`` of the report, in CI), the same code runs the kernel's source
under the SIMT emulation of tests/simt (paths "cluster_simt_tf32" / "_bf16", float32 layers) on a
tiny shape: the times are the emulator's and mean nothing; the checks are real.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys

import torch

import tsrnn
from tsrnn import testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from simt.cluster import forced  # noqa: E402  (TSRNN_CLUSTER for the duration of a block)

# (T, B, H) of the GPU sweep: the targets for this kernel (H = 1150 is the grid-resident one's).
SHAPES = [(70, 20, 400), (70, 80, 400), (1000, 128, 128)]
QUICK_SHAPES = [(3, 17, 20)]
CELLS = ("lstm", "plstm_coupled")
CONFIGS = [(c, tile) for c in (1, 2, 4, 8, 16) for tile in (16, 32)]  # (cluster size, batch tile)
QUICK_CONFIGS = [(2, 32)]  # a cluster and the wider tile: the emulator is slow

# The cost model of one configuration (estimates from public H100/H200 figures, nothing measured:
# the first GPU run compares them with its times): dense tensor-core FLOP/s, 2/3 of it reached by
# wmma, 128 bytes of shared memory an SM cycle (W_r is read from shared memory every step), 64
# bytes a cycle into an SM over distributed shared memory, a cluster barrier 0.2 us, a distributed
# shared memory round trip 0.1 us, the cell 0.1 us (special-function latency), 0.3 ms of host work
# a forward+backward call, cuBLAS at 40% of peak for the input projection and the weight gradients,
# and ~29 values a (step, row, unit) through HBM (xg, h, states, saved activations, dz).
CLOCK, SMS, HBM = 1.98e9, 132, 4.8e12
PEAK = {"tf32": 494e12, "bf16": 989e12}
MMA_EFFICIENCY, SHARED_BYTES_PER_CYCLE, INGRESS_BYTES_PER_CYCLE = 2 / 3, 128, 64
CLUSTER_BARRIER, DSMEM_LATENCY, CELL, HOST, CUBLAS_EFFICIENCY = 0.2e-6, 0.1e-6, 0.1e-6, 0.3e-3, 0.4


def predicted_ms(T: int, B: int, H: int, gates: int, cluster: int, tile: int, precision: str) -> float:
    """The model's forward+backward milliseconds of one configuration of the kernel: per step and
    direction, the exposed barrier phase (phase B hides behind the cell where it can), then the
    block's product, bounded by the tensor cores, by reading W_r from shared memory, or by the
    exchange; times the waves of clusters; plus the GEMMs, the HBM traffic and the host."""
    item = 4 if precision == "tf32" else 2
    units = math.ceil(H / cluster)
    rows, width = math.ceil(gates * units / 16) * 16, math.ceil(H / 16) * 16
    mma = 2 * tile * rows * width / (PEAK[precision] / SMS * MMA_EFFICIENCY)
    shared = rows * width * item / (SHARED_BYTES_PER_CYCLE * CLOCK)
    exchange = (cluster - 1) * tile * units * item / (INGRESS_BYTES_PER_CYCLE * CLOCK)
    barrier = CLUSTER_BARRIER + DSMEM_LATENCY if cluster > 1 else 0.05e-6
    hidden_phase = max(0.0, barrier - CELL)
    step = 2 * (barrier + hidden_phase + max(mma, shared, exchange)) + 2.5 * CELL
    waves = math.ceil(math.ceil(B / tile) * cluster / SMS)
    gemms = 3 * 2 * T * B * H * gates * H / (PEAK[precision] * CUBLAS_EFFICIENCY)
    return 1e3 * (waves * T * step + gemms + T * B * H * 29 * item / HBM + HOST)


class Target:
    """Where the sweep runs: on a GPU the registry's "cuda_cluster" (precision from the layer's dtype
    and cuDNN's TF32 flag), on the CPU the emulated kernel of tests/simt with the precision fixed."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cpu":
            from simt import build, cluster, emulation

            emulation.load(build.library())
            emulation.emulate(132, 0)  # an H100's SM count: the plan as it would choose there
            self.cluster = cluster

    def dtype(self, precision: str) -> torch.dtype:
        return torch.bfloat16 if precision == "bf16" and self.device.type == "cuda" else torch.float32

    @contextlib.contextmanager
    def path(self, precision: str):
        """The path's name, registered while the block runs."""
        if self.device.type == "cuda":
            yield "cuda_cluster"
        else:
            with self.cluster.registered(precision) as name:
                yield name

    def config(self, cell: str, H: int, B: int, precision: str) -> list[int]:
        """The plan under the current TSRNN_CLUSTER: [cluster, tile, clusters, units, forward bytes,
        backward bytes], zeros where it does not fit."""
        namespace = torch.ops.tsrnn_cluster if self.device.type == "cuda" else torch.ops.tsrnn_simt_cluster
        return list(namespace.recurrence_config(cell, torch.empty(0, H, device=self.device), B, precision))


def time_layer(measure, path: str, cell: str, shape, dtype, device, repeats: int) -> float:
    T, B, H = shape
    torch.manual_seed(0)
    make = tsrnn.LSTM if cell == "lstm" else tsrnn.PowerLawLSTM
    model = make(H, H, backend=path).to(device, dtype)
    x = torch.randn(T, B, H, device=device, dtype=dtype)
    return measure(lambda: model(x)[0].float().sum().backward(), repeats)


def sweep(device, shapes, configs, precisions, measure, repeats: int, progress=lambda rows: None) -> list[dict]:
    """A row per (shape, cell, precision): the plan's choice, cuDNN's time and, per configuration
    the plan accepts, its check (worst error / tolerance) and time."""
    target = Target(torch.device(device))
    rows = []
    for (T, B, H), precision in ((s, p) for s in shapes for p in precisions):
        dtype = target.dtype(precision)
        lstm = torch.nn.LSTM(H, H).to(target.device, dtype)
        x = torch.randn(T, B, H, device=target.device, dtype=dtype)
        cudnn_ms = measure(lambda: lstm(x)[0].float().sum().backward(), repeats)
        for cell in CELLS:
            row = {"T": T, "B": B, "H": H, "cell": cell, "precision": precision, "dtype": str(dtype)[6:],
                   "torch.nn.LSTM ms": cudnn_ms, "variants": []}
            with forced(0, 0):
                row["plan"] = target.config(cell, H, B, precision)
            rows.append(row)
            for c, tile in configs:
                with forced(c, tile):
                    config = target.config(cell, H, B, precision)
                    if config[0] == 0:
                        continue
                    variant = {"cluster": c, "tile": tile, "config": config,
                               "predicted_ms": predicted_ms(T, B, H, 4 if cell == "lstm" else 3, c, tile, precision)}
                    row["variants"].append(variant)
                    try:
                        with target.path(precision) as path:
                            check = testing.compare(path, cell, (T, B, H, H), dtype, target.device,
                                                    dt=cell != "lstm", products=precision)
                            variant.update(worst=max(check.worst(False), check.worst(True)), ok=check.ok)
                            if check.ok:
                                ms = time_layer(measure, path, cell, (T, B, H), dtype, target.device, repeats)
                                variant.update(ms=ms, vs_cudnn=ms / cudnn_ms)
                            else:
                                variant["failures"] = check.failures()
                    except Exception as exc:  # noqa: BLE001  (a variant that fails is reported, not fatal)
                        variant.update(ok=False, failures=f"{type(exc).__name__}: {exc}"[:300])
                progress(rows)
    return rows
