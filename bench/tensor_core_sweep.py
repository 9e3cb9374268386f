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
variable unset) is recorded, and checked and timed too where it is none of the forced ones (the
grid kernel's forward and backward on configurations of their own: a variant of cluster 0). bench/gpu_report.py runs ``sweep`` as its job "sweep" and keeps the
rows in its JSON.

On the CPU (``--quick --device cpu`` of the report, in CI), the same code runs the kernels'
sources under the SIMT emulation of tests/simt (paths "cluster_simt_tf32", "grid_simt_bf16", ...,
float32 layers) on tiny shapes: the times are the emulator's and mean nothing; the checks are real.
"""
from __future__ import annotations

import contextlib
import os
import sys

import torch

import tsrnn
from tsrnn import testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model  # noqa: E402  (bench/cost_model.py, beside this script: the plans' fitted model)
from simt.cluster import forced  # noqa: E402  (TSRNN_CLUSTER / TSRNN_GRID for the duration of a block)

# Per kernel, (T, B, H) of the GPU sweep (the target shapes it serves) and of the quick CPU run, and
# the configurations forced: (cluster size, batch tile) or (cluster size, batch chunk; 80: the
# whole batch of 80 at once).
SHAPES = {"cluster": [(70, 20, 400), (70, 80, 400), (1000, 128, 128)], "grid": [(70, 20, 1150), (70, 80, 1150)]}
QUICK_SHAPES = {"cluster": [(3, 17, 20)], "grid": [(3, 17, 37)]}
CONFIGS = {"cluster": [(c, tile) for c in (1, 2, 4, 8, 16) for tile in (8, 16, 24, 32)],
           "grid": [(c, chunk) for c in (2, 4, 8, 16) for chunk in (16, 32, 48, 80)]}
QUICK_CONFIGS = {"cluster": [(2, 32)], "grid": [(2, 16)]}  # a cluster each: the emulator is slow
CELLS = ("lstm", "plstm_coupled")
PATHS = {"cluster": "cuda_cluster", "grid": "cuda_grid"}

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
        """bench/cost_model.py's prediction (fitted on an H200, with its resident clusters)."""
        return cost_model.predict_ms(T, B, H, cost_model.gates_of(cell), precision, self.kernel, config)


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
                    if config[0]:
                        row["variants"].append(variant(target, measure, repeats, cell, (T, B, H), precision, dtype,
                                                       cudnn_ms, {"cluster": c, "tile": tile, "config": config}))
                progress(rows)
            if row["plan"][0] and all(v["config"] != row["plan"] for v in row["variants"]):
                with forced(0, 0, kernel):  # the plan's own, each grid direction its own configuration
                    row["variants"].append(variant(target, measure, repeats, cell, (T, B, H), precision, dtype,
                                                   cudnn_ms, {"cluster": 0, "tile": 0, "config": row["plan"]}))
                progress(rows)
    return rows


def variant(target, measure, repeats: int, cell: str, shape, precision: str, dtype, cudnn_ms: float, record: dict) -> dict:
    """``record`` (the configuration forced now) with its predicted time, its check against the
    float64 reference (worst error / tolerance) and, if it passes, its measured time."""
    T, B, H = shape
    record["predicted_ms"] = target.predicted_ms(T, B, H, cell, record["config"], precision)
    try:
        with target.path(precision) as path:
            check = testing.compare(path, cell, (T, B, H, H), dtype, target.device, dt=cell != "lstm",
                                    products=precision)
            record.update(worst=max(check.worst(False), check.worst(True)), ok=check.ok)
            if check.ok:
                ms = time_layer(measure, path, cell, (T, B, H), dtype, target.device, repeats)
                record.update(ms=ms, vs_cudnn=ms / cudnn_ms)
            else:
                record["failures"] = check.failures()
    except Exception as exc:  # noqa: BLE001  (a variant that fails is reported, not fatal)
        record.update(ok=False, failures=f"{type(exc).__name__}: {exc}"[:300])
    return record
