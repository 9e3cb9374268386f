"""The GPU probe's microbenchmarks (bench/probe/micro.py) keep working between GPU runs: the part runs
through bench/gpu_probe.py on the CPU, micro.cu under the SIMT emulation, and returns every
benchmark ok (its own check passed) in the record's shape; and the SASS gate, from nvcc and
cuobjdump without a GPU: the ldmatrix kernel loads with LDSM, the relaxed cluster arrive's kernel
holds no MEMBAR.ALL.GPU (the release arrive's does), the ping-pong pushes with STAS and waits with
SYNCS (the mbarrier's phase check). A benchmark whose own check fails (the emulation's atomics
broken at run time: tests/simt/run.py's plants) is failed with its reason, never timed."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the emulation's probe library (cached after), or runs nvcc

ROOT = Path(__file__).resolve().parents[2]
MICRO = ROOT / "bench" / "probe" / "micro.cu"
NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"


@pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")
def test_micro_runs_every_benchmark_under_the_emulation(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_probe.py"), "--device", "cpu", "--quick", "--parts",
                           "micro", "--out", str(tmp_path), "--deadline", "900"], capture_output=True, text=True, timeout=900)
    record = json.loads((tmp_path / "probe.json").read_text())["parts"]["micro"]
    assert record["status"] == "ok", (record, done.stdout[-2000:], done.stderr[-2000:])
    assert record["emulated"] is True and record["build_seconds"] >= 0
    results = record["results"]
    expected = {f"cluster_barrier/c{c}/{flavour}/stores{n}" for c in (2, 4, 8, 16) for flavour in ("release", "relaxed")
                for n in (0, 8, 64)}
    expected |= {"dsmem_pingpong", "ldcg_chain", "active_clusters"}
    expected |= {f"flag_barrier/{variant}/blocks{n}" for n in (4, 8)
                 for variant in ("one_counter", "counter_per_cluster_c2", "cluster_head_c2")}
    expected |= {f"fragment_load/{how}/pitch{p}" for how in ("wmma", "ldmatrix") for p in (128, 144, 400, 576)}
    assert set(results) == expected
    for name, result in results.items():
        assert result["status"] == "ok", (name, result)
        if name != "active_clusters":
            assert result["ns"] > 0 and result["cycles"] > 0 and result["reps"] == 3, (name, result)
    clusters = results["active_clusters"]["clusters"]
    assert list(clusters) == ["100", "150", "200", "227"] and list(clusters["100"]) == [str(c) for c in range(2, 17)]
    assert clusters["100"]["2"] >= clusters["227"]["2"] >= 1 and clusters["227"]["16"] == 0  # 4 emulated SMs


# In a process of its own: the probe library (one emulation library a process).
PLANTED = """
import json, torch
from probe import micro
from simt import emulation
micro.build("cpu")
records = []
for plant, seeds in (("flag_early", range(4)), ("skip_arrive", range(1))):
    torch.ops.simt.plant(plant)
    for seed in seeds:
        emulation.emulate(4, seed)
        records.append([plant, micro._timed(torch.ops.tsrnn_micro.flag_barrier, (0, 8, 1), 2, 1, torch.device("cpu"))])
print(json.dumps(records))
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")
def test_a_benchmark_whose_check_fails_is_failed_not_timed():
    """The flag barrier's round trip with a counter that opens one arrival early: in the by-warp
    thread orders (odd seeds) a block reads its neighbour's slot before it was written; with a block
    whose arrive is dropped, the emulation's livelock report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT / "tests"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", PLANTED], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(done.stdout.splitlines()[-1])
    early = [r for plant, r in records if plant == "flag_early"]
    assert any(r["status"] == "failed" for r in early)
    for r in early:
        assert r == {"status": "failed", "reason": "wrong: a block passed the barrier before its neighbour arrived"} or \
            r["status"] == "ok", r
    (skipped,) = [r for plant, r in records if plant == "skip_arrive"]
    assert skipped["status"] == "failed" and "livelock: block 0 thread 0 waits at flag barrier phase 1" in skipped["reason"]
    assert "ns" not in skipped


def cuobjdump() -> str | None:
    """CUDA's cuobjdump, or the copy that ships with Triton's NVIDIA backend."""
    if NVCC.with_name("cuobjdump").exists():
        return str(NVCC.with_name("cuobjdump"))
    try:
        import triton
    except ImportError:
        return shutil.which("cuobjdump")
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else shutil.which("cuobjdump")


@pytest.mark.skipif(not NVCC.exists() or cuobjdump() is None, reason="needs nvcc ($CUDA_HOME/bin) and cuobjdump")
def test_the_sass_of_the_microbenchmarks(tmp_path):
    binary = tmp_path / "micro.o"
    built = subprocess.run([str(NVCC), "-std=c++17", "-O3", "-gencode=arch=compute_90,code=sm_90", f"-I{ROOT / 'csrc'}",
                            "-c", str(MICRO), "-o", str(binary)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    dump = subprocess.run([cuobjdump(), "-sass", str(binary)], capture_output=True, text=True, check=True).stdout
    sass = {m.group(1): m.group(2) for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", dump, re.S)}

    def kernel(name: str) -> str:
        (body,) = [text for mangled, text in sass.items() if name in mangled]
        return body

    assert "LDSM" in kernel("fragment_loads_kernelILb1E")  # ldmatrix
    assert "MEMBAR.ALL.GPU" not in kernel("cluster_barrier_kernelILb1E")  # the relaxed arrive
    assert "MEMBAR.ALL.GPU" in kernel("cluster_barrier_kernelILb0E")  # the release arrive: the gate tells them apart
    pingpong = kernel("dsmem_pingpong_kernel")
    assert "STAS" in pingpong and "SYNCS" in pingpong
