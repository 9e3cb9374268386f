"""The removal ladder: each tensor-core kernel timed with one part left out at a time (the rungs of
csrc/recurrence/cuda/probe.h: the mma, the whole product, the cell's global loads, its global
stores, the distributed shared memory exchange, relaxed or no cluster barriers, and for the grid
kernel the load of h (dz) from L2 and the flag barrier), at each site of ``shapes.sites``.

Each rung's forward and backward are timed apart on the kernel alone (the recurrence operators; on
a GPU CUDA events around one launch, the median of ``repeats``), the backward on the baseline's
forward outputs. A rung's difference to the baseline is what its part costs on the critical path
(parts that overlap others cost less than their own time); the results of a rung are wrong by
design and are not used. Under the CPU's emulation the times mean nothing (each rung runs once);
there each rung is checked to really leave its part out: the emulator's counters (mma, fragment loads, cluster
arrivals and waits, distributed shared memory mappings, __ldcg loads, atomic writes) or the
outputs must show it (``verify``), so a rung that silently runs the baseline fails.
"""
from __future__ import annotations

import statistics
import time

import torch

from probe import kernels, shapes
from probe.context import Context, failed

THREADS = 256  # a block of either kernel


def time_ms(fn, repeats: int) -> float:
    """Median milliseconds of one call of fn on the GPU (CUDA events around it), after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def emulated(probe: kernels.Probe, site: shapes.Site, x, base_out) -> tuple[dict, torch.Tensor]:
    """A rung under the CPU's emulation: one forward and one backward (on the baseline's forward
    outputs) into NaN-filled buffers, each timed once (the times mean nothing there); its row (the
    times and what the emulated kernels did: their counts) and the forward's h."""
    from simt import emulation

    torch.ops.simt.reset_counts()
    with emulation.nan_filled():
        started = time.perf_counter()
        h = probe.forward(site.kernel, x, site.precision)[0]
        middle = time.perf_counter()
        probe.backward(site.kernel, x, base_out, site.precision)
        ended = time.perf_counter()
    return {"forward_ms": 1e3 * (middle - started), "backward_ms": 1e3 * (ended - middle),
            "counts": dict(torch.ops.simt.counts())}, h


def verify(part: str, base: dict, rung: dict, base_h: torch.Tensor, rung_h: torch.Tensor, blocks: dict) -> bool:
    """Whether a rung's counts (forward and backward) and forward h show that it left ``part`` out."""
    arrivals = lambda c: c["arrive_release"] + c["arrive_relaxed"]  # noqa: E731
    checks = {
        "mma": rung["mma"] == 0 < base["mma"] and rung["fragment_load"] > 0,
        "operands": rung["fragment_load"] == 0 < base["fragment_load"] and rung["mma"] == 0,
        "cell_loads": not torch.equal(torch.nan_to_num(base_h), torch.nan_to_num(rung_h)),
        "stores": bool(torch.isnan(rung_h).all()) and bool(torch.isfinite(base_h).all()),
        "exchange": rung["map_shared"] == 0 < base["map_shared"],
        "relaxed": rung["arrive_relaxed"] > 0 and rung["arrive_release"] < base["arrive_release"],
        # a cluster sync before each launch's loop and one before its exit, nothing in the time loop:
        # neither cluster arrivals (grid kernel) nor mbarrier waits (cluster kernel)
        "barriers": arrivals(rung) == 2 * sum(blocks.values()) * THREADS and rung["mbarrier_wait"] == 0
                    and (arrivals(base) > arrivals(rung) or base["mbarrier_wait"] > 0),
        "grid_loads": rung["cached_load"] == 0 < base["cached_load"],
        "flag_barrier": rung["atomic_write"] == 0 < base["atomic_write"],
    }
    return checks[part]


def ladder_site(probe: kernels.Probe, site: shapes.Site, repeats: int, ignore_skip: bool = False) -> dict:
    T, B, H = site.shape
    with kernels.forced(*site.forced, site.kernel):
        config = probe.config(site.kernel, H, B, site.precision)
        if config[0] == 0:
            return failed(f"the plan does not take {site.id}")
        x, blocks = probe.inputs(T, B, H), probe.blocks(config)
        with probe.armed(site.kernel):
            base_out = probe.forward(site.kernel, x, site.precision)
        record, base_counts, base_h = {"status": "ok", "config": config, "rungs": {}}, None, None
        for rung in probe.rungs(site.kernel):
            name = probe.part_names(rung)
            with probe.armed(site.kernel, rung, ignore_skip=ignore_skip):
                if probe.device == "cuda":
                    row = {"mask": rung,
                           "forward_ms": time_ms(lambda: probe.forward(site.kernel, x, site.precision), repeats),
                           "backward_ms": time_ms(lambda: probe.backward(site.kernel, x, base_out, site.precision), repeats)}
                else:
                    emulated_row, h = emulated(probe, site, x, base_out)
                    row = {"mask": rung, **emulated_row}
                    if rung == 0:
                        base_counts, base_h = row["counts"], h
                    else:
                        row["skipped_verified"] = verify(name, base_counts, row["counts"], base_h, h, blocks)
            record["rungs"][name] = row
        base = record["rungs"]["baseline"]
        for row in record["rungs"].values():
            for direction, steps in (("forward", T), ("backward", T + 1)):
                row[f"{direction}_saved_us_per_step"] = 1e3 * (base[f"{direction}_ms"] - row[f"{direction}_ms"]) / steps
    return record


def run(ctx: Context, probe: kernels.Probe | None = None, ignore_skip: bool = False) -> dict:
    """The ladder at every site (``ignore_skip``: the tests' planted bug, every rung runs the baseline)."""
    probe = probe or kernels.Probe(ctx.device)
    repeats = 1 if ctx.device == "cpu" else 20
    record = {"status": "ok", "emulated": ctx.device == "cpu", "repeats": repeats, "sites": {},
              "note": "a rung's results are wrong by design; its time difference to the baseline is what the part "
                      "costs on the critical path"}
    for site in shapes.sites(ctx.device):
        if ctx.left() < 10:
            record["stopped"] = f"deadline before {site.id}"
            break
        try:
            record["sites"][site.id] = ladder_site(probe, site, repeats, ignore_skip)
        except Exception as exc:  # noqa: BLE001  (one site failing is recorded, the others still run)
            record["sites"][site.id] = failed(f"{type(exc).__name__}: {exc}")
        ctx.log(f"ladder {site.id}: {record['sites'][site.id]['status']}")
        ctx.save(record)
    return record
