"""The phase trace: microseconds per phase per recurrent step of the tensor-core kernels, forward and
backward, at each site of ``shapes.sites`` (the probe's build: csrc/recurrence/cuda/probe.h).

Thread 0 of every block adds the SM clock's cycles between its marks to the phase it ended, per
step. The record gives, per site, direction and phase: block 0's mean and median microseconds a
step, and the slowest and fastest block's mean; beside them the step's wall time from the global
timer (first block's start to last block's end over the steps) and the SM clock rate measured as
cycles over global-timer nanoseconds. A phase's cycles are thread 0's: a load issued in one phase
is charged to the phase that first uses its value; block barriers charge the wait for the slowest
warp to the barrier's phase. On the CPU the kernels run under the SIMT emulation, whose clock is a
counter: the numbers only show that every phase is reached and recorded.
"""
from __future__ import annotations

import statistics

import torch

from probe import kernels, shapes
from probe.context import Context, failed

# The phases each kernel's step runs, in order (probe.h's Phase), per direction.
EXPECTED = {
    ("cluster", "forward"): ["wait", "product", "block_sync", "arrive", "cell", "wait_b", "exchange"],
    ("cluster", "backward"): ["wait", "exchange", "cell", "block_sync", "arrive", "wait_b", "product"],
    ("grid", "forward"): ["wait", "cluster_sync", "load", "block_sync", "product", "cell", "flag_arrive",
                          "stores_after"],
    ("grid", "backward"): ["wait", "cluster_sync", "load", "block_sync", "product", "exchange", "cell",
                           "flag_arrive"],
}


def summarize(trace: torch.Tensor, phases: list[str], header: int, steps: int, blocks: int) -> dict:
    """The record of one launch's trace (int64 [blocks][header + steps * phases])."""
    data = trace.cpu()[:blocks].double()
    cycles = data[:, header:header + steps * len(phases)].reshape(blocks, steps, len(phases))
    clock_span, timer_span = data[:, 1] - data[:, 0], data[:, 3] - data[:, 2]
    ghz = statistics.median((clock_span / timer_span.clamp(min=1)).tolist())  # cycles a nanosecond
    to_us = 1.0 / (ghz * 1e3)
    per_block = cycles.mean(dim=1) * to_us  # [blocks, phases]: mean us a step
    block0 = cycles[0] * to_us  # [steps, phases]
    record = {"clock_ghz": ghz, "blocks": blocks, "steps": steps,
              "wall_us_per_step": float((data[:, 3].max() - data[:, 2].min()) / steps / 1e3),
              "block0_sum_us_per_step": float(per_block[0].sum()), "phases": {}}
    for i, name in enumerate(phases):
        if not bool((cycles[:, :, i] != 0).any()):
            continue
        record["phases"][name] = {"block0_mean_us": float(block0[:, i].mean()),
                                  "block0_median_us": float(block0[:, i].median()),
                                  "max_block_mean_us": float(per_block[:, i].max()),
                                  "min_block_mean_us": float(per_block[:, i].min())}
    return record


def trace_site(probe: kernels.Probe, site: shapes.Site) -> dict:
    T, B, H = site.shape
    with kernels.forced(*site.forced, site.kernel):
        config = probe.config(site.kernel, H, B, site.precision)
        if config[0] == 0:
            return failed(f"the plan does not take {site.id}")
        blocks, x = probe.blocks(config), probe.inputs(T, B, H)
        outputs = probe.forward(site.kernel, x, site.precision)  # a warm-up launch of each direction
        probe.backward(site.kernel, x, outputs, site.precision)
        record = {"status": "ok", "kernel": site.kernel, "shape": [T, B, H], "precision": site.precision,
                  "config": config}
        for direction, steps in (("forward", T), ("backward", T + 1)):
            buffer = probe.trace_buffer(blocks[direction], steps)
            with probe.armed(site.kernel, trace=buffer):
                if direction == "forward":
                    outputs = probe.forward(site.kernel, x, site.precision)
                else:
                    probe.backward(site.kernel, x, outputs, site.precision)
            if probe.device == "cuda":
                torch.cuda.synchronize()
            record[direction] = summarize(buffer, probe.phases, probe.header, steps, blocks[direction])
    return record


def run(ctx: Context, probe: kernels.Probe | None = None) -> dict:
    probe = probe or kernels.Probe(ctx.device)
    record = {"status": "ok", "emulated": ctx.device == "cpu", "sites": {}}
    for site in shapes.sites(ctx.device):
        if ctx.left() < 5:
            record["stopped"] = f"deadline before {site.id}"
            break
        try:
            record["sites"][site.id] = trace_site(probe, site)
        except Exception as exc:  # noqa: BLE001  (one site failing is recorded, the others still run)
            record["sites"][site.id] = failed(f"{type(exc).__name__}: {exc}")
        ctx.log(f"trace {site.id}: {record['sites'][site.id]['status']}")
        ctx.save(record)
    return record
