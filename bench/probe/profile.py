"""torch.profiler over one warm forward+backward call per model, shape and dtype: where a call's time goes.

Models (``models``): torch.nn.LSTM (cuDNN, torch's defaults), tsrnn.LSTM on its ``cudnn`` path (the same
kernels behind tsrnn's module) and the multi-timescale LSTM on it (``MTS``: its effective bias in its
flat buffer's slot, so cuDNN should copy no weight), tsrnn.LSTM on the tensor-core kernel that serves the shape
(``cuda_cluster`` at H = 128 / 400, ``cuda_grid`` at H = 1150, the path name as the backend: the
kernel's plan picks the configuration), and the same with its input projection's GEMMs on torch's
float32 GEMMs (``torch_gemms``: the fixed cost per call before the tensor-core GEMMs); a path that
refuses a shape is recorded as refused with tsrnn.backend's reason. At each (T, B, H) of SHAPES, float32 and bf16 (``ctx.quick``: the first
shape, float32):

* ``host_ms`` / ``wall_ms``: median of HOST_CALLS unprofiled calls (after WARMUP), the host-side
  time until the call returns and until the device is done (torch.cuda.synchronize);
* one more call under torch.profiler (CPU + CUDA activities); its GPU activities (the events of
  ``prof.events()`` whose ``device_type`` is CUDA: kernels, copies, memsets, with
  ``time_range`` start/end in us) give per name the calls and total us (the TOP longest), their
  busy time (the union of their intervals) against their span (first start to last end), and the
  idle gaps between them (total, count, the GAPS largest), and ``gemm_us``, the total of the GEMM
  kernels (cuBLAS's names: GEMM).

A run that recorded no GPU activity (CUPTI unavailable) is "partial", with its host and wall times.

``cudnn_vs_torch`` puts the ``cudnn`` path's table (each of its two models') beside torch.nn.LSTM's at each shape and dtype:
the kernels only one of them runs, those both run ([cudnn path, torch.nn.LSTM] calls and total us,
the largest difference first), and the path's minus torch's kernel total, busy, span, idle, host
and wall times (what the path's 0.15-0.9 ms extra per call is made of).

On the CPU (``ctx.device == "cpu"``) the same code is a stand-in, exercised in CI in seconds: CPU
activities only, a tiny shape, float32, with the CPU's counterparts (``onednn``, torch's own LSTM
kernel, for ``cudnn``; the compiled ``cpu`` path for the tensor-core kernel); the "activities" are
then the CPU ops, each with its own time (without its child ops'), and the record says it is a
stand-in.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import statistics
import time

import torch

import tsrnn
from probe.context import Context, failed
from tsrnn import testing

SHAPES = [(70, 20, 400), (70, 80, 400), (70, 20, 1150), (70, 80, 1150), (1000, 128, 128)]
CPU_SHAPES = {True: [(5, 2, 8)], False: [(20, 4, 32)]}  # the stand-in's, by ctx.quick
TENSOR_CORE = {128: "cuda_cluster", 400: "cuda_cluster", 1150: "cuda_grid"}  # the kernel serving each H
STAND_IN = {"cudnn": "onednn", "tensor_core": "cpu"}  # the CPU's counterparts of the GPU paths
WARMUP, HOST_CALLS, TOP, GAPS = 3, 5, 15, 5
NAME_CHARS = 160  # kernel names are long template instantiations: cut in the record, not when grouping
NO_EVENTS = "torch.profiler recorded no GPU activity (CUPTI cannot trace on this machine?)"
MIN_LEFT = 15.0  # seconds: a run that would start with less left before the deadline is not started
GEMM = re.compile(r"gemm|gemv|xmma|cutlass|cublas", re.IGNORECASE)  # cuBLAS's kernels (and ATen's CPU mm ops)


def models(device: str, H: int) -> dict[str, str | None]:
    """Model name -> the tsrnn path it runs (None: torch.nn.LSTM; TORCH_GEMMS + a path: that path with
    its input projection's GEMMs on torch's float32 ones, ``torch_gemms``)."""
    if device == "cpu":
        return {"torch.nn.LSTM": None, "tsrnn cudnn": STAND_IN["cudnn"], "tsrnn MTS cudnn": MTS + STAND_IN["cudnn"],
                "tsrnn tensor_core": STAND_IN["tensor_core"]}
    kernel = TENSOR_CORE.get(H, "cuda_cluster")
    return {"torch.nn.LSTM": None, "tsrnn cudnn": "cudnn", "tsrnn MTS cudnn": MTS + "cudnn", "tsrnn tensor_core": kernel,
            "tsrnn tensor_core, torch GEMMs": TORCH_GEMMS + kernel}


TORCH_GEMMS = "torch_gemms:"
MTS = "mts:"  # a model name's path prefix: the multi-timescale LSTM (inverse-gamma timescales) on that path
CUDNN_MODELS = ("tsrnn cudnn", "tsrnn MTS cudnn")  # compared with torch.nn.LSTM (``compare``)


@contextlib.contextmanager
def torch_gemms(path: str):
    """The registry with a copy of ``path`` whose input projection (x W_ih^T and, in the backward,
    g W_ih and g^T x) runs torch's float32 GEMMs on rounded operands, as before the tensor-core GEMMs
    (tsrnn.ops.projection.tensor_core_projection): the fixed cost per call before and after, side by
    side (dW_hh's GEMM is the recurrence operator's own, on the tensor cores in both); yields its name."""
    from tsrnn import backend
    from tsrnn.ops import projection

    record = dataclasses.replace(backend.REGISTRY[path], name=f"{path}_torch_gemms", projection=projection.torch_projection)
    with testing.registered(record) as name:
        yield name


def activities(prof, device: str) -> list[tuple[str, float, float, float]]:
    """(name, start us, end us, own us) of each GPU activity of the profiled call; on the CPU stand-in
    of each CPU op, its own time without its child ops'."""
    from torch.autograd import DeviceType

    if device == "cpu":
        return [(e.name, e.time_range.start, e.time_range.end, e.self_cpu_time_total) for e in prof.events()
                if e.device_type == DeviceType.CPU and not e.is_async]
    return [(e.name, e.time_range.start, e.time_range.end, e.time_range.elapsed_us()) for e in prof.events()
            if e.device_type == DeviceType.CUDA]


