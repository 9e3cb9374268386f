"""The grid-resident tensor-core kernel's own source (csrc/recurrence/cuda/grid_recurrence.cu), run
on the CPU under the SIMT emulation of tests/simt (ldmatrix and mma.sync as the PTX ISA's fragment
tables define them, clusters, distributed shared memory, cooperative launches, the flag barrier's atomics as points
where another thread runs): every cell, TF32, bf16 and exact products, forward, backward and saved
traces against the float64 reference through tsrnn.testing, at shapes that cross its edges (H no
multiple of 16 over clusters of uneven units, K slices that are partly or wholly empty, B in one
chunk or several, clusters of 1 to 8 blocks, the two directions on plans of their own, T = 1, B = 1, slices loaded 4, 8 and 16 bytes at a
time, W's fragment streams of one to three m-tiles a warp partly held), every LENGTH_CASES entry, two thread
orders; the plan at the target shapes on an emulated H100; once more built with AddressSanitizer and
UBSan; with each barrier removed in turn, and with the flag barrier broken (a counter that opens one
arrival early, a block that never arrives), at run time in a process of its own (tests/simt/run.py
--drop, --plant), to show that the emulation catches each."""
from __future__ import annotations

import os
import re
import shutil

import pytest
import torch

from tsrnn import testing
from tsrnn.ops.recurrence import cells

