"""The persistent CUDA kernels' own source (csrc/recurrence/cuda/recurrence.cu), run on the CPU under the
SIMT emulation of tests/simt: every cell, forward, backward and saved traces, against the float64
reference with the float32 tolerances of tsrnn.testing, at the kernels' edge shapes and several
thread orders; packed sequences (batch_sizes) against the CPU operator in float64; once more
built with AddressSanitizer and UBSan; and with each barrier removed in turn (at run time, in a
process of its own: tests/simt/run.py --drop), to show that the emulation catches a missing one.
The emulation's own probes: shuffles, votes, tensor cores, clusters, atomics and the grid-resident
kernel's flag barrier (with its livelock report and two planted flag-barrier bugs)."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import tsrnn
from tsrnn import testing
from conftest import assert_close, needs_native

pytestmark = [pytest.mark.slow,  # compiles the emulation (cached after), with AddressSanitizer for one run
              pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")]

from simt import build, emulation  # noqa: E402
from simt.run import run_probes, run_table  # noqa: E402

SEEDS = (0, 1)  # thread orders in this process; the sanitized run draws another
SANITIZED_SEED = 2


@pytest.fixture(scope="module")
def simt():
    emulation.load(build.library())
    return emulation


@pytest.mark.parametrize("case", emulation.cases(SEEDS), ids=lambda c: c.id)
def test_kernel_source_matches_the_reference(simt, case):
    result = simt.check(case)
    assert result.ok, f"{case.edge}: {result.failures()}"


@needs_native  # the compiled CPU operator is the oracle of the packed layout
@pytest.mark.parametrize("case", emulation.packed_cases(SEEDS), ids=lambda c: c.id)
def test_packed_steps_match_the_cpu_operator(simt, case):
    """Packed sequences: each step runs only its active rows (h_all, state_n and the gradients of
    xg, w_hh, h0, state0 and p against torch.ops.tsrnn in float64 on the same values)."""
    result = simt.check_packed(case)
    assert result.ok, f"{case.edge}: {result.failures()}"


@pytest.mark.parametrize("cell, dt", [("lstm", False), ("plstm_separate", True)])
def test_an_h100s_launch_configuration(simt, cell, dt):
    shape, sms, edge = emulation.H100_SHAPE
    result = simt.check(emulation.Case(cell, shape, sms, dt, 0, edge))
    assert result.ok, f"{edge}: {result.failures()}"


@pytest.mark.parametrize("case", [c for c in emulation.cases(SEEDS[:1]) if c.shape[0] > 1 and c.dt == (c.cell != "lstm")],
                         ids=lambda c: c.id)
def test_saved_activations_are_the_reference_traces(simt, case):
    errors = simt.check_traces(case)
    assert all(err <= bound for err, bound in errors.values()), errors


@pytest.mark.parametrize("seed", SEEDS)
def test_multi_timescale_lstm_module(simt, seed):
    """The MTS-LSTM (fixed gate biases from the timescales) through tsrnn.LSTM: same kernel, its
    own bias composition."""
    simt.emulate(4, seed)
    x = torch.randn(5, 18, 3, generator=torch.Generator().manual_seed(seed))
    results = {}
    with simt.registered() as path:
        for name in (path, "reference"):
            torch.manual_seed(0)
            model = tsrnn.LSTM(3, 21, timescales=[torch.linspace(1, 30, 21)], backend=name)
            out, (h, c) = model(x)
            (out.square().sum() + c.sum()).backward()
            results[name] = (out.detach(), c.detach(), model.weight_hh_l0.grad, model.weight_ih_l0.grad)
    for got, want, what in zip(results[path], results["reference"], ("out", "c_n", "grad w_hh", "grad w_ih")):
        tol = testing.GRAD_TOLERANCE if what.startswith("grad") else testing.TOLERANCE
        assert_close(got, want, tol[torch.float32], what)


def test_the_plan_refuses_what_the_kernel_cannot_take(simt):
    """More than 16 units a block, or W_hh over the shared memory a block may opt in to: no plan,
    so the path is not offered, and the operator itself refuses with the reason."""
    with simt.registered() as path:
        simt.emulate(4, 0)
        assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 65), torch.float32, "cpu")
        assert testing.why_not(path, "lstm", (2, 2, 3, 64), torch.float32, "cpu") is None
        simt.emulate(4, 0, shared_optin=4 * 4 * 10 * 37 - 4)  # one float short of H = 37's tile
        assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 37), torch.float32, "cpu")
        xg, w_hh, h0 = torch.zeros(2, 2, 4 * 37), torch.zeros(4 * 37, 37), torch.zeros(2, 37)
        with pytest.raises(RuntimeError, match="does not take H=37"):
            torch.ops.tsrnn_simt.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, 0.0, False)
        # the CUDA entry's argument checks, their messages built without C++ streams (csrc/check_message.h)
        with pytest.raises(RuntimeError, match=r"^tsrnn: the CUDA kernels take float32, got Double"):
            torch.ops.tsrnn_simt.recurrence_forward("lstm", xg.double(), w_hh.double(), h0.double(), h0.double()[None],
                                                    None, None, 0.0, False)
        with pytest.raises(RuntimeError, match=r"^tsrnn: h0 must be \[2, 37\], got \[1, 37\]"):
            torch.ops.tsrnn_simt.recurrence_forward("lstm", xg, w_hh, h0[:1], h0[None], None, None, 0.0, False)


# The sanitized run's cases (nine seconds each under ASan): the padded shape with every edge of a
# block (B = 17 over its 16 warps, a last block of fewer units) and the packed 18-row one (rows of
# no step), each for the LSTM (one state, four saved activations) and the separate pLSTM with
# variable Δt (two states, five saved, p and Δt read); the packed B = 1 LSTM.
SANITIZED = ["packed-lstm-[1,1,1]", "lstm-(3, 17, 3, 37)", "plstm_separate-dt-(3, 17, 3, 37)", "lstm-[17,17,9,2]",
             "plstm_separate-dt-[17,17,9,2]"]


def test_sanitized_run_of_the_table():
    """AddressSanitizer (every global and shared-memory access in bounds) and UBSan over the padded
    and packed cases that cross a block's edges, in a process of its own (the ASan runtime must be
    preloaded)."""
    done, rows = run_table(build.library(sanitize=True), [SANITIZED_SEED], match=SANITIZED,
                           env=build.sanitizer_environment())
    assert done.returncode == 0 and "ERROR: AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr[-6000:]
    wanted = [case for case in emulation.table([SANITIZED_SEED]) if any(text in case.id for text in SANITIZED)]
    assert len(wanted) == 5 and len(rows) == len(wanted), done.stderr[-3000:]
    assert all(row["ok"] for row in rows), [row for row in rows if not row["ok"]]


def _barriers() -> dict[str, int]:
    """The source line of each barrier whose removal must be caught, by what it orders."""
    lines = build.KERNELS.read_text().splitlines()
    forward = next(i for i, line in enumerate(lines) if "forward_kernel(ForwardArgs" in line)
    backward = next(i for i, line in enumerate(lines) if "backward_kernel(BackwardArgs" in line)

    def first(pattern, start):
        return next(i for i in range(start, len(lines)) if re.search(pattern, lines[i])) + 1

    return {
        "forward: W_hh rows loaded into shared memory before the steps read them": first(r"__syncthreads\(\)", forward),
        "forward: h_t of every block written before step t+1 reads it": first(r"grid\.sync\(\)", forward),
        "backward: dz[t] of every block written before dL/dh_(t-1) reads it": first(r"grid\.sync\(\)", backward),
        "backward: dL/dh_(t-1) written before the next step's cells read it":
            max(i + 1 for i in range(backward, len(lines)) if "__syncthreads()" in lines[i]),
    }


@pytest.mark.parametrize("barrier", list(_barriers()))
def test_a_missing_barrier_is_caught(barrier):
    line = _barriers()[barrier]
    done, rows = run_table(build.library(), [0], match=["lstm-(3, 17, 3, 37)"], drop=f"{build.KERNELS.name}:{line}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows and not all(row["ok"] for row in rows), f"line {line} removed and every case still passed"


# -- the emulation itself ---------------------------------------------------------------------------
def test_shuffles_and_votes_return_what_cuda_defines(simt):
    for seed in SEEDS:
        assert torch.ops.simt.probe("shuffles", seed) == "ok"


@pytest.mark.parametrize("probe, message", [
    ("skipped_barrier", r"exits while threads of its block wait at this __syncthreads \(line \d+\)|deadlock"),
    ("two_barriers", r"reaches a __syncthreads while others wait at the one on line \d+ \(line \d+\)"),
    ("shuffle_outside_mask", r"a shuffle reads a lane outside its mask"),
    ("deadlock", r"deadlock: no thread can go on; .* waits at (__shfl_xor_sync|__syncthreads) on line \d+"),
    ("grid_sync", r"grid\.sync\(\) in a kernel not launched cooperatively"),
    ("racy_neighbours", r"race seen"),
    ("cluster_missing_barrier", r"wrong: a block read a slot its peer had not written"),
    ("cluster_wrong_rank", r"map_shared_rank to rank 4 of a cluster of 4 blocks \(line \d+\)"),
    ("cluster_early_exit", r"block rank \d of its cluster exits while a peer may still read its shared memory"
                           r"|map_shared_rank into block rank \d, which has exited \(line \d+\)"),
    ("cluster_exit_at_barrier", r"exits while threads of its cluster wait for it at this cluster barrier \(line \d+\)"
                                r"|deadlock: .* waits at cluster barrier_wait on line \d+"),
    ("cluster_map_outside", r"map_shared_rank of an address outside the block's shared memory \(line \d+\)"),
    ("cluster_double_arrive", r"arrives at the cluster barrier again without waiting \(line \d+\)"),
    ("wmma_assumed_layout", r"wrong: element"),
    ("wmma_misaligned", r"wmma::load_matrix_sync of a pointer not 256-bit aligned \(line \d+\)"),
    ("wmma_bad_ldm", r"wmma::load_matrix_sync with ldm not a multiple of 16 bytes \(line \d+\)"),
    ("wmma_lanes_disagree", r"wmma::load_matrix_sync with a pointer, ldm or layout that differs between the lanes"),
    ("wmma_half_warp", r"exits while its warp waits for it in wmma::load_matrix_sync \(line \d+\)"
                       r"|deadlock: .* waits at wmma::load_matrix_sync on line \d+"),
])
def test_what_cuda_leaves_undefined_is_reported(simt, probe, message):
    for seed in SEEDS:
        assert re.search(message, torch.ops.simt.probe(probe, seed)), torch.ops.simt.probe(probe, seed)


@pytest.mark.parametrize("probe", ["wmma_tf32", "wmma_tf32_truncates", "wmma_bf16", "wmma_fill", "cluster_exchange",
                                   "cluster_split_barrier", "cluster_of_one", "cluster_limits"])
def test_tensor_cores_and_clusters_compute_what_cuda_defines(simt, probe):
    """wmma's TF32 product (operands rounded with __float_to_tf32, or read truncated as the hardware
    reads them) and bf16 product against the host's, operands and accumulators loaded and stored
    row- and column-major in layouts drawn per seed, and fragments filled; clusters whose blocks
    write into each other's shared memory around a cluster barrier (sync, or split arrive/wait);
    a launch without a cluster dimension, whose blocks are clusters of one; the cluster launches
    CUDA refuses, and the count of co-resident clusters."""
    for seed in SEEDS + (SANITIZED_SEED,):
        assert torch.ops.simt.probe(probe, seed) == "ok", torch.ops.simt.probe(probe, seed)


# -- atomics and the grid-resident kernel's flag barrier (tests/simt/flag_probes.cpp) ----------------
FLAG_SEEDS = (0, 1, 2, 3)


def test_the_flag_barrier_orders_the_blocks_phases(simt):
    """8 blocks publish a NaN-filled slot per phase and read every other block's after
    tsrnn::cuda::FlagBarrier's arrive and wait, launched by cudaLaunchKernelEx with
    cudaLaunchAttributeCooperative, with and without clusters of 2; and atomicAdd (int, unsigned,
    unsigned long long, float), atomicCAS, atomicExch and cuda::atomic_ref count as CUDA's do."""
    for probe in ("flag_barrier", "atomics"):
        for seed in FLAG_SEEDS:
            assert torch.ops.simt.probe(probe, seed) == "ok", (probe, seed, torch.ops.simt.probe(probe, seed))


