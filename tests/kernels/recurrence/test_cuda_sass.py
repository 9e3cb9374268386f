"""What the compiler shows of the tensor-core kernels' speed, without a GPU: nvcc builds
csrc/recurrence/cuda/cluster_recurrence.cu and grid_recurrence.cu (and the GEMMs' rounding kernel,
csrc/gemm/cuda/round_tf32.cu) for sm_80 and sm_90 (-O3,
-Xptxas -v; warnings are errors, host and device, as CI's compile check of the other CUDA
sources), and the checks read ptxas's report and the SASS (cuobjdump): every kernel (3 cells x 3
precisions x 2 directions) keeps everything in registers (no stack frame, no spills, no LDL/STL
local-memory instructions), the TF32 and bf16 kernels run their products on tensor cores (HMMA)
and the ieee ones do not, a block's registers fit one SM (the plans assume one 256-thread block
per SM, its shared memory dynamic only: no static shared memory); the grid kernel's flag barrier
is a release (a fence before the atomic add) and an acquire poll that sleeps (NANOSLEEP). A planted
source with a dynamically indexed array shows that the local-memory check can fail."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tsrnn.ops.recurrence.cells import CELLS  # the compiled list is the same (test_cell_list.py)

pytestmark = pytest.mark.slow  # four nvcc builds of every cell's kernels, 30 to 50 seconds each

ROOT = Path(__file__).resolve().parents[3]
SOURCES = {name: ROOT / "csrc" / "recurrence" / "cuda" / f"{name}_recurrence.cu" for name in ("cluster", "grid")}
NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
THREADS = 256  # cluster_recurrence.h's and grid_recurrence.h's kThreads
REGISTERS_PER_SM = 65536
PRODUCTS = {"0": "ieee", "1": "tf32", "2": "bf16"}  # csrc/recurrence/products.h's order


def cuobjdump() -> str | None:
    """CUDA's cuobjdump, or the copy that ships with Triton's NVIDIA backend."""
    beside = NVCC.with_name("cuobjdump")
    if beside.exists():
        return str(beside)
    try:
        import triton
    except ImportError:
        return shutil.which("cuobjdump")
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else shutil.which("cuobjdump")


needs_tools = pytest.mark.skipif(not NVCC.exists() or cuobjdump() is None,
                                 reason="needs nvcc ($CUDA_HOME/bin) and cuobjdump (CUDA's or Triton's)")


def kernel_name(mangled: str) -> str:
    """e.g. "forward PowerLawCell<true> tf32" of a mangled kernel name: its direction, the cell's
    C++ type (csrc/recurrence/cells/list.h) and its products."""
    direction = "forward" if "forward_kernel" in mangled else "backward"
    found = re.search(r"_kernelINS_(\d+)", mangled)
    start = found.end()
    cell = mangled[start:start + int(found.group(1))]
    flag = re.match(r"ILb([01])E", mangled[start + int(found.group(1)):])
    cell += f"<{'true' if flag.group(1) == '1' else 'false'}>" if flag else ""
    products = re.search(r"ProductsE(\d)", mangled).group(1)
    return f"{direction} {cell} {PRODUCTS[products]}"


def compile_report(source: Path, arch: str, out: Path) -> tuple[dict, dict]:
    """ptxas's report ({mangled: {registers, stack, spills, smem}}) and the SASS ({mangled: text})
    of ``source`` built for sm_``arch``."""
    binary = out / f"{source.stem}_sm{arch}.o"
    done = subprocess.run([str(NVCC), "-std=c++17", "-O3", f"-arch=sm_{arch}", "-Werror", "all-warnings",
                           "-Xcompiler", "-Wall,-Wextra,-Werror", "-Xptxas", "-v", f"-I{ROOT / 'csrc'}", "-c",
                           str(source), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    report, current = {}, None
    for line in done.stderr.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            current = report.setdefault(m.group(1), {})
        elif current is not None and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            current.update(stack=int(m.group(1)), spills=int(m.group(2)) + int(m.group(3)))
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            current["smem"] = int(smem.group(1)) if smem else 0
    dump = subprocess.run([cuobjdump(), "-sass", str(binary)], capture_output=True, text=True, check=True).stdout
    sass = {m.group(1): m.group(2) for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", dump, re.S)}
    return report, sass


@pytest.fixture(scope="module", params=[(source, arch) for source in SOURCES for arch in ("80", "90")],
                ids=lambda param: f"{param[0]}-sm{param[1]}")
def built(request, tmp_path_factory):
    if not NVCC.exists() or cuobjdump() is None:
        pytest.skip("needs nvcc ($CUDA_HOME/bin) and cuobjdump (CUDA's or Triton's)")
    source, arch = request.param
    report, sass = compile_report(SOURCES[source], arch, tmp_path_factory.mktemp(f"{source}-sm{arch}"))
    kernels = {mangled: kernel_name(mangled) for mangled in report if "_kernel" in mangled}
    return f"{source} sm_{arch}", report, sass, kernels


def test_every_kernel_is_built(built):
    arch, _, sass, kernels = built
    assert len(kernels) == 2 * len(CELLS) * len(PRODUCTS), sorted(kernels.values())
    assert set(kernels) <= set(sass), f"{arch}: kernels without SASS"


def test_no_local_memory(built):
    """No stack frame, no spills, no LDL/STL: the pairs' states, dstate, dp and the fragments stay
    in registers (every per-pair loop is unrolled with compile-time indices)."""
    arch, report, sass, kernels = built
    for mangled, name in kernels.items():
        facts = report[mangled]
        assert facts["stack"] == 0 and facts["spills"] == 0, f"{arch} {name}: {facts}"
        assert not re.search(r"\b(LDL|STL)\b", sass[mangled]), f"{arch} {name}: local memory in the SASS"


def test_the_cluster_kernel_traps_before_sm_90(built):
    """Its exchange (mapa, st.async, mbarrier expect_tx and try_wait.parity) is sm_90 PTX: built for
    sm_80 those wrappers trap (ptx.h), and the plan launches it on no GPU without clusters."""
    arch, _, sass, kernels = built
    if arch != "cluster sm_80":
        pytest.skip("the cluster kernel's sm_80 build")
    for mangled, name in kernels.items():
        assert "BPT.TRAP" in sass[mangled], f"{arch} {name}"


def test_tensor_cores_run_the_tf32_and_bf16_products(built):
    arch, _, sass, kernels = built
    if arch == "cluster sm_80":
        pytest.skip("traps: test_the_cluster_kernel_traps_before_sm_90")
    for mangled, name in kernels.items():
        hmma = len(re.findall(r"\bHMMA\.", sass[mangled]))
        if name.endswith("ieee"):
            assert hmma == 0, f"{arch} {name}: the exact float32 kernel must not round on tensor cores"
        else:
            assert hmma > 0, f"{arch} {name}: no HMMA in the SASS"


def operand_loads_problem(code: str) -> str | None:
    """Why a TF32 or bf16 kernel's products do not read their operands as tensor_core.h's products
    must (ldmatrix from shared memory or fragments held in registers, then mma.sync), or None: no
    LDSM, no HMMA, more HMMA than the ldmatrix loads can feed (an ldmatrix.x4 of B feeds the mma of
    two n8 tiles, an .x2 one), or generic loads or stores (LD.E: what nvcuda::wmma's
    load_matrix_sync compiled to; ST.E)."""
    x4, x2 = len(re.findall(r"\bLDSM\.16\.M88\.4\b", code)), len(re.findall(r"\bLDSM\.16\.M88\.2\b", code))
    hmma = len(re.findall(r"\bHMMA\.", code))
    if x4 + x2 == 0 or hmma == 0:
        return f"{x4 + x2} LDSM and {hmma} HMMA"
    if hmma > 2 * x4 + x2:
        return f"{x4} LDSM.x4 and {x2} LDSM.x2 for {hmma} HMMA"
    if re.search(r"\b(LD|ST)\.E\b", code):
        return "generic loads or stores (LD.E, ST.E)"
    return None


def test_the_products_read_their_operands_with_ldmatrix(built):
    """The TF32 and bf16 products: ldmatrix and mma.sync, A's fragments held or read by ldmatrix.x4
    and B's by one .x4 for two n8 tiles (.x2 for an odd last one); and no generic load or store
    anywhere in the cluster kernel (its exchange pushes with st.async). The grid kernel's generic
    loads remain (its exchange reads the peers' partial sums through distributed shared memory)
    until that exchange is rebuilt."""
    arch, _, sass, kernels = built
    if arch == "cluster sm_80":
        pytest.skip("traps: test_the_cluster_kernel_traps_before_sm_90")
    for mangled, name in kernels.items():
        if name.endswith("ieee"):
            assert "LDSM" not in sass[mangled], f"{arch} {name}"
            continue
        problem = operand_loads_problem(sass[mangled])
        if arch.startswith("grid") and problem == "generic loads or stores (LD.E, ST.E)":
            continue
        assert problem is None, f"{arch} {name}: {problem}"


@needs_tools
def test_the_operand_load_check_fails_on_wmma(tmp_path):
    """The planted regression: the first generation's wmma loads from shared memory put back (no
    LDSM; generic LD.E)."""
    planted = tmp_path / "planted_wmma.cu"
    planted.write_text("#include <mma.h>\nusing namespace nvcuda;\n"
                       "__global__ void planted_wmma(float* out, int ld) {\n"
                       "  extern __shared__ float tile[];\n"
                       "  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;\n"
                       "  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b;\n"
                       "  wmma::fragment<wmma::accumulator, 16, 16, 8, float> c;\n"
                       "  wmma::fill_fragment(c, 0.f);\n"
                       "  for (int k = 0; k < 64; k += 8) {\n"
                       "    wmma::load_matrix_sync(a, tile + k, ld);\n"
                       "    wmma::load_matrix_sync(b, tile + 4096 + k, ld);\n"
                       "    wmma::mma_sync(c, a, b, c);\n  }\n"
                       "  wmma::store_matrix_sync(out, c, 16, wmma::mem_col_major);\n}\n")
    report, sass = compile_report(planted, "90", tmp_path)
    (mangled,) = [m for m in report if "planted" in m]
    assert operand_loads_problem(sass[mangled]) == f"0 LDSM and {len(re.findall(r'HMMA', sass[mangled]))} HMMA"
    assert re.search(r"\bLD\.E\b", sass[mangled])


def gpu_wide_fences(code: str) -> int:
    """The GPU-wide fences and L1 invalidates of a kernel (what a release-flavoured arrive and an
    acquire wait cost on sm_90: csrc/recurrence/cuda/ptx.h)."""
    return _count(r"MEMBAR\.\w*\.?GPU", code) + _count(r"CCTL\.IVALL", code)


def instructions(code: str) -> list[str]:
    """The SASS instructions of a kernel, in order (opcode and operands)."""
    return [line.split(";")[0].split("*/")[-1].strip() for line in code.splitlines()
            if re.search(r"/\*[0-9a-f]{4,}\*/", line)]


def grid_fence_problems(code: str, forward: bool) -> list[str]:
    """Why a grid kernel's fences are not what its loop may pay, or []: its one exchange barrier
    (exchange_sync) arrives with no GPU-wide fence before it, only the restricted release fence
    (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S); every GPU-wide fence is the release half of a cluster
    arrival (UCGABAR_ARV) or of the flag's arrival (ATOM.E.ADD) within 4 instructions; the forward
    has three: the barrier between chunks (plans of one chunk never reach it), the barrier that
    publishes h_t before the flag's arrival, and the flag's own release."""
    ins, problems = instructions(code), []
    arrivals = [i for i, x in enumerate(ins) if x.startswith("UCGABAR_ARV")]
    fenced = {i for i in arrivals if any(re.match(r"MEMBAR\.\w*\.?GPU", x) for x in ins[max(0, i - 4):i])}
    exchange = [i for i in arrivals if i not in fenced]
    if len(exchange) != 1 or not any(x.startswith("FENCE.VIEW.ASYNC.S") for x in ins[exchange[0] - 8:exchange[0]]):
        problems.append(f"{len(exchange)} cluster arrivals without a GPU-wide fence, expected the exchange's one "
                        "after its restricted release fence")
    for i, x in enumerate(ins):
        if re.match(r"MEMBAR\.\w*\.?GPU", x) and not any(y.startswith(("UCGABAR_ARV", "ATOM.E.ADD"))
                                                         for y in ins[i + 1:i + 5]):
            problems.append(f"a GPU-wide fence at instruction {i} that releases no arrival")
    gpu = sum(1 for x in ins if re.match(r"MEMBAR\.\w*\.?GPU", x))
    if forward and gpu != 3:
        problems.append(f"{gpu} GPU-wide fences in the forward, expected 3")
    return problems


def test_the_cluster_loops_have_no_gpu_wide_fence(built):
    """The cluster kernel's exchange, both directions: st.async pushes (STAS) completing on
    mbarriers, waited on locally (SYNCS.PHASECHK), peers told by relaxed remote arrivals
    (SYNCS.ARRIVE...RED): the only GPU-wide fences and L1 invalidates are the two cluster syncs'
    (before and after the time loop: a MEMBAR.ALL.GPU and a CCTL.IVALL each). The grid kernel's
    exchange (each block's partial sums read by its peers) is a cluster barrier restricted to shared
    memory; its GPU-wide fences are those that publish what it writes in global memory
    (grid_fence_problems)."""
    arch, _, sass, kernels = built
    if not arch.endswith("sm_90"):
        pytest.skip("the exchange on sm_90 (the plans launch the kernels' cluster forms nowhere else)")
    for mangled, name in kernels.items():
        code = sass[mangled]
        if arch.startswith("cluster"):
            assert gpu_wide_fences(code) == 4 and _count(r"MEMBAR\.ALL\.GPU", code) == 2, f"{arch} {name}"
            assert "STAS" in code and "SYNCS.PHASECHK" in code and "SYNCS.ARRIVE.TRANS64.RED" in code, f"{arch} {name}"
        else:
            assert grid_fence_problems(code, name.startswith("forward")) == [], f"{arch} {name}"


@needs_tools
def test_the_grid_fence_check_fails_on_the_release_exchange(tmp_path):
    """The grid kernel as it was before its exchange barrier was restricted to shared memory (its
    product followed by cluster.sync(), a release arrival): planted, the check reports it."""
    planted = tmp_path / "grid_recurrence.cu"
    planted.write_text(SOURCES["grid"].read_text().replace("exchange_sync<Skip>(cluster);", "sync<Skip>(cluster);"))
    _, sass = compile_report(planted, "90", tmp_path)
    forward = next(code for mangled, code in sass.items() if "forward_kernel" in mangled and "LSTMCell" in mangled)
    assert any("without a GPU-wide fence" in problem for problem in grid_fence_problems(forward, True))


def test_the_flag_barrier_releases_and_acquires(built):
    """The grid kernel's flag barrier (csrc/recurrence/cuda/flag_barrier.h): a memory fence before
    the atomic add at GPU scope (release), one add in the kernel (the cluster's arrival: the emulated
    kernels show one a cluster and step, test_grid_kernel.py), a strong GPU-scope load that
    invalidates L1 (acquire), a sleep between polls; the cluster kernel has none of it."""
    arch, _, sass, kernels = built
    for mangled, name in kernels.items():
        code = sass[mangled]
        if arch.startswith("grid"):
            assert re.search(r"MEMBAR\.\w*\.?GPU.*?ATOM\.E\.ADD\.64\.STRONG\.GPU", code, re.S), f"{arch} {name}: no release add"
            assert _count(r"\bATOM\.E\.ADD", code) == 1, f"{arch} {name}: more than one arrival"
            assert re.search(r"LD\.E\.64\.STRONG\.GPU.*?CCTL\.IVALL", code, re.S), f"{arch} {name}: no acquire poll"
            assert "NANOSLEEP" in code, f"{arch} {name}: the poll does not sleep"
        else:
            assert "NANOSLEEP" not in code and "ATOM.E.ADD" not in code, f"{arch} {name}"


def test_the_grid_kernel_loads_its_slices_in_vectors(built):
    """The grid kernel reads its slices of h and dz in 16-byte loads (LDG.E.128) where the row pitch
    allows and 8-byte ones (LDG.E.64) where it is even (csrc/recurrence/cuda/slice_load.h)."""
    arch, _, sass, kernels = built
    if not arch.startswith("grid"):
        pytest.skip("the grid kernel's loads")
    for mangled, name in kernels.items():
        code = sass[mangled]
        assert re.search(r"\bLDG\.E\.128\b", code) and re.search(r"\bLDG\.E\.64\b", code), f"{arch} {name}"


SLICE_LOAD = """#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/slice_load.h"
using namespace tsrnn;
using namespace tsrnn::cuda;
template <Products P, int V>
__global__ void slice_load_kernel(unsigned pitch, const float* src, long long ld, int rows, int padded, int width,
                                  int cols, grid::Walk walk) {
  grid::load_slice<P, V>(dynamic_shared<typename tensor_core::Operand<P>::T>(), pitch, src, ld, rows, padded, width,
                         cols, walk);
}
"""


# The first generation's load, one element an iteration with a divide (the planted regression).
PLANTED_SLICE_LOAD = """__global__ void planted_slice_load(const float* src, long long ld, int rows, int padded, int width, int cols) {
  extern __shared__ float x[];
  for (int idx = threadIdx.x; idx < padded * width; idx += blockDim.x) {
    const int n = idx / width, k = idx % width;
    x[idx] = n < rows && k < cols ? __ldcg(src + n * ld + k) : 0.f;
  }
}
"""


def slice_load_problems(code: str, width: int, batch: int) -> list[str]:
    """What a slice load's SASS does that slice_load.h's must not: loads other than `width`-bit
    vector loads, an integer divide (I2F.RP, the reciprocal a divide by a runtime value starts
    with), fewer than `batch` loads issued before the first store into shared memory."""
    ops = [line.split()[1] if line.split()[0].startswith("@") else line.split()[0]
           for line in re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", code)]
    loads = [i for i, op in enumerate(ops) if op.startswith("LDG")]
    stores = [i for i, op in enumerate(ops) if op.startswith("STS")]
    problems = []
    if {ops[i] for i in loads} != {f"LDG.E.{width}.STRONG.GPU"}:
        problems.append(f"loads {sorted({ops[i] for i in loads})}")
    if any(op.startswith("I2F.RP") for op in ops):
        problems.append("a divide")
    if len(loads) < batch or not stores or loads[batch - 1] > stores[0]:
        problems.append("fewer loads in flight than a batch")
    return problems


@needs_tools
@pytest.mark.parametrize("products", ["kTf32", "kBf16"])
def test_the_slice_load_issues_its_vectors_together_without_a_divide(tmp_path, products):
    """slice_load.h's loop alone (the walk set up by the caller, as the kernels do once before their
    time loop), for sm_90 at 16 and 8 bytes a load: only vector loads of that width, no integer
    divide, the batch's kBatch loads all issued before the first store into shared memory; the first
    generation's loop, planted, fails all three checks."""
    batch = int(re.search(r"kBatch = (\d+)", (ROOT / "csrc/recurrence/cuda/slice_load.h").read_text()).group(1))
    source = tmp_path / "slice_load.cu"
    source.write_text(SLICE_LOAD + PLANTED_SLICE_LOAD + "".join(
        f"template __global__ void slice_load_kernel<Products::{products}, {v}>(unsigned, const float*, long long, int, "
        f"int, int, int, grid::Walk);\n" for v in (4, 2)))
    _, sass = compile_report(source, "90", tmp_path)
    for mangled, code in sass.items():
        if "planted" in mangled:
            assert slice_load_problems(code, 128, batch) == [
                "loads ['LDG.E.STRONG.GPU']", "a divide", "fewer loads in flight than a batch"], mangled
        else:
            assert slice_load_problems(code, 128 if "ELi4E" in mangled else 64, batch) == [], mangled


