"""The probe's Markdown summary (probe.md beside probe.json): a table per part, microseconds first."""
from __future__ import annotations


def _f(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def trace(record: dict) -> list[str]:
    lines = ["## Phase trace: microseconds per step (thread 0's clock)", ""]
    if record.get("emulated"):
        lines += ["Emulated (CPU): the clock is a counter; these numbers only show every phase is recorded.", ""]
    for site, r in record.get("sites", {}).items():
        if r.get("status") != "ok":
            lines += [f"- {site}: {r.get('status')}: {r.get('reason', '')}"]
            continue
        for direction in ("forward", "backward"):
            d = r[direction]
            lines += [f"### {site} {direction}: config {r['config']}, {d['blocks']} blocks, {d['steps']} steps, "
                      f"clock {_f(d['clock_ghz'])} GHz, wall {_f(d['wall_us_per_step'])} us/step, block 0's phases "
                      f"sum to {_f(d['block0_sum_us_per_step'])} us/step", "",
                      "| phase | block 0 mean | block 0 median | slowest block | fastest block |", "|---|---|---|---|---|"]
            lines += [f"| {name} | {_f(p['block0_mean_us'])} | {_f(p['block0_median_us'])} | "
                      f"{_f(p['max_block_mean_us'])} | {_f(p['min_block_mean_us'])} |" for name, p in d["phases"].items()]
            lines.append("")
    return lines


def ladder(record: dict) -> list[str]:
    lines = ["## Removal ladder: the kernel alone, one part left out (results wrong by design)", ""]
    if record.get("emulated"):
        lines += ["Emulated (CPU): times mean nothing; 'verified' says the emulator saw the part left out.", ""]
    for site, r in record.get("sites", {}).items():
        if r.get("status") != "ok":
            lines += [f"- {site}: {r.get('status')}: {r.get('reason', '')}"]
            continue
        lines += [f"### {site}: config {r['config']}", "",
                  "| rung | fwd ms | bwd ms | fwd saved us/step | bwd saved us/step | verified |", "|---|---|---|---|---|---|"]
        for name, row in r["rungs"].items():
            lines.append(f"| {name} | {_f(row['forward_ms'], 3)} | {_f(row['backward_ms'], 3)} | "
                         f"{_f(row['forward_saved_us_per_step'])} | {_f(row['backward_saved_us_per_step'])} | "
                         f"{row.get('skipped_verified', '')} |")
        lines.append("")
    return lines


def profile(record: dict) -> list[str]:
    lines = ["## torch.profiler: one warm forward+backward call", ""]
    if record.get("stand_in"):
        lines += [f"Stand-in (CPU): {record['stand_in']}", ""]
    lines += ["| model | T,B,H | dtype | status | kernels us | busy us | idle us | host ms | wall ms |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in record.get("runs", []):
        lines.append(f"| {r['model']} | {r['T']},{r['B']},{r['H']} | {r['dtype']} | {r['status']} | "
                     f"{_f(r.get('kernel_total_us'), 0)} | {_f(r.get('busy_us'), 0)} | {_f(r.get('idle_us'), 0)} | "
                     f"{_f(r.get('host_ms'), 3)} | {_f(r.get('wall_ms'), 3)} |")
    return lines + [""]


def micro(record: dict) -> list[str]:
    lines = ["## Microbenchmarks: a median operation", ""]
    if record.get("emulated"):
        lines += ["Emulated (CPU): the times are a counter; only the statuses mean something.", ""]
    lines += ["| benchmark | status | ns | cycles |", "|---|---|---|---|"]
    for name, r in record.get("results", {}).items():
        if name != "active_clusters":
            lines.append(f"| {name} | {r['status']} {r.get('reason', '')} | {_f(r.get('ns'), 1)} | {_f(r.get('cycles'), 0)} |")
    occupancy = record.get("results", {}).get("active_clusters", {})
    if occupancy.get("status") == "ok":
        sizes = list(next(iter(occupancy["clusters"].values())))
        lines += ["", "Resident clusters (cudaOccupancyMaxActiveClusters, 256 threads) by shared memory:", "",
                  "| KiB | " + " | ".join(f"c={c}" for c in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
        lines += [f"| {kib} | " + " | ".join(str(row[c]) for c in sizes) + " |" for kib, row in occupancy["clusters"].items()]
    return lines + [""]


def ncu(record: dict) -> list[str]:
    keys = ("duration_us", "sm_throughput_pct", "memory_throughput_pct", "achieved_occupancy_pct", "tensor_pipe_pct",
            "bank_conflicts_ld", "bank_conflicts_st")
    lines = ["## Nsight Compute: one launch each", "", "| kernel | status | " + " | ".join(keys) + " | stalls |",
             "|---" * (len(keys) + 3) + "|"]
    for k in record.get("kernels", []):
        stalls = ", ".join(f"{n} {_f(v)}" for n, v in sorted((k.get("stalls") or {}).items(), key=lambda i: -(i[1] or 0))[:4])
        lines.append(f"| {k.get('kernel')} {k.get('name', '')[:60]} | {k.get('status')} | "
                     + " | ".join(_f(k.get(key)) if isinstance(k.get(key), (int, float)) else "n/a" for key in keys)
                     + f" | {stalls} |")
    return lines + [""]


def markdown(probe: dict) -> str:
    lines = [f"# GPU probe: {probe.get('device')}, {probe.get('date')}", "",
             f"torch {probe.get('torch')}; parts: " + ", ".join(f"{k} {v.get('status')}" for k, v in probe["parts"].items()),
             ""]
    makers = {"trace": trace, "ladder": ladder, "profile": profile, "ncu": ncu, "micro": micro}
    for name, record in probe["parts"].items():
        seconds = probe.get("seconds", {}).get(name)
        lines += [f"**{name}**: {record.get('status')}" + (f" in {seconds} s" if seconds is not None else "")
                  + (f": {record['reason']}" if record.get("reason") else ""), ""]
        if name in makers and record.get("status") != "skipped":
            lines += makers[name](record)
    return "\n".join(lines) + "\n"
