"""The SIMT emulation of csrc/recurrence/cuda/ptx.h's PTX wrappers (tests/simt/ptx_emulation.h,
probes in tests/simt/ptx_probes.cpp): an st.async ping-pong between two blocks of a cluster
completing on mbarriers runs in every thread order; ldmatrix x4 hands each lane the elements the
PTX ISA's table says (the reference below is written from the ISA, not from the emulation); and
each of the emulation's checks fails on its planted bug. The emulation is sequentially consistent:
a missing fence or a relaxed order where an acquire is needed cannot show here."""
from __future__ import annotations

import re
import shutil

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


def ldmatrix_reference(row_of_lane) -> list[int]:
    """The 32 lanes' 4 registers of ldmatrix.sync.aligned.m8n8.x4.b16, from the PTX ISA: lanes 8i..8i+7
    give the addresses of rows 0..7 of matrix i; in each matrix, lane l holds row l >> 2 (its group),
    columns 2 (l % 4) and 2 (l % 4) + 1, the first in the low 16 bits of register i. row_of_lane(l): the
    (row, column) of the 64 x 16 tile (element (r, c) = 16 r + c) whose address lane l gave."""
    registers = []
    for lane in range(32):
        for matrix in range(4):
            row, column = row_of_lane(8 * matrix + lane // 4)
            first = 16 * row + column + 2 * (lane % 4)
            registers.append(first | (first + 1) << 16)
    return registers


def test_ldmatrix_x4_loads_the_fragments_of_the_ptx_isa(simt):
    expected = ldmatrix_reference(lambda lane: ((7 * lane + 3) % 64, 8 * (lane % 2)))  # ptx_probes.cpp's addresses
    for seed in SEEDS:
        got = [int(v) for v in torch.ops.simt.probe("ptx_ldmatrix_fragments", seed).split()]
        assert got == expected


@pytest.mark.parametrize("probe, message", [
    ("ptx_wrong_peer", r"mapa to rank 2 of a cluster of 2 blocks \(line \d+\)"),
    # waits on parity 0 every round: the phase it already waited for, or (its own arrival having
    # completed phase 1 already) a phase 2 that nobody completes
    ("ptx_reused_phase", r"try_wait\.parity succeeds again on the phase the thread already waited for \(a reused phase "
                         r"parity\)|livelock: block \d thread 0 waits at mbarrier phase parity 0"),
    ("ptx_missing_expect_tx", r"livelock: block 0 thread 0 waits at mbarrier phase parity 0 \(line \d+ of ptx_probes\.cpp\)"
                              r".*no thread can change what it reads"),
    ("ptx_uninitialized_mbarrier", r"an mbarrier used before mbarrier\.init \(line \d+\)"),
    ("ptx_misaligned_mbarrier", r"an mbarrier at an address not 8-byte aligned \(line \d+\)"),
    ("ptx_other_blocks_barrier", r"st\.async into one block completing on another block's mbarrier \(line \d+\)"),
    ("ptx_ldmatrix_misaligned", r"ldmatrix's row at an address not 16-byte aligned \(line \d+\)"),
])
def test_each_check_fails_on_its_planted_bug(simt, probe, message):
    for seed in SEEDS:
        got = torch.ops.simt.probe(probe, seed)
        assert re.search(message, got), got
        assert torch.ops.simt.probe("ptx_pingpong", seed) == "ok"  # a failed launch leaves nothing behind