def test_a_block_fits_one_sm_as_the_plan_assumes(built):
    """Registers x 256 threads within one SM's register file (the plan's occupancy query counts on
    one block per SM), and no static shared memory: the plan's dynamic bytes are the whole use."""
    arch, report, _, kernels = built
    for mangled, name in kernels.items():
        facts = report[mangled]
        assert facts["registers"] * THREADS <= REGISTERS_PER_SM, f"{arch} {name}: {facts}"
        assert facts["smem"] == 0, f"{arch} {name}: {facts['smem']} bytes of static shared memory"


@needs_tools
def test_the_local_memory_check_can_fail(tmp_path):
    """A planted kernel whose array is indexed by a runtime value lives in local memory: the same
    parsing reports its stack frame and LDL/STL."""
    planted = tmp_path / "planted_forward_kernel.cu"
    planted.write_text("__global__ void planted_forward_kernel(float* out, int i) {\n"
                       "  float v[512], acc = 0.f;\n"
                       "  for (int k = 0; k < 512; ++k) { acc = acc * out[k] + 1.f; v[k] = acc; }\n"
                       "  out[1] = v[i & 511] + v[(i >> 9) & 511];\n}\n")
    report, sass = compile_report(planted, "90", tmp_path)
    (mangled,) = [m for m in report if "planted" in m]
    assert report[mangled]["stack"] > 0 and re.search(r"\b(LDL|STL)\b", sass[mangled])