pytestmark = [pytest.mark.slow,  # compiles the emulation (cached after), with AddressSanitizer for one run
              pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")]

from simt import build, cluster, emulation  # noqa: E402
from simt.run import run_table  # noqa: E402

SEEDS = (0, 1)
SANITIZED_SEED = 2


@pytest.fixture(scope="module")
def simt():
    emulation.load(build.library())
    return cluster


@pytest.mark.parametrize("case", cluster.cases(SEEDS, "grid"), ids=lambda c: c.id)
def test_kernel_source_matches_the_reference(simt, case):
    result = simt.check(case)
    assert result.ok, f"{case.edge}: {result.failures()}"


@pytest.mark.parametrize("case", cluster.lengths_cases(SEEDS[:1], "grid"), ids=lambda c: c.id)
def test_packed_rows_of_every_length_case(simt, case):
    """Rows of several lengths (tsrnn.testing.LENGTH_CASES, through tsrnn.functional's packing):
    each step runs its active rows only, h_{t-1} read from the previous step's packed rows, dz_{t+1}
    zero for rows whose last step is t."""
    result = simt.check(case)
    assert result.ok, f"{case.lengths}: {result.failures()}"


@pytest.mark.parametrize("case", [c for c in cluster.cases(SEEDS[:1], "grid") if c.shape[0] > 1 and c.cluster < 8
                                  and c.dt == bool(cells.CELLS[c.cell].step_input) and c.precision != "ieee"], ids=lambda c: c.id)
def test_saved_activations_are_the_reference_traces(simt, case):
    """The saved activations, stored after the flag barrier's arrive, are the reference's traces."""
    errors = simt.check_traces(case)
    assert all(err <= bound for err, bound in errors.values()), errors


def test_the_counter_sees_one_arrival_a_cluster_and_step(simt):
    """H = 37 on 2 clusters of 2 blocks, T = 3: the flag barrier's counter is written 2 x 3 times by
    the forward and as many by the backward (one arrival a block would make twice as many)."""
    (case,) = [c for c in cluster.cases(SEEDS[:1], "grid") if c.id == f"grid-lstm-{SUBSET}-seed0"]
    torch.ops.simt.reset_counts()
    assert simt.check(case).ok
    assert torch.ops.simt.counts()["atomic_write"] == 2 * 3 + 2 * 3


def config(cell: str, H: int, B: int, precision: str) -> list[int]:
    return list(torch.ops.tsrnn_simt_grid.recurrence_config(cell, torch.empty(0, H), B, precision))


@pytest.mark.parametrize("cell", ["lstm", "plstm_coupled"])
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
@pytest.mark.parametrize("B", [20, 80])
def test_the_plan_covers_the_target_shapes_on_an_h100(simt, cell, precision, B):
    """H = 1150 (the AWD-LSTM layers) on an emulated H100 (132 SMs, 227 KiB a block): for each
    direction a plan whose blocks all fit at once, each block's shared memory within the opt-in
    limit, every unit owned, the (unit, row) pairs within what the cluster's threads carry, and the
    whole batch in one pass (W_hh's fragments held in registers leave the room). The TF32 LSTM at
    B = 80 needs a plan per direction for that: its forward's partial sums fit one pass only in
    clusters of at most 8 blocks, its backward's slice of dz only in clusters of 16."""
    emulation.emulate(132, 0)
    got = config(cell, 1150, B, precision)
    forward_bytes, backward_bytes = got[4:6]
    assert max(forward_bytes, backward_bytes) <= emulation.H100_SHARED_OPTIN
    for cluster_size, chunk, clusters, units in (got[:4], got[6:10]):
        assert cluster_size >= 1 and clusters * cluster_size <= 132
        assert clusters * units >= 1150 > (clusters - 1) * units
        assert units * B <= cluster_size * 256 * 4  # grid_recurrence.h's kMaxPairs a thread
        assert chunk % 16 == 0 and chunk >= B, got
    if (cell, precision, B) == ("lstm", "tf32", 80):
        assert got[0] <= 8 and got[6] == 16, got


def test_each_direction_is_forced_on_its_own(simt):
    """TSRNN_GRID's four-number form forces the forward's and the backward's (cluster, chunk) apart,
    its two-number form both; anything else is refused with what it takes."""
    emulation.emulate(4, 0)
    with simt.forced(2, 16, "grid", backward=(4, 32)):
        assert config("lstm", 37, 17, "tf32")[:4] + config("lstm", 37, 17, "tf32")[6:] == [2, 16, 2, 19, 4, 32, 1, 37]
    with simt.forced(2, 16, "grid"):
        got = config("lstm", 37, 17, "tf32")
        assert got[:4] == got[6:] == [2, 16, 2, 19]
    for bad in ("2,16,4", "2,16,4,32,1", "2;16", "2,-16"):
        with simt.forced(0, 0, "grid"):
            os.environ["TSRNN_GRID"] = bad
            with pytest.raises(RuntimeError, match="TSRNN_GRID must be 'a,b' or 'a,b,c,d'"):
                config("lstm", 37, 17, "tf32")


def test_the_plan_refuses_what_does_not_fit(simt):
    """W_hh of H = 1150 over 4 SMs, or a forced configuration that does not fit: no plan, so the path
    is not offered, and the operator itself refuses with the plan's reason."""
    emulation.emulate(4, 0)
    with simt.registered("tf32", "grid") as path:
        assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 1150), torch.float32, "cpu")
        assert testing.why_not(path, "lstm", (2, 2, 3, 40), torch.float32, "cpu") is None
        with simt.forced(16, 16, "grid"):  # 16 blocks are not resident on 4 SMs at once
            assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 40), torch.float32, "cpu")
            xg, w_hh, h0 = torch.zeros(2, 2, 4 * 40), torch.zeros(4 * 40, 40), torch.zeros(2, 40)
            with pytest.raises(RuntimeError, match="grid-resident CUDA kernel does not take H=40, B=2.*forced"):
                torch.ops.tsrnn_simt_grid.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, [], False,
                                                             None, "tf32")
        with simt.forced(2, 24, "grid"), pytest.raises(RuntimeError, match="does not fit"):  # no chunk of 24 rows
            torch.ops.tsrnn_simt_grid.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, [], False,
                                                         None, "tf32")


# A subset of the table for the sanitized, planted-bug and missing-barrier runs: the shape with two
# clusters of 2 blocks, two chunks and uneven K slices, TF32, every cell form.
SUBSET = "(3, 17, 3, 37)-c2-t16-tf32"


def test_sanitized_run_of_the_table():
    """AddressSanitizer (every global, shared and distributed shared memory access in bounds) and
    UBSan over the subset's LSTM and separate pLSTM with variable Δt, and their packed cases, in a
    process of its own."""
    done, rows = run_table(build.library(sanitize=True), [SANITIZED_SEED], match=cluster.sanitized_cases(SUBSET),
                           env=build.sanitizer_environment(), kernel="grid")
    assert done.returncode == 0 and "ERROR: AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr[-6000:]
    assert len(rows) == 4 and all(row["ok"] for row in rows), rows