def kernel_table(events) -> dict[str, dict]:
    """Per name, its calls and total (own) us, longest first."""
    table: dict[str, dict] = {}
    for name, _, _, own in events:
        row = table.setdefault(name, {"calls": 0, "total_us": 0.0})
        row["calls"] += 1
        row["total_us"] += own
    return dict(sorted(table.items(), key=lambda item: -item[1]["total_us"]))


def timeline(events) -> dict:
    """Busy time (the union of the intervals), span (first start to last end) and the idle gaps between
    the merged intervals, in us."""
    if not events:
        return {"busy_us": 0.0, "span_us": 0.0, "idle_us": 0.0, "gap_count": 0, "largest_gaps_us": []}
    intervals = sorted((start, end) for _, start, end, _ in events)
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    gaps = [b[0] - a[1] for a, b in zip(merged, merged[1:])]
    busy = sum(end - start for start, end in merged)
    return {"busy_us": round(busy, 1), "span_us": round(merged[-1][1] - merged[0][0], 1),
            "idle_us": round(sum(gaps), 1), "gap_count": len(gaps),
            "largest_gaps_us": [round(g, 1) for g in sorted(gaps, reverse=True)[:GAPS]]}


def rows(table: dict[str, dict], top: int | None = TOP) -> list[dict]:
    return [{"name": name[:NAME_CHARS], "calls": row["calls"], "total_us": round(row["total_us"], 1)}
            for name, row in list(table.items())[:top]]


