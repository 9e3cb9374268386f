"""What csrc/recurrence/cuda/ptx.h's wrappers compile to for sm_90 (nvcc, cuobjdump; no GPU): each
is the instruction its comment names (HMMA of the right shape, LDSM with and without .trans,
LDGSTS, SYNCS, STAS, UBLKCP), and the forms the time loop may use carry no GPU-wide fence
(MEMBAR.*.GPU) and no L1 invalidate (CCTL.IVALL); the release-flavoured cluster arrive, kept for
outside the loop, shows both checks can fail. The emulation's side of the same wrappers:
test_simt_ptx.py."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from test_cuda_sass import NVCC, ROOT, cuobjdump

SOURCE = Path(__file__).with_name("ptx_wrappers.cu")

# kernel -> what its SASS must hold
EXPECTED = {
    "mma_tf32": r"HMMA\.1688\.F32\.TF32",
    "mma_bf16": r"HMMA\.16816\.F32\.BF16",
    "ldmatrix_x1": r"LDSM\.16\.M88\b",
    "ldmatrix_x2_trans": r"LDSM\.16\.MT88\.2",
    "ldmatrix_x4": r"LDSM\.16\.M88\.4",
    "ldmatrix_x4_trans": r"LDSM\.16\.MT88\.4",
    "cp_async": r"LDGSTS\.E\.BYPASS\.128.*LDGSTS\.E\b.*DEPBAR",
    "mbarrier_local": r"SYNCS\.ARRIVE\.TRANS64.*SYNCS\.PHASECHK",
    "mbarrier_remote_relaxed": r"SYNCS\.ARRIVE\.TRANS64\.RED",
    "st_async_push": r"\bSTAS\b",
    "bulk_push": r"FENCE\.VIEW\.ASYNC\.S.*UBLKCP\.S\.S",
    "cluster_relaxed": r"UCGABAR_ARV.*UCGABAR_WAIT",  # the wait's acquire: CCTL.IVALL, no MEMBAR
    # the fence restricted to the block's shared memory: a CTA-wide one; the acquire adds nothing
    "cluster_shared_only": r"MEMBAR\.ALL\.CTA.*FENCE\.VIEW\.ASYNC\.S.*UCGABAR_ARV.*UCGABAR_WAIT",
    "cluster_release": r"MEMBAR\.ALL\.GPU.*UCGABAR_ARV",
}


@pytest.fixture(scope="module")
def sass(tmp_path_factory) -> dict[str, str]:
    if not NVCC.exists() or cuobjdump() is None:
        pytest.skip("needs nvcc ($CUDA_HOME/bin) and cuobjdump (CUDA's or Triton's)")
    binary = tmp_path_factory.mktemp("ptx") / "ptx_wrappers.o"
    done = subprocess.run([str(NVCC), "-std=c++17", "-O3", "-arch=sm_90", "-Werror", "all-warnings", f"-I{ROOT / 'csrc'}",
                           "-c", str(SOURCE), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    dump = subprocess.run([cuobjdump(), "-sass", str(binary)], capture_output=True, text=True, check=True).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", dump, re.S)}


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_each_wrapper_is_the_instruction_it_names(sass, kernel):
    pattern = EXPECTED[kernel]
    assert re.search(pattern, sass[kernel], re.S), f"{kernel}: no {pattern}\n{sass[kernel]}"


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_the_loop_forms_carry_no_gpu_wide_fence(sass, kernel):
    fenced = bool(re.search(r"MEMBAR\.\w+\.GPU|MEMBAR\.ALL\.GPU", sass[kernel]))
    invalidates = "CCTL.IVALL" in sass[kernel]
    if kernel == "cluster_release":
        assert fenced and invalidates  # the check can fail: the release arrive's fence, the acquire wait's invalidate
    elif kernel in ("cluster_relaxed", "cluster_shared_only"):
        assert not fenced and invalidates  # barrier.cluster.wait's acquire: outside the time loop
    else:
        assert not fenced and not invalidates, f"{kernel}:\n{sass[kernel]}"
