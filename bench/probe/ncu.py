"""Nsight Compute on one warm launch each of the tensor-core kernels' forward and backward, where the
machine lets ncu read the GPU's counters.

ncu is ``$TSRNN_PROBE_NCU`` (an injected executable: the tests point it at a stand-in printing ncu's
CSV), else the first of ``ncu`` on PATH and PLACES. A tiny first run (one kernel, one metric)
tells whether it can read counters: on gVisor machines it cannot ("LibraryNotLoaded",
ERR_NVGPUCTRPERM), and the part is skipped with ncu's line as the reason. Then ``ncu
--query-metrics`` says which of the extra metrics (EXTRA: shared-memory bank conflicts, the tensor
pipe's activity under its Ampere or Hopper names, the stall reasons STALLS) the device has, and
each of TARGETS (the cluster kernel at H = 400, the grid kernel at H = 1150; B = 20, T = 70,
bf16, each path at its plan's configuration) is profiled in one ncu run of bench/probe/ncu_target.py:
``--kernel-name regex:`` on the demangled name, ``--launch-skip WARMUP --launch-count 1`` (a launch
of a warm call), ``--clock-control none``, SECTIONS and the extra metrics, exported with ``--csv
--page raw`` (a row of metric names, a row of units, a row per profiled launch).

Record: per kernel the key metrics (``duration_us``, ``sm_throughput_pct``,
``memory_throughput_pct``, ``dram_throughput_pct``, ``achieved_occupancy_pct``,
``bank_conflicts_ld`` / ``_st``, ``tensor_pipe_pct`` and its metric, ``stalls``: cycles per issued
instruction by stall reason, ``stall_samples``: PC samples by stall reason) and ``csv``, the raw
CSV saved under ctx.out. Each ncu call runs under a timeout bounded by the deadline.
"""
from __future__ import annotations

import csv
import glob
import os
import re
import shutil
import sys

from probe.context import Context, failed, run_bounded, skipped

PLACES = ["/usr/local/cuda/bin/ncu", *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)]
TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncu_target.py")
# (kernel family, direction, path, (T, B, H)): the namespace tsrnn::cuda::<family> holds <direction>_kernel.
TARGETS = [(family, direction, path, shape) for family, path, shape in
           (("cluster", "cuda_cluster", (70, 20, 400)), ("grid", "cuda_grid", (70, 20, 1150)))
           for direction in ("forward", "backward")]
DTYPE, WARMUP = "bfloat16", 3
SECTIONS = ["SpeedOfLight", "WarpStateStats", "SourceCounters", "InstructionStats", "MemoryWorkloadAnalysis_Tables",
            "Occupancy"]
STALLS = ("membar", "barrier", "long_scoreboard", "short_scoreboard", "mio_throttle")
BANK_CONFLICTS = ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]
TENSOR_PIPE = ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",  # Ampere; wmma on Hopper
               "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]  # Hopper's wgmma
