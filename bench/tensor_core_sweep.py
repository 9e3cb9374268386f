"""The tensor-core kernels' configurations, each checked then timed beside cuDNN in one job.

Two kernels (KERNELS): the cluster-resident one (csrc/recurrence/cuda/cluster_recurrence.cu, the
path "cuda_cluster", configurations (cluster size, batch tile) forced through TSRNN_CLUSTER) at
the shapes whose W_hh fits one cluster, and the grid-resident one (grid_recurrence.cu, "cuda_grid",
(cluster size, batch chunk) through TSRNN_GRID) at H = 1150. For each of its shapes (T, B, H),
cell (the LSTM, which the multi-timescale LSTM runs too, and the coupled pLSTM) and precision
(TF32: float32 layers with torch's default torch.backends.cudnn.allow_tf32; bf16: bfloat16
layers), every configuration the kernel's plan accepts is first checked against the float64
reference (tsrnn.testing.compare, the precision's tolerance rows) and, if it passes, timed
forward+backward (fwd+bwd ms, median), with the cost model's prediction beside it; torch.nn.LSTM of
the same dtype (cuDNN, torch's defaults) is timed in the same job, and the plan's own choice (the
variable unset) is recorded. bench/gpu_report.py runs ``sweep`` as its job "sweep" and keeps the
rows in its JSON.

On the CPU (``--quick --device cpu`` of the report, in CI), the same code runs the kernels'
sources under the SIMT emulation of tests/simt (paths "cluster_simt_tf32", "grid_simt_bf16", ...,
float32 layers) on tiny shapes: the times are the emulator's and mean nothing; the checks are real.
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
from simt.cluster import forced  # noqa: E402  (TSRNN_CLUSTER / TSRNN_GRID for the duration of a block)

# Per kernel, (T, B, H) of the GPU sweep (the target shapes it serves) and of the quick CPU run, and
# the configurations forced: (cluster size, batch tile) or (cluster size, batch chunk; 80: the
# whole batch of 80 at once).
SHAPES = {"cluster": [(70, 20, 400), (70, 80, 400), (1000, 128, 128)], "grid": [(70, 20, 1150), (70, 80, 1150)]}
QUICK_SHAPES = {"cluster": [(3, 17, 20)], "grid": [(3, 17, 37)]}
CONFIGS = {"cluster": [(c, tile) for c in (1, 2, 4, 8, 16) for tile in (16, 32)],
           "grid": [(c, chunk) for c in (2, 4, 8, 16) for chunk in (16, 32, 80)]}
QUICK_CONFIGS = {"cluster": [(2, 32)], "grid": [(2, 16)]}  # a cluster each: the emulator is slow
CELLS = ("lstm", "plstm_coupled")
PATHS = {"cluster": "cuda_cluster", "grid": "cuda_grid"}

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
FLAG_BARRIER, L2_LATENCY = 0.8e-6, 0.3e-6  # the grid kernel's flag barrier through L2, the first read from L2


def rest_ms(T: int, B: int, H: int, gates: int, precision: str) -> float:
    """What both kernels add to their steps: the input projection and weight-gradient GEMMs, the
    HBM traffic and the host's work per call."""
    item = 4 if precision == "tf32" else 2
    gemms = 3 * 2 * T * B * H * gates * H / (PEAK[precision] * CUBLAS_EFFICIENCY)
    return 1e3 * (gemms + T * B * H * 29 * item / HBM + HOST)


def predicted_grid_ms(T: int, B: int, H: int, gates: int, config: list[int], precision: str) -> float:
    """The model's forward+backward milliseconds of the grid kernel's plan ``config`` ([cluster,
    chunk, clusters, units, ...]; grid_recurrence.cu's direction_cycles): per step and direction the
    flag barrier, the first read from L2, the block's product bounded by the tensor cores, by
    reading its weight slice from shared memory once per chunk, or by reading its slice of h (dz)
    from L2, the reduction over the cluster, two cluster barriers per extra chunk, the cell."""
    cluster, chunk, clusters, units = config[:4]
    item, padded = (4 if precision == "tf32" else 2), math.ceil(B / 16) * 16
    chunks = math.ceil(B / chunk)
    step = 0.0
    for rows, width, cell in ((math.ceil(gates * units / 16) * 16, math.ceil(math.ceil(H / cluster) / 16) * 16, CELL),
                              (math.ceil(units / 16) * 16, math.ceil(math.ceil(gates * H / cluster) / 16) * 16,
                               1.5 * CELL)):
        mma = 2 * padded * rows * width / (PEAK[precision] / SMS * MMA_EFFICIENCY)
        shared = chunks * rows * width * item / (SHARED_BYTES_PER_CYCLE * CLOCK)
        inner = padded * width * item / (INGRESS_BYTES_PER_CYCLE * CLOCK)
        reduce = (cluster - 1) * padded * rows * 4 / cluster / (INGRESS_BYTES_PER_CYCLE * CLOCK)
        barriers = (2 * chunks - 1) * (CLUSTER_BARRIER if cluster > 1 else 0.05e-6)
        step += FLAG_BARRIER + L2_LATENCY + barriers + max(mma, shared, inner) + reduce + cell
    return 1e3 * T * step + rest_ms(T, B, H, gates, precision)