def test_a_cooperative_launch_must_fit_the_device(simt):
    """cudaLaunchKernelEx with the cooperative attribute, one block (or cluster) more than the
    emulated device holds at once: cudaErrorCooperativeLaunchTooLarge; as many: it runs (on an
    H100's shared memory: the device an earlier test left current may hold no block of the probe's)."""
    simt.emulate(4, 0)
    assert torch.ops.simt.probe("flag_barrier_cooperative_limits", 0) == "ok"


@pytest.mark.parametrize("probe, message", [
    # block 2 skips its arrive of phase 3: every block spins at phase 3, and block 2 arrived once less
    ("flag_barrier_missing_arrive", r"^cudaError 719 \(simt: livelock: block 0 thread 0 waits at flag barrier phase 3 "
                                    r"\(line \d+ of flag_barrier\.h\), reading 23 at 0x[0-9a-f]+;.* block 2 thread 0 "
                                    r"waits at flag barrier phase 3 .*atomic writes to 0x[0-9a-f]+: block 2 made 2, "
                                    r"every other block 3; no thread can change what they read"),
    # a spin lock whose holder exits without releasing it
    ("atomic_lost_unlock", r"livelock: block \d thread 0 waits at an atomic read \(line \d+ of flag_probes\.cpp\), "
                           r"reading 1 at 0x[0-9a-f]+;.* no thread can change what it reads"),
])
def test_a_wait_that_can_never_open_is_a_livelock(simt, probe, message):
    for seed in FLAG_SEEDS:
        got = torch.ops.simt.probe(probe, seed)
        assert re.search(message, got), got


def test_planted_flag_barrier_bugs_are_caught():
    """The emulation's atomics broken at run time (tests/simt/run.py --plant), the kernel source
    as it is: a counter that opens one arrival early lets a block read a slot not yet written (NaN)
    in some thread order of four; a block whose arrive is dropped leaves every block waiting at
    phase 1, reported as a livelock that names block 1 as the one that never wrote the counter."""
    done, early = run_probes(build.library(), ["flag_barrier"], FLAG_SEEDS, plant="flag_early")
    assert done.returncode == 0 and len(early) == len(FLAG_SEEDS), done.stderr[-3000:]
    assert any(re.search(r"stale read: block \d+ thread \d+ read nan in block \d+'s slot of phase \d+", got)
               for got in early.values()), early
    done, skipped = run_probes(build.library(), ["flag_barrier"], FLAG_SEEDS, plant="skip_arrive")
    assert done.returncode == 0 and len(skipped) == len(FLAG_SEEDS), done.stderr[-3000:]
    for got in skipped.values():
        assert re.search(r"livelock: .*block 1 thread 0 waits at flag barrier phase 1 .*"
                         r"atomic writes to 0x[0-9a-f]+: block 1 made 0, every other block 1;", got), got