EXTRA = BANK_CONFLICTS + TENSOR_PIPE + [name for r in STALLS for name in (
    f"smsp__average_warp_latency_issue_stalled_{r}.ratio",
    f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio", f"smsp__pcsamp_warps_issue_stalled_{r}")]
KEY = {"duration_us": "gpu__time_duration.sum", "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
       "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
       "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
       "bank_conflicts_ld": BANK_CONFLICTS[0], "bank_conflicts_st": BANK_CONFLICTS[1]}
STALL_RATIO = [re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio"),
               re.compile(r"smsp__average_warp_latency_issue_stalled_(\w+)\.ratio")]  # newer name first
STALL_SAMPLES = re.compile(r"smsp__pcsamp_warps_issue_stalled_(\w+)")
TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
NO_COUNTERS = ("ERR_NVGPUCTRPERM", "LibraryNotLoaded", "permission")
TINY = "import torch; torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize()"
CHECK_LIMIT, LIMIT, MARGIN = 90.0, 240.0, 3.0  # seconds: the first run, a kernel's run, kept before the deadline


def find_ncu() -> str | None:
    injected = os.environ.get("TSRNN_PROBE_NCU")
    if injected:
        return injected
    return shutil.which("ncu") or next((p for p in PLACES if os.access(p, os.X_OK)), None)


def call(ctx: Context, ncu: str, args: list[str], limit: float) -> tuple[int, str]:
    """ncu's exit code and output (stdout and stderr), within ``limit`` seconds and the deadline."""
    seconds = min(limit, ctx.left() - MARGIN)
    if seconds < 1:
        return -1, "==ERROR== not started: the probe's deadline"
    rc, output = run_bounded([ncu, *args], seconds)
    if rc is None:
        return -1, f"{output}\n==ERROR== timed out after {seconds:.0f} s"
    return rc, output


def complaint(text: str, rc: int) -> str:
    """One line saying why a run profiled nothing: ncu's line about counters, else its last error."""
    lines = [line.strip() for line in text.splitlines()]
    named = [line for line in lines if any(marker in line for marker in NO_COUNTERS)]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    return (named or errors or [f"exit code {rc}, no kernel profiled"])[-1][:300]


def parse_raw(text: str) -> list[dict[str, tuple[str, str]]]:
    """ncu's ``--csv --page raw`` in ``text`` (other lines, ncu's ==PROF== ones and the program's, are
    dropped): per profiled launch, metric name -> (value, unit)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    header, *rows = csv.reader(lines[start:])
    units = {}
    if rows and rows[0] and rows[0][0] == "":  # the units row
        units = dict(zip(header, rows.pop(0)))
    return [{name: (value, units.get(name, "")) for name, value in zip(header, row)} for row in rows]


def number(value: str) -> float | None:
    try:
        return float(value.replace(",", ""))
    except ValueError:  # "n/a", ""
        return None


def key_metrics(launch: dict[str, tuple[str, str]]) -> dict:
    """The record's metrics of one profiled launch (None where ncu did not report one)."""
    out = {"name": launch.get("Kernel Name", ("", ""))[0][:200]}
    for key, metric in KEY.items():
        value, unit = launch.get(metric, ("", ""))
        out[key] = number(value)
        if key == "duration_us" and out[key] is not None:
            out[key] *= TO_US.get(unit, 1.0)
    tensor = next((m for m in TENSOR_PIPE if number(launch.get(m, ("", ""))[0]) is not None), None)
    out.update(tensor_pipe_pct=tensor and number(launch[tensor][0]), tensor_pipe_metric=tensor)
    for pattern in STALL_RATIO:
        stalls = {m.group(1): number(v) for name, (v, _) in launch.items() if (m := pattern.fullmatch(name))}
        if stalls:
            break
    out["stalls"] = {k: v for k, v in sorted(stalls.items(), key=lambda kv: -(kv[1] or 0)) if v}
    samples = {m.group(1): number(v) for name, (v, _) in launch.items()
               if (m := STALL_SAMPLES.fullmatch(name)) and not name.endswith("_not_issued")}
    out["stall_samples"] = {k: v for k, v in sorted(samples.items(), key=lambda kv: -(kv[1] or 0)) if v}
    return out


def available(ctx: Context, ncu: str) -> list[str]:
    """The EXTRA metrics the device has (``ncu --query-metrics`` lists base names); the bank
    conflicts' alone when the query says nothing."""
    _, text = call(ctx, ncu, ["--query-metrics"], CHECK_LIMIT)
    names = {line.split()[0] for line in text.splitlines() if line.strip() and "__" in line.split()[0]}
    return [m for m in EXTRA if m.split(".")[0] in names] or BANK_CONFLICTS


def profile(ctx: Context, ncu: str, family: str, direction: str, path: str, shape, metrics: list[str]) -> dict:
    T, B, H = shape
    record = {"kernel": f"{family} {direction}", "path": path, "T": T, "B": B, "H": H, "dtype": DTYPE}
    args = ["--csv", "--page", "raw", "--clock-control", "none", "--kernel-name-base", "demangled",
            "--kernel-name", f"regex:tsrnn::cuda::{family}::.*{direction}_kernel", "--launch-skip", str(WARMUP),
            "--launch-count", "1", *[a for s in SECTIONS for a in ("--section", s)], "--metrics", ",".join(metrics),
            sys.executable, TARGET, path, str(T), str(B), str(H), DTYPE, str(WARMUP + 1)]
    ctx.log(f"ncu {family} {direction} {shape} {DTYPE}")
    rc, text = call(ctx, ncu, args, LIMIT)
    launches = parse_raw(text)
    if not launches:
        return {**record, **failed(complaint(text, rc))}
    name = f"ncu_{family}_{direction}.csv"
    ctx.out.mkdir(parents=True, exist_ok=True)
    (ctx.out / name).write_text("\n".join(line for line in text.splitlines() if line.startswith('"')) + "\n")
    return {**record, "status": "ok", **key_metrics(launches[0]), "csv": name}


def run(ctx: Context) -> dict:
    ncu = find_ncu()
    if ncu is None:
        return skipped(f"ncu not found (PATH, {', '.join(PLACES[:1] + ['/opt/nvidia/nsight-compute/*/ncu'])})")
    if ctx.device != "cuda" and "TSRNN_PROBE_NCU" not in os.environ:
        return skipped(f"no GPU (device {ctx.device})")
    rc, text = call(ctx, ncu, ["--csv", "--page", "raw", "--metrics", KEY["duration_us"], "--launch-count", "1",
                               sys.executable, "-c", TINY], CHECK_LIMIT)
    if rc != 0 or not parse_raw(text):
        return skipped(f"ncu cannot profile here: {complaint(text, rc)}", ncu=ncu)
    metrics = available(ctx, ncu)
    kernels = []
    record = {"status": "ok", "ncu": ncu, "metrics_requested": metrics, "kernels": kernels}
    for target in TARGETS:
        kernels.append(profile(ctx, ncu, *target, metrics))
        ctx.save(record)
    if not any(k["status"] == "ok" for k in kernels):
        return {**record, **failed("; ".join(f"{k['kernel']}: {k['reason']}" for k in kernels))}
    return record