def profile_call(step, device: str) -> tuple[dict, dict]:
    """The record of one model at one shape and its whole kernel table (for the comparison)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(WARMUP):
        step()
    sync()
    host, wall = [], []
    for _ in range(HOST_CALLS):
        started = time.perf_counter()
        step()
        returned = time.perf_counter()
        sync()
        host.append(returned - started)
        wall.append(time.perf_counter() - started)
    kinds = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=kinds) as prof:
        step()
        sync()
    events = activities(prof, device)
    table = kernel_table(events)
    status = {"status": "ok"} if events else {"status": "partial", "reason": NO_EVENTS}
    return {**status, "host_ms": round(1e3 * statistics.median(host), 3),
            "wall_ms": round(1e3 * statistics.median(wall), 3), "kernel_count": len(events),
            "kernel_total_us": round(sum(own for *_, own in events), 1),
            "gemm_us": round(sum(own for name, *_, own in events if GEMM.search(name)), 1),
            **timeline(events), "kernels": rows(table)}, table


def measure(ctx: Context, name: str, path: str | None, shape, dtype) -> tuple[dict, dict]:
    if path and path.startswith(TORCH_GEMMS):
        with torch_gemms(path[len(TORCH_GEMMS):]) as copy:
            return measure(ctx, name, copy, shape, dtype)
    T, B, H = shape
    mts = bool(path) and path.startswith(MTS)
    path = path[len(MTS):] if mts else path
    record = {"model": name, "path": path or "torch.nn.LSTM", "T": T, "B": B, "H": H, "dtype": str(dtype)[6:]}
    reason = path and testing.why_not(path, "lstm", (T, B, H, H), dtype, ctx.device)
    if reason:
        return {**record, "status": "refused", "reason": reason}, {}
    torch.manual_seed(0)
    timescales = [tsrnn.memory.timescales.inverse_gamma_quantiles(H, 0.56)] if mts else None
    model = (torch.nn.LSTM(H, H) if path is None else tsrnn.LSTM(H, H, timescales=timescales, backend=path))
    model = model.to(ctx.device, dtype)
    x = torch.randn(T, B, H, device=ctx.device, dtype=dtype)

    def step():
        model(x)[0].float().sum().backward()

    try:
        result, table = profile_call(step, ctx.device)
    except (RuntimeError, ValueError) as exc:  # a path this shape or build cannot take: recorded, not fatal
        return {**record, **failed(f"{type(exc).__name__}: {exc}")}, {}
    return {**record, **result}, table


def compare(path_run: dict, path_table: dict, torch_run: dict, torch_table: dict) -> dict:
    """The ``cudnn`` path's kernels beside torch.nn.LSTM's at one shape and dtype."""
    both = sorted((name for name in path_table if name in torch_table),
                  key=lambda name: -abs(path_table[name]["total_us"] - torch_table[name]["total_us"]))
    keys = ("kernel_total_us", "busy_us", "span_us", "idle_us", "host_ms", "wall_ms")
    return {"model": path_run["model"], "T": path_run["T"], "B": path_run["B"], "H": path_run["H"], "dtype": path_run["dtype"],
            "only_in_cudnn_path": rows({k: v for k, v in path_table.items() if k not in torch_table}),
            "only_in_torch_nn_lstm": rows({k: v for k, v in torch_table.items() if k not in path_table}),
            "in_both": [{"name": name[:NAME_CHARS], "calls": [path_table[name]["calls"], torch_table[name]["calls"]],
                         "total_us": [round(path_table[name]["total_us"], 1), round(torch_table[name]["total_us"], 1)]}
                        for name in both[:TOP]],
            "cudnn_path_minus_torch": {k: round(path_run[k] - torch_run[k], 3) for k in keys}}


def run(ctx: Context) -> dict:
    cpu = ctx.device == "cpu"
    shapes = CPU_SHAPES[ctx.quick] if cpu else SHAPES[:1] if ctx.quick else SHAPES
    dtypes = [torch.float32] if cpu or ctx.quick else [torch.float32, torch.bfloat16]
    record = {"status": "ok", "device": "cpu" if cpu else torch.cuda.get_device_name(),
              "torch": torch.__version__, "runs": [], "cudnn_vs_torch": []}
    if cpu:
        record["stand_in"] = (f"CPU stand-in: CPU activities only, CPU ops (own time) as kernels; {STAND_IN['cudnn']} "
                              f"for cudnn, {STAND_IN['tensor_core']} for the tensor-core kernels")
    for shape in shapes:
        for dtype in dtypes:
            runs, tables = {}, {}
            for name, path in models(ctx.device, shape[2]).items():
                if ctx.left() < MIN_LEFT:
                    record["stopped"] = f"deadline: before {name} at {shape} {dtype}"
                    return record
                ctx.log(f"profile {name} {shape} {dtype}")
                runs[name], tables[name] = measure(ctx, name, path, shape, dtype)
                record["runs"].append(runs[name])
                ctx.save(record)
            for name in CUDNN_MODELS:
                if runs[name]["status"] == runs["torch.nn.LSTM"]["status"] == "ok":
                    record["cudnn_vs_torch"].append(compare(runs[name], tables[name],
                                                            runs["torch.nn.LSTM"], tables["torch.nn.LSTM"]))
    if not any(r["status"] == "ok" for r in record["runs"]):
        return {**record, **failed("no model profiled: " + "; ".join(sorted({r["reason"] for r in record["runs"]})))}
    return record
