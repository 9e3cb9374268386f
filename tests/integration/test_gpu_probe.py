"""bench/gpu_probe.py, the first job of a GPU call, stays runnable: its CPU mode runs the tensor-core
kernels' probe build (csrc/recurrence/cuda/probe.h) under the SIMT emulation. The phase trace must
record every phase of every kernel and direction; each rung of the removal ladder must really leave
its part out (the emulator's counters show it), and a planted mask that is ignored must fail that
check. The probe's library is loaded in processes of their own (one emulation library a process)."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tarfile
import time

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from probe import trace  # noqa: E402


def test_the_trace_is_read_with_the_measured_clock():
    """summarize: cycles over the clock rate (cycles / global-timer ns) per step and phase, block 0's
    mean and median, the slowest and fastest block, the wall time a step."""
    phases, header, steps, blocks = ["a", "b", "c"], 4, 2, 2
    buffer = torch.zeros(blocks, header + steps * len(phases), dtype=torch.int64)
    buffer[:, :4] = torch.tensor([[1000, 5000, 100, 2100], [1000, 3000, 200, 1200]])  # 2 cycles a ns on both
    buffer[0, 4:] = torch.tensor([2000, 0, 400, 6000, 0, 400])  # block 0: phase a 1 then 3 us, c 0.2 us twice
    buffer[1, 4:] = torch.tensor([1000, 0, 0, 1000, 0, 0])
    record = trace.summarize(buffer, phases, header, steps, blocks)
    assert record["clock_ghz"] == pytest.approx(2.0)
    assert set(record["phases"]) == {"a", "c"}  # a phase no block recorded is left out
    assert record["phases"]["a"] == pytest.approx({"block0_mean_us": 2.0, "block0_median_us": 1.0,
                                                   "max_block_mean_us": 2.0, "min_block_mean_us": 0.5})
    assert record["phases"]["c"]["block0_mean_us"] == pytest.approx(0.2)
    assert record["wall_us_per_step"] == pytest.approx((2100 - 100) / steps / 1e3)
    assert record["block0_sum_us_per_step"] == pytest.approx(2.2)


@pytest.mark.slow  # the emulation's probe library (a compile, cached) and the probe's processes
def test_probe_quick_cpu_run(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "gpu_probe.py"), "--device", "cpu", "--quick", "--out",
                           str(tmp_path), "--deadline", "900"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    parts = probe["parts"]
    assert list(parts) == ["build", "trace", "ladder", "profile", "ncu", "micro"]
    assert all(parts[name]["status"] == "ok" for name in ("build", "trace", "ladder", "profile", "micro"))
    assert parts["ncu"]["status"] in ("ok", "skipped")
    for site, record in parts["trace"]["sites"].items():  # every phase of every step reached and recorded
        kernel = record["kernel"]
        for direction in ("forward", "backward"):
            recorded = record[direction]["phases"]
            assert list(recorded) == sorted(trace.EXPECTED[(kernel, direction)], key=list(recorded).index), site
            assert set(recorded) == set(trace.EXPECTED[(kernel, direction)]), (site, direction, sorted(recorded))
            assert all(p["block0_mean_us"] > 0 and p["min_block_mean_us"] > 0 for p in recorded.values())
    for site, record in parts["ladder"]["sites"].items():
        rungs = record["rungs"]
        assert len(rungs) == (7 if site.startswith("cluster") else 10)  # probe.h's rungs (the cluster kernel: no kRelaxed)
        assert all(row["skipped_verified"] for name, row in rungs.items() if name != "baseline"), site
    markdown = (tmp_path / "probe.md").read_text()
    assert "## Phase trace" in markdown and "## Removal ladder" in markdown and "| product |" in markdown
    # --out holds three files (a GPU call brings back at most 8); the parts' own files in the archive
    assert sorted(path.name for path in tmp_path.iterdir()) == ["files.tar.gz", "probe.json", "probe.md"]
    with tarfile.open(tmp_path / "files.tar.gz") as tar:
        archived = set(tar.getnames())
        assert json.load(tar.extractfile("parts/trace.json")) == parts["trace"]
    assert {f"parts/{name}.{kind}" for name in parts for kind in ("json", "log")} <= archived


def test_a_failed_build_skips_the_parts_that_load_it_and_the_rest_still_run(tmp_path, monkeypatch):
    """The parts run as processes (faked here: the build fails, the others succeed); the ones that
    load the build are skipped, and --out keeps its three files with what was gathered."""
    import argparse

    import gpu_probe

    started = []

    def fake(cmd, seconds):
        part, work = cmd[cmd.index("--part") + 1], pathlib.Path(cmd[cmd.index("--out") + 1])
        started.append(part)
        if part == "build":
            return 1, "nvcc: error"
        (work / "parts" / f"{part}.json").write_text(json.dumps({"status": "ok"}))
        return 0, f"{part} ran"

    monkeypatch.setattr(gpu_probe, "run_bounded", fake)
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "parts").mkdir(parents=True)
    out.mkdir()
    args = argparse.Namespace(device="cpu", quick=True, deadline=600.0, parts=list(gpu_probe.PARTS))
    assert gpu_probe.run_parts(args, out, work, time.monotonic()) == 1
    assert started == ["build", "profile", "ncu"]
    probe = json.loads((out / "probe.json").read_text())
    assert probe["parts"]["build"]["status"] == "failed" and "nvcc: error" in probe["parts"]["build"]["output"]
    assert all(probe["parts"][name] == {"status": "skipped", "reason": "the build part did not succeed"}
               for name in gpu_probe.BUILT)
    assert sorted(path.name for path in out.iterdir()) == ["files.tar.gz", "probe.json", "probe.md"]
    with tarfile.open(out / "files.tar.gz") as tar:
        assert tar.extractfile("parts/build.log").read() == b"nvcc: error"


def test_a_build_lock_left_by_a_killed_build_is_removed_and_a_live_one_kept(tmp_path, capsys):
    """torch's JIT build waits without end on its folder's lock file, which a killed build leaves."""
    import os

    from probe import kernels

    lock = tmp_path / "lock"
    lock.touch()
    kernels.unlock_stale(tmp_path)  # a build may be running: kept
    assert lock.exists() and capsys.readouterr().out == ""
    os.utime(lock, (time.time() - kernels.STALE_LOCK_S - 60,) * 2)
    kernels.unlock_stale(tmp_path)
    assert not lock.exists() and "by a build that did not finish" in capsys.readouterr().out
    kernels.unlock_stale(tmp_path)  # no lock: nothing to do


LADDER_IGNORING_THE_MASK = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {bench!r})
from probe import ladder
from probe.context import Context
ctx = Context("cpu", True, Path({out!r}), time.monotonic() + 600)
record = ladder.run(ctx, ignore_skip={ignore})
print(json.dumps({{site: {{n: r.get("skipped_verified") for n, r in s["rungs"].items()}}
                  for site, s in record["sites"].items()}}))
"""