ROUNDING = ROOT / "csrc" / "gemm" / "cuda" / "round_tf32.cu"  # the tensor-core GEMMs' TF32 rounding


@needs_tools
@pytest.mark.parametrize("arch", ["80", "90"])
def test_the_rounding_kernel_streams_in_vectors_with_cvt_rna(tmp_path, arch):
    """The GEMMs' one-pass TF32 rounding (csrc/gemm/cuda/round_tf32.cu) builds without a warning,
    keeps to registers, reads and writes 16 bytes at a time (LDG.E.128, STG.E.128) beside its scalar
    tail, and rounds with cvt.rna.tf32.f32 (ptx.h's round_tf32), not an integer emulation of it."""
    report, sass = compile_report(ROUNDING, arch, tmp_path)
    (mangled,) = [m for m in report if "round_tf32_kernel" in m]
    code = sass[mangled]
    assert report[mangled]["stack"] == 0 and report[mangled]["spills"] == 0, report[mangled]
    assert re.search(r"\bLDG\.E\.128\b", code) and re.search(r"\bSTG\.E\.128\b", code), "no 16-byte loads and stores"
    ptx = subprocess.run([str(NVCC), "-std=c++17", "-O3", f"-arch=sm_{arch}", f"-I{ROOT / 'csrc'}", "-ptx", str(ROUNDING),
                          "-o", "-"], capture_output=True, text=True, check=True).stdout
    assert ptx.count("cvt.rna.tf32.f32") >= 5, "the four vector lanes and the tail round with cvt.rna"