def predicted_ms(T: int, B: int, H: int, gates: int, cluster: int, tile: int, precision: str) -> float:
    """The model's forward+backward milliseconds of one configuration of the cluster kernel: per
    step and direction, the exposed barrier phase (phase B hides behind the cell where it can),
    then the block's product, bounded by the tensor cores, by reading W_r from shared memory, or by
    the exchange; times the waves of clusters; plus the GEMMs, the HBM traffic and the host."""
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
    return 1e3 * waves * T * step + rest_ms(T, B, H, gates, precision)


class Target:
    """Where the sweep of ``kernel`` runs: on a GPU the registry's path (precision from the layer's
    dtype and cuDNN's TF32 flag), on the CPU the emulated kernel of tests/simt with the precision
    fixed, on an emulated H100 (132 SMs: the plan as it would choose there) or, for the grid
    kernel, 4 SMs (the emulator runs every block of a launch)."""

    def __init__(self, device: torch.device, kernel: str):
        self.device, self.kernel = device, kernel
        if device.type == "cpu":
            from simt import build, cluster, emulation

            emulation.load(build.library())
            emulation.emulate(4 if kernel == "grid" else 132, 0)
            self.cluster = cluster

    def dtype(self, precision: str) -> torch.dtype:
        return torch.bfloat16 if precision == "bf16" and self.device.type == "cuda" else torch.float32

    @contextlib.contextmanager
    def path(self, precision: str):
        """The path's name, registered while the block runs."""
        if self.device.type == "cuda":
            yield PATHS[self.kernel]
        else:
            with self.cluster.registered(precision, self.kernel) as name:
                yield name

    def config(self, cell: str, H: int, B: int, precision: str) -> list[int]:
        """The plan under the current forcing: [cluster, tile or chunk, clusters, units, forward
        bytes, backward bytes], zeros where it does not fit."""
        namespace = f"tsrnn_{self.kernel}" if self.device.type == "cuda" else f"tsrnn_simt_{self.kernel}"
        return list(getattr(torch.ops, namespace).recurrence_config(cell, torch.empty(0, H, device=self.device), B,
                                                                    precision))

    def predicted_ms(self, T: int, B: int, H: int, cell: str, config: list[int], precision: str) -> float:
        gates = 4 if cell == "lstm" else 3
        if self.kernel == "grid":
            return predicted_grid_ms(T, B, H, gates, config, precision)
        return predicted_ms(T, B, H, gates, config[0], config[1], precision)


def time_layer(measure, path: str, cell: str, shape, dtype, device, repeats: int) -> float:
    T, B, H = shape
    torch.manual_seed(0)
    make = tsrnn.LSTM if cell == "lstm" else tsrnn.PowerLawLSTM
    model = make(H, H, backend=path).to(device, dtype)
    x = torch.randn(T, B, H, device=device, dtype=dtype)
    return measure(lambda: model(x)[0].float().sum().backward(), repeats)


def sweep(device, kernel: str, shapes, configs, precisions, measure, repeats: int, rows=None,
          progress=lambda rows: None) -> list[dict]:
    """A row per (shape, cell, precision) of ``kernel`` ("cluster", "grid") appended to ``rows``: the
    plan's choice, cuDNN's time and, per configuration the plan accepts, its check (worst error /
    tolerance), its predicted and measured times."""
    target = Target(torch.device(device), kernel)
    rows = [] if rows is None else rows
    for (T, B, H), precision in ((s, p) for s in shapes for p in precisions):
        dtype = target.dtype(precision)
        lstm = torch.nn.LSTM(H, H).to(target.device, dtype)
        x = torch.randn(T, B, H, device=target.device, dtype=dtype)
        cudnn_ms = measure(lambda: lstm(x)[0].float().sum().backward(), repeats)
        for cell in CELLS:
            row = {"kernel": kernel, "T": T, "B": B, "H": H, "cell": cell, "precision": precision,
                   "dtype": str(dtype)[6:], "torch.nn.LSTM ms": cudnn_ms, "variants": []}
            with forced(0, 0, kernel):
                row["plan"] = target.config(cell, H, B, precision)
            rows.append(row)
            for c, tile in configs:
                with forced(c, tile, kernel):
                    config = target.config(cell, H, B, precision)
                    if config[0] == 0:
                        continue
                    variant = {"cluster": c, "tile": tile, "config": config,
                               "predicted_ms": target.predicted_ms(T, B, H, cell, config, precision)}
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
