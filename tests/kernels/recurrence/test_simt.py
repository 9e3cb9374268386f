"""The SIMT emulation of tests/simt itself (the tensor-core kernels' tables are test_cluster_kernel.py
and test_grid_kernel.py): the MTS-LSTM module through an emulated kernel, the CUDA entry's argument
checks, and the emulation's own probes: shuffles, votes, tensor cores, clusters, what CUDA leaves
undefined, atomics and the grid-resident kernel's flag barrier (with its livelock report and two
planted flag-barrier bugs)."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import tsrnn
from tsrnn import testing
from conftest import assert_close

pytestmark = [pytest.mark.slow,  # compiles the emulation (cached after)
              pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")]

from simt import build, cluster, emulation  # noqa: E402
from simt.run import run_probes  # noqa: E402

SEEDS = (0, 1)  # thread orders
THIRD_SEED = 2  # one more thread order for the probes


@pytest.fixture(scope="module")
def simt():
    emulation.load(build.library())
    return emulation


@pytest.mark.parametrize("seed", SEEDS)
def test_multi_timescale_lstm_module(simt, seed):
    """The MTS-LSTM (fixed gate biases from the timescales) through tsrnn.LSTM on the emulated
    cluster-resident kernel with exact float32 products: its own bias composition, the LSTM's kernel."""
    simt.emulate(4, seed)
    x = torch.randn(5, 18, 3, generator=torch.Generator().manual_seed(seed))
    results = {}
    with cluster.registered("ieee") as path:
        for name in (path, "reference"):
            torch.manual_seed(0)
            model = tsrnn.LSTM(3, 21, timescales=[torch.linspace(1, 30, 21)], backend=name)
            out, (h, c) = model(x)
            (out.square().sum() + c.sum()).backward()
            results[name] = (out.detach(), c.detach(), model.weight_hh_l0.grad, model.weight_ih_l0.grad)
    for got, want, what in zip(results[path], results["reference"], ("out", "c_n", "grad w_hh", "grad w_ih")):
        tol = testing.GRAD_TOLERANCE if what.startswith("grad") else testing.TOLERANCE
        assert_close(got, want, tol[torch.float32], what)


def test_the_cuda_entry_checks_its_arguments(simt):
    """The CUDA entry's argument checks (csrc/recurrence/op.h through the tensor-core policies), their
    messages built without C++ streams (csrc/check_message.h)."""
    simt.emulate(4, 0)
    forward = torch.ops.tsrnn_simt_cluster.recurrence_forward
    xg, w_hh, h0 = torch.zeros(2, 2, 4 * 37), torch.zeros(4 * 37, 37), torch.zeros(2, 37)
    with pytest.raises(RuntimeError, match=r"^tsrnn: the CUDA kernels take float32, got Double"):
        forward("lstm", xg.double(), w_hh.double(), h0.double(), h0.double()[None], None, None, [], False, None, "tf32")
    with pytest.raises(RuntimeError, match=r"^tsrnn: h0 must be \[2, 37\], got \[1, 37\]"):
        forward("lstm", xg, w_hh, h0[:1], h0[None], None, None, [], False, None, "tf32")


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
    for seed in SEEDS + (THIRD_SEED,):
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
