"""The SIMT emulation of csrc/recurrence/cuda/ptx.h's PTX wrappers (tests/simt/ptx_emulation.h,
probes in tests/simt/ptx_probes.cpp): an st.async ping-pong between two blocks of a cluster and a
cluster of 4 exchanging slices every step (st.async or cp.async.bulk into double-buffered tiles,
completing on mbarriers) run in every thread order; ldmatrix (x1, x2, x4, .trans) and mma.sync
(TF32 m16n8k8, bf16 m16n8k16) hand each lane the elements the PTX ISA's tables say (the references
below are transcribed from the ISA, not from the emulation); a warp's GEMM through them is exact;
cp.async lands at its wait; and each of the emulation's checks fails on its planted bug. The
emulation is sequentially consistent: a missing fence or a relaxed order where an acquire is
needed cannot show here."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.slow,  # compiles the emulation (cached after)
              pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")]

from simt import build, emulation  # noqa: E402

SEEDS = (0, 1, 2, 3)  # even: a uniform thread order; odd: by warp


@pytest.fixture(scope="module")
def simt():
    emulation.load(build.library())
    return emulation


def test_an_st_async_ping_pong_completes_on_the_peers_mbarrier(simt):
    """8 round trips: each push lands in the peer's slot and completes its phase (1 arrival with
    expect_tx 4 bytes, then 4 bytes of complete_tx, in either order), each wait on the next parity."""
    for seed in SEEDS:
        assert torch.ops.simt.probe("ptx_pingpong", seed) == "ok"


def ldmatrix_reference(matrices: int, trans: bool, row_of_lane) -> list[int]:
    """The 32 lanes' registers of ldmatrix.sync.aligned.m8n8.x{matrices}{.trans}.b16, from the PTX ISA:
    lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i; in each matrix, lane l holds row
    l >> 2 (its group), columns 2 (l % 4) and 2 (l % 4) + 1, the first in the low 16 bits of
    register i; with .trans the matrix is read column-major: column l >> 2, rows 2 (l % 4) and
    2 (l % 4) + 1. row_of_lane(l): the (row, column) of the 64 x 16 tile (element (r, c) = 16 r + c)
    whose address lane l gave."""
    registers = []
    for lane in range(32):
        for matrix in range(matrices):
            if trans:
                pair = [row_of_lane(8 * matrix + 2 * (lane % 4) + h) for h in (0, 1)]
                low, high = (16 * row + column + lane // 4 for row, column in pair)
            else:
                row, column = row_of_lane(8 * matrix + lane // 4)
                low = 16 * row + column + 2 * (lane % 4)
                high = low + 1
            registers.append(low | high << 16)
    return registers


@pytest.mark.parametrize("matrices", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_loads_the_fragments_of_the_ptx_isa(simt, matrices, trans):
    expected = ldmatrix_reference(matrices, trans, lambda lane: ((7 * lane + 3) % 64, 8 * (lane % 2)))  # ptx_probes.cpp's addresses
    name = f"ptx_ldmatrix_x{matrices}" + ("_trans" if trans else "")
    for seed in SEEDS:
        got = [int(v) for v in torch.ops.simt.probe(name, seed).split()]
        assert got == expected


# The PTX ISA's fragment tables of mma.sync ("Matrix Fragments for mma.m16n8k8" (.tf32) and
# "mma.m16n8k16" (.bf16), f32 accumulators), with groupID = %laneid >> 2 and
# threadID_in_group = %laneid % 4: the (row, column) of element i of a lane's fragment.
def isa_a(bf16: bool, lane: int, i: int) -> tuple[int, int]:
    group, in_group = lane >> 2, lane % 4
    if bf16:
        row = group if 0 <= i < 2 or 4 <= i < 6 else group + 8
        column = in_group * 2 + (i & 1) if i < 4 else in_group * 2 + (i & 1) + 8
    else:
        row = group if i in (0, 2) else group + 8
        column = in_group if i in (0, 1) else in_group + 4
    return row, column


def isa_b(bf16: bool, lane: int, i: int) -> tuple[int, int]:
    group, in_group = lane >> 2, lane % 4
    if bf16:
        row = in_group * 2 + (i & 1) if i < 2 else in_group * 2 + (i & 1) + 8
    else:
        row = in_group if i == 0 else in_group + 4
    return row, group


def isa_c(lane: int, i: int) -> tuple[int, int]:
    group, in_group = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), in_group * 2 + (i & 1)


def mma_input(lane: int, element: int, which: int) -> int:
    """ptx_probes.cpp's mma_input: the value of element `element` of lane `lane`'s A (0), B (1) or C (2)."""
    return (lane * 7 + element * 3 + which * 5) % 17 - 8


@pytest.mark.parametrize("bf16", [False, True], ids=["tf32_m16n8k8", "bf16_m16n8k16"])
def test_mma_sync_follows_the_fragment_tables_of_the_ptx_isa(simt, bf16):
    """Each lane passes known registers; A, B and C are rebuilt from them with the ISA's tables and
    every lane's d must be its element of A B + C (small integers: exact)."""
    k = 16 if bf16 else 8
    per_lane = 8 if bf16 else 4
    a, b, c = np.zeros((16, k)), np.zeros((k, 8)), np.zeros((16, 8))
    for table, matrix, count, which in ((lambda l, i: isa_a(bf16, l, i), a, per_lane, 0),
                                        (lambda l, i: isa_b(bf16, l, i), b, per_lane // 2, 1), (isa_c, c, 4, 2)):
        seen = set()
        for lane in range(32):
            for i in range(count):
                seen.add(table(lane, i))
                matrix[table(lane, i)] = mma_input(lane, i, which)
        assert len(seen) == matrix.size  # each table covers its matrix once
    d = a @ b + c
    expected = [int(d[isa_c(lane, i)]) for lane in range(32) for i in range(4)]
    for seed in SEEDS:
        got = [int(v) for v in torch.ops.simt.probe("ptx_mma_" + ("bf16" if bf16 else "tf32"), seed).split()]
        assert got == expected


@pytest.mark.parametrize("probe, conflicts", [("ptx_gemm_tf32", 32), ("ptx_gemm_bf16", 0)])
def test_a_warps_gemm_through_ldmatrix_and_mma_sync_is_exact(simt, probe, conflicts):
    """16 x 32 by 32 x 16 in n8 tiles (ptx_probes.cpp's warp_gemm), B n-major (TF32) or k-major read
    with .trans (bf16). The bank-conflict count of the emulation's model: TF32 rows 160 bytes apart
    put two of a matrix's 8 rows in each 16-byte bank group (2-way: one wavefront extra for each of
    the 4 k-steps' 4 A matrices and 2 x 2 B matrices), the bf16 pitches of 80 and 48 bytes none."""
    for seed in SEEDS:
        torch.ops.simt.reset_counts()
        assert torch.ops.simt.probe(probe, seed) == "ok"
        counts = torch.ops.simt.counts()
        assert counts["bank_conflict"] == conflicts
        assert counts["mma"] == (8 if "tf32" in probe else 4)  # K / k-step x 2 n8 tiles, per warp


@pytest.mark.parametrize("probe", ["ptx_exchange_st_async", "ptx_exchange_bulk", "ptx_cp_async"])
def test_the_asynchronous_copies_deliver_at_their_waits(simt, probe):
    for seed in SEEDS:
        assert torch.ops.simt.probe(probe, seed) == "ok"


@pytest.mark.parametrize("probe, message", [
    ("ptx_wrong_peer", r"mapa to rank 2 of a cluster of 2 blocks \(line \d+\)"),
    # waits on parity 0 every round: the phase it already waited for, or (its own arrival having
    # completed phase 1 already) a phase 2 that nobody completes
    ("ptx_reused_phase", r"try_wait\.parity succeeds again on the phase the thread already waited for \(a reused phase "
                         r"parity\)|livelock: block \d thread 0 waits at mbarrier phase parity 0"),
    ("ptx_missing_expect_tx", r"livelock: block 0 thread 0 waits at mbarrier phase parity 0 \(line \d+ of ptx_probes\.cpp\)"
                              r".*no thread can change what it reads"),
    ("ptx_uninitialized_mbarrier", r"an mbarrier used before mbarrier\.init \(line \d+\)"),
    ("ptx_remote_arrival_unmapped", r"a remote mbarrier arrive at a shared::cta address \(mapa it first\) \(line \d+\)"),
    ("ptx_extra_arrival", r"an arrival at an mbarrier phase with no pending arrival left \(line \d+\)"),
    ("ptx_misaligned_mbarrier", r"an mbarrier at an address not 8-byte aligned \(line \d+\)"),
    ("ptx_other_blocks_barrier", r"st\.async into one block completing on another block's mbarrier \(line \d+\)"),
    ("ptx_ldmatrix_misaligned", r"ldmatrix's row at an address not 16-byte aligned \(line \d+\)"),
    ("ptx_vector_load_misaligned", r"__ldcg of 16 bytes at an address not 16-byte aligned \(line \d+\)"),
    ("ptx_gemm_off_by_one", r"^wrong: D\(3, "),  # lane 3 passes A's row 4 as row 3: D's row 3 gets row 4's products
    ("ptx_gemm_missing_trans", r"^wrong: D\("),
    # rank 0 pushes rank 1's share into rank 2: rank 1's phase never completes, the others stall behind it
    ("ptx_exchange_st_async_rank_inside", r"^cudaError 719 \(simt: livelock: block \d thread \d+ waits at exchange step \d"),
    ("ptx_exchange_bulk_rank_inside", r"^cudaError 719 \(simt: livelock: block \d thread \d+ waits at exchange step \d"),
    ("ptx_exchange_st_async_read_before_wait", r"^wrong: a block read another value than its peer pushed$"),
    ("ptx_exchange_bulk_read_before_wait", r"^wrong: a block read another value than its peer pushed$"),
    ("ptx_exchange_st_async_same_parity", r"try_wait\.parity succeeds again on the phase the thread already waited for"),
    ("ptx_exchange_bulk_same_parity", r"try_wait\.parity succeeds again on the phase the thread already waited for"),
    ("ptx_cp_async_read_before_wait", r"^wrong: a thread read another value than it copied$"),
])
def test_each_check_fails_on_its_planted_bug(simt, probe, message):
    for seed in SEEDS:
        got = torch.ops.simt.probe(probe, seed)
        assert re.search(message, got), got
        assert torch.ops.simt.probe("ptx_pingpong", seed) == "ok"  # a failed launch leaves nothing behind