# -- the GPU probe's hooks (csrc/recurrence/cuda/probe.h) ------------------------------------------
CLOCK = re.compile(r"SR_CLOCKLO|SR_GLOBALTIMER")
SKIP = re.compile(r"ProductsE(\d)ELj(\d+)E")  # the kernels' Skip template argument (the ladder's rung)


def test_the_installed_build_has_no_probe_in_it(built):
    """Without -DTSRNN_PROBE the kernels read no clock and only the rung 0 (nothing skipped) is
    built: the installed kernels are those without the probe's hooks (the probe build below shows
    both checks can fail)."""
    arch, _, sass, kernels = built
    for mangled, name in kernels.items():
        assert not CLOCK.search(sass[mangled]), f"{arch} {name}: a clock read in the installed build"
        assert SKIP.search(mangled).group(2) == "0", f"{arch} {name}: a ladder variant in the installed build"


@pytest.fixture(scope="module", params=list(SOURCES), ids=lambda name: f"{name}-probe-sm90")
def probe_built(request, tmp_path_factory):
    """The probe's build (-DTSRNN_PROBE=1, sm_90) of one kernel file: {(direction, precision, rung): SASS}
    of the LSTM kernels and the ladder's rungs, and the number of kernels."""
    if not NVCC.exists() or cuobjdump() is None:
        pytest.skip("needs nvcc ($CUDA_HOME/bin) and cuobjdump (CUDA's or Triton's)")
    out = tmp_path_factory.mktemp(f"{request.param}-probe")
    binary = out / "probe.o"
    done = subprocess.run([str(NVCC), "-std=c++17", "-O3", "-arch=sm_90", "-DTSRNN_PROBE=1", "-Werror", "all-warnings",
                           "-Xcompiler", "-Wall,-Wextra,-Werror", f"-I{ROOT / 'csrc'}", "-c",
                           str(SOURCES[request.param]), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    dump = subprocess.run([cuobjdump(), "-sass", str(binary)], capture_output=True, text=True, check=True).stdout
    sass = {m.group(1): m.group(2) for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", dump, re.S)}
    lstm = {}
    for mangled, code in sass.items():
        found = SKIP.search(mangled)
        if "LSTMCell" in mangled and found and found.group(1) != "0":
            lstm[("forward" if "forward_kernel" in mangled else "backward", PRODUCTS[found.group(1)],
                  int(found.group(2)))] = code
    return request.param, lstm, len(sass)


def _count(pattern: str, code: str) -> int:
    return len(re.findall(pattern, code))


# What each rung (probe.h's Part bits) must show against the baseline of its direction and precision.
RUNG_SASS = {
    1: ("mma: no HMMA, the operand loads (LDSM) stay",
        lambda r, b, o: _count(r"\bHMMA\.", r) == 0 and _count(r"\bLDSM\.", r) > _count(r"\bLDSM\.", o)),
    2: ("operands: no HMMA, no LDSM", lambda r, b, o: _count(r"\bHMMA\.", r) == 0
        and _count(r"\bLDSM\.", r) == 0 < _count(r"\bLDSM\.", b)),
    # (the cell's math stays: no fewer MUFU; the compiler may lay the cell out anew, even twice)
    4: ("cell_loads: fewer global loads and no cp.async, the cell's math stays",
        lambda r, b, o: _count(r"\bLDG\.", r) < _count(r"\bLDG\.", b) and _count(r"\bLDGSTS", r) == 0
        and _count(r"\bMUFU\.", r) >= _count(r"\bMUFU\.", b)),
    8: ("stores: fewer global stores, the cell's math stays",
        lambda r, b, o: _count(r"\bSTG\.", r) < _count(r"\bSTG\.", b) and _count(r"\bMUFU\.", r) >= _count(r"\bMUFU\.", b)),
    16: ("exchange: fewer generic (distributed shared memory) accesses and st.async pushes",
         lambda r, b, o: _count(r"\b(LD|ST)\.E|\bSTAS\b", r) < _count(r"\b(LD|ST)\.E|\bSTAS\b", b)),
    32: ("relaxed: fewer memory barriers", lambda r, b, o: _count(r"MEMBAR", r) < _count(r"MEMBAR", b)),
    # (the forward's loop already has two of each: the emulated ladder counts the dynamic arrivals)
    64: ("barriers: one or two cluster arrives and waits (the syncs before the loop and, but in the grid forward, "
         "before exit), no mbarrier wait",
         lambda r, b, o: 1 <= _count(r"UCGABAR_ARV", r) == _count(r"UCGABAR_WAIT", r) <= min(2, _count(r"UCGABAR_WAIT", b))
         and _count(r"SYNCS\.PHASECHK", r) == 0),
    128: ("grid_loads: fewer global loads", lambda r, b, o: _count(r"\bLDG\.", r) < _count(r"\bLDG\.", b)),
    256: ("flag_barrier: no atomic add, no poll", lambda r, b, o: "NANOSLEEP" not in r and "ATOM.E.ADD" not in r
          and "NANOSLEEP" in b),
}
RUNGS = {"cluster": [0, 1, 2, 4, 8, 16, 64], "grid": [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]}  # probe.h


def test_the_probe_build_traces_every_kernel_and_builds_every_rung(probe_built):
    """Every kernel of the probe's build reads the clock; the LSTM in TF32 and bf16 has each rung of
    its kernel in both directions beside the kernels of the installed build (two a cell and products)."""
    name, lstm, count = probe_built
    assert set(lstm) == {(d, p, r) for d in ("forward", "backward") for p in ("tf32", "bf16") for r in RUNGS[name]}
    assert count == 2 * len(CELLS) * len(PRODUCTS) + 2 * 2 * (len(RUNGS[name]) - 1)
    assert all(CLOCK.search(code) for code in lstm.values())


def test_each_rung_leaves_its_part_out_of_the_machine_code(probe_built):
    """The removal ladder measures what it claims only if the compiler really dropped the part (and
    nothing else dead with it: the stores rung keeps the cell's math)."""
    name, lstm, _ = probe_built
    for direction, precision in ((d, p) for d in ("forward", "backward") for p in ("tf32", "bf16")):
        base, operands = lstm[(direction, precision, 0)], lstm[(direction, precision, 2)]
        for rung in RUNGS[name][1:]:
            what, holds = RUNG_SASS[rung]
            assert holds(lstm[(direction, precision, rung)], base, operands), f"{name} {direction} {precision}: {what}"