@pytest.mark.slow  # the emulation's probe library in a process of its own
def test_a_rung_that_runs_the_baseline_fails_the_ladder_check(tmp_path):
    """The planted bug: every rung's mask ignored (probe.h's ignore_skip) must fail every rung's check."""
    code = LADDER_IGNORING_THE_MASK.format(bench=str(BENCH), out=str(tmp_path), ignore=True)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    verified = json.loads(done.stdout.strip().splitlines()[-1])
    assert verified and all(ok is False for rungs in verified.values() for name, ok in rungs.items() if name != "baseline")


ARM_CHECKS = """
import sys
sys.path.insert(0, {bench!r})
import torch
from probe import kernels
probe = kernels.Probe("cpu")
for bad in (torch.zeros(2, 5, dtype=torch.int64), torch.zeros(2, 48, dtype=torch.int32), 1 << 12):
    try:
        probe._arm(bad if isinstance(bad, int) else 0, None if isinstance(bad, int) else bad, False)
    except RuntimeError as exc:
        print("refused:", str(exc).splitlines()[0])
T, B, H = 3, 5, 20
x = probe.inputs(T, B, H)
with kernels.forced(2, 16, "cluster"), probe.armed("cluster", 1 << 7):  # grid_loads: no rung of the cluster kernel
    try:
        probe.forward("cluster", x, "tf32")
    except RuntimeError as exc:
        print("refused:", str(exc).splitlines()[0])
"""


@pytest.mark.slow  # the emulation's probe library in a process of its own
def test_the_probe_refuses_a_malformed_trace_and_an_unbuilt_rung(tmp_path):
    done = subprocess.run([sys.executable, "-c", ARM_CHECKS.format(bench=str(BENCH))], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    refusals = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
    assert len(refusals) == 4, done.stdout
    assert "contiguous int64 [blocks, 4 + steps * 11]" in refusals[0] and "got [2, 5]" in refusals[0]
    assert "got [2, 48]" in refusals[1]  # the size of 4 steps, in int32
    assert "skip must be a mask of 9 parts, got 4096" in refusals[2]
    assert "launching the cluster-resident forward kernel" in refusals[3]


def test_the_summary_tables_every_part():
    """probe.md: a status line a part, and the tables of ncu's metrics and the microbenchmarks from
    their records (a failed part keeps its table: what it measured before failing)."""
    from probe import summary

    ncu = {"status": "ok", "kernels": [{"kernel": "cluster forward", "name": "forward_kernel", "status": "ok",
                                        "duration_us": 812.5, "sm_throughput_pct": 31.0, "tensor_pipe_pct": 2.5,
                                        "stalls": {"membar": 0.4, "barrier": 1.5}}]}
    micro = {"status": "failed", "reason": "1 of 2 benchmarks failed: ldcg_chain",
             "results": {"dsmem_pingpong": {"status": "ok", "ns": 812.25, "cycles": 1600.0},
                         "ldcg_chain": {"status": "failed", "reason": "wrong: ended at 3"},
                         "active_clusters": {"status": "ok", "clusters": {"227": {"2": 66, "16": 7}}}}}
    text = summary.markdown({"device": "H100", "date": "d", "torch": "t", "seconds": {"ncu": 40.0},
                             "parts": {"ncu": ncu, "micro": micro, "trace": {"status": "skipped", "reason": "late"}}})
    assert "**ncu**: ok in 40.0 s" in text and "**trace**: skipped: late" in text
    assert "| cluster forward forward_kernel | ok | 812.50 | 31.00 | n/a | n/a | 2.50 | n/a | n/a | barrier 1.50, membar 0.40 |" in text
    assert "**micro**: failed: 1 of 2 benchmarks failed: ldcg_chain" in text
    assert "| dsmem_pingpong | ok  | 812.2 | 1600 |" in text and "| ldcg_chain | failed wrong: ended at 3 | n/a | n/a |" in text
    assert "| 227 | 66 | 7 |" in text