def test_a_flag_barrier_that_opens_early_is_caught():
    """The emulation's acquire loads read one arrival more than the counter holds (run.py's
    --plant flag_early): a block starts step t + 1 while a block of another cluster has not yet
    written its h_t (or dz_{t+1}), and reads the NaN of fresh memory, in some case and thread order
    (about half of them: the odd seeds' warp priorities let a block run ahead)."""
    seeds = (0, 1, 2, 3)
    done, rows = run_table(build.library(), seeds, match=[f"-{SUBSET}"], kernel="grid", plant="flag_early")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(rows) == len(cluster.CELL_FORMS) * len(seeds) and not all(row["ok"] for row in rows), rows


def test_a_block_that_never_arrives_is_a_livelock_not_a_hang():
    """Block 1's arrivals are dropped (--plant skip_arrive) where it is a cluster of its own (H = 261
    over 16 clusters of one block): every other block waits at phase 1 of the first launch; the
    emulation reports a livelock that names the blocks, the phase and block 1 as the one that never
    wrote the counter, and the operator raises it."""
    done, rows = run_table(build.library(), SEEDS[:1], match=["lstm-(2, 3, 2, 261)-c1-t16-tf32"], kernel="grid",
                           plant="skip_arrive")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(rows) == 1 and not rows[0]["ok"], rows
    assert re.search(r"livelock: .*waits at flag barrier phase 1 .*block 1 made 0", rows[0]["failures"]), rows[0]


@pytest.mark.parametrize("barrier", list(cluster.barrier_lines(build.GRID_KERNELS)),
                         ids=lambda name: name.split(":")[0].replace(" ", ""))
def test_a_missing_barrier_is_caught(barrier):
    line = cluster.barrier_lines(build.GRID_KERNELS)[barrier]
    done, rows = run_table(build.library(), SEEDS, match=[f"-{SUBSET}"], kernel="grid",
                           drop=f"{build.GRID_KERNELS.name}:{line}", until_failure=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows and not rows[-1]["ok"], f"{barrier} removed and every case still passed"
    assert all(row["ok"] for row in rows[:-1]), rows  # the table stops at the first case that fails


def fence_lines() -> list[int]:
    """The lines of exchange_sync's two restricted fences in the grid kernel's source."""
    lines = build.GRID_KERNELS.read_text().splitlines()
    return [i + 1 for i, line in enumerate(lines) if re.search(r"ptx::fence_(release_own|acquire_cluster)_shared\(\)", line)]


def exchange_counts(simt) -> dict[str, int]:
    (case,) = [c for c in cluster.cases(SEEDS[:1], "grid") if c.id == f"grid-lstm-{SUBSET}-seed0"]
    torch.ops.simt.reset_counts()
    result = simt.check(case)
    counts = torch.ops.simt.counts()
    return {"ok": result.ok, **{k: counts[k] for k in ("arrive_relaxed", "fence_shared_release", "fence_shared_acquire")}}


def test_the_product_barrier_publishes_shared_memory_only(simt):
    """The barrier after each product (exchange_sync) arrives relaxed between a release fence
    restricted to the block's shared memory and an acquire fence restricted to the cluster's, no
    GPU-wide fence (test_cuda_sass.py counts those); the cluster's other barriers stay
    release-flavoured. On the subset's LSTM (T = 3, B = 17 in two chunks, 2 clusters of 2 blocks):
    one of each a thread and product, 3 forward and 3 backward products (the backward's first step
    has no dz_{t+1}: its last product gives dL/dh0) of two chunks each. With the fences' lines
    dropped (the emulation's set_drop), the counts say so: the check can fail."""
    assert len(fence_lines()) == 2
    products = (3 + 3) * 2 * 4 * 256  # products x chunks x blocks x threads
    assert exchange_counts(simt) == {"ok": True, "arrive_relaxed": products, "fence_shared_release": products,
                                     "fence_shared_acquire": products}
    for line in fence_lines():
        torch.ops.simt.drop_barrier(build.GRID_KERNELS.name, line)
        try:
            counts = exchange_counts(simt)
        finally:
            torch.ops.simt.drop_barrier("", 0)
        assert counts["arrive_relaxed"] == products and 0 in (counts["fence_shared_release"], counts["fence_shared_acquire"])
