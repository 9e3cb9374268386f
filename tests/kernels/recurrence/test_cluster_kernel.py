"""The cluster-resident tensor-core kernel's own source (csrc/recurrence/cuda/cluster_recurrence.cu),
run on the CPU under the SIMT emulation of tests/simt (wmma fragments in a layout drawn per seed,
thread-block clusters, distributed shared memory): every cell, TF32, bf16 and exact products,
forward, backward and saved traces against the float64 reference through tsrnn.testing, at shapes
that cross its edges (B past a tile, H no multiple of 16, clusters of 1 to 16 blocks, T = 1), every
LENGTH_CASES entry, two thread orders; once more built with AddressSanitizer and UBSan; and with
each barrier removed in turn (at run time, in a process of its own: tests/simt/run.py --drop), to
show that the emulation catches a missing one."""
from __future__ import annotations

import shutil

import pytest
import torch

import tsrnn
from tsrnn import testing
from tsrnn.ops.recurrence import cells
from conftest import assert_close

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


@pytest.mark.parametrize("case", cluster.cases(SEEDS), ids=lambda c: c.id)
def test_kernel_source_matches_the_reference(simt, case):
    result = simt.check(case)
    assert result.ok, f"{case.edge}: {result.failures()}"


@pytest.mark.parametrize("case", cluster.lengths_cases(SEEDS[:1]), ids=lambda c: c.id)
def test_packed_rows_of_every_length_case(simt, case):
    """Rows of several lengths (tsrnn.testing.LENGTH_CASES, through tsrnn.functional's packing):
    each step runs its active rows only, forward and backward."""
    result = simt.check(case)
    assert result.ok, f"{case.lengths}: {result.failures()}"


@pytest.mark.parametrize("case", [c for c in cluster.cases(SEEDS[:1]) if c.shape[0] > 1 and c.cluster < 16
                                  and c.dt == bool(cells.CELLS[c.cell].step_input) and c.precision != "ieee"], ids=lambda c: c.id)
def test_saved_activations_are_the_reference_traces(simt, case):
    errors = simt.check_traces(case)
    assert all(err <= bound for err, bound in errors.values()), errors


def test_multi_timescale_lstm_module(simt):
    """The MTS-LSTM (fixed gate biases from the timescales) through tsrnn.LSTM on the TF32 kernel."""
    emulation.emulate(4, 0)
    x = torch.randn(5, 18, 3, generator=torch.Generator().manual_seed(0))
    results = {}
    with simt.registered("tf32") as path, simt.forced(2, 16):
        for name in (path, "reference"):
            torch.manual_seed(0)
            model = tsrnn.LSTM(3, 21, timescales=[torch.linspace(1, 30, 21)], backend=name)
            out, (h, c) = model(x)
            (out.square().sum() + c.sum()).backward()
            results[name] = (out.detach(), c.detach(), model.weight_hh_l0.grad, model.weight_ih_l0.grad)
    values, grads = testing.rows(torch.float32, "tf32")
    for got, want, what in zip(results[path], results["reference"], ("out", "c_n", "grad w_hh", "grad w_ih")):
        assert_close(got, want, grads if what.startswith("grad") else values, what)


def config(cell: str, H: int, B: int, precision: str) -> list[int]:
    return list(torch.ops.tsrnn_simt_cluster.recurrence_config(cell, torch.empty(0, H), B, precision))


def forward_product_counts(rows: int, width: int, tile: int, parts: int, k_step: int) -> tuple[int, int, int]:
    """A block's forward product z = W_r h^T as tensor_core.h cuts it: (mma a step, ldmatrix a step,
    ldmatrix once before the loop). Segments (m-tile s % m_tiles, part s // m_tiles of K in parts of
    ceil(k_steps / parts) k-steps) run on warp s % 8; a k-step of a segment is one mma an n8 tile
    and reads B by ldmatrix (.x4 for two n8 tiles, .x2 for an odd last one), and A by one .x4 unless
    the warp holds it: the first 8 k-steps of its first 3 segments, loaded once."""
    m_tiles, n_tiles, k_steps = rows // 16, tile // 8, width // k_step
    length = -(-k_steps // parts)
    mma = step = once = 0
    for s in range(m_tiles * -(-k_steps // length)):
        first = s // m_tiles * length
        steps = min(k_steps, first + length) - first
        held = min(steps, 8) if s // 8 < 3 else 0
        mma += steps * n_tiles
        step += steps * -(-n_tiles // 2) + steps - held
        once += held
    return mma, step, once


@pytest.mark.parametrize("shape, c, tile, precision, k_step, geometry", [
    ((3, 17, 37), 4, 16, "tf32", 8, (10, 48, 48, 1)),
    ((3, 17, 37), 4, 16, "bf16", 16, (10, 48, 48, 1)),
    ((2, 20, 150), 4, 24, "tf32", 8, (38, 160, 160, 3)),  # 30 segments a block: 6 past the 24 held
    ((2, 20, 150), 4, 24, "bf16", 16, (38, 160, 160, 2)),
], ids=str)
def test_the_forward_issues_the_mma_and_loads_the_plan_computes(simt, shape, c, tile, precision, k_step, geometry):
    """The forward's mma.sync and ldmatrix counted per warp by the emulation against
    forward_product_counts: (T, B, H) = (3, 17, 37) on clusters of 4 blocks, tiles of 16 rows (2
    clusters), rows 48 = 3 m-tiles, K whole (6 TF32 or 3 bf16 k-steps), every A fragment held: a
    step loads B only; (2, 20, 150), 4 blocks of 38 units, a 24-row tile (3 n8 tiles), rows and
    width 160: TF32's 20 k-steps in 3 parts, 30 segments of which a block's warps hold 24 (the
    rest read A each step), bf16's 10 in 2. A W fragment read again every step fails it. And no
    cluster barrier in the time loop: the cluster syncs before and after it are the only arrivals
    (each thread of each block, twice)."""
    emulation.emulate(16, 0)
    T, B, H = shape
    units, rows, width, parts = geometry
    with simt.forced(c, tile):
        got = config("lstm", H, B, precision)
        assert got[:4] == [c, tile, -(-B // tile), units] and got[6] == parts
        xg, w_hh, h0 = torch.randn(T, B, 4 * H), torch.randn(4 * H, H) / 8, torch.zeros(B, H)
        torch.ops.simt.reset_counts()
        torch.ops.tsrnn_simt_cluster.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, [], False, None,
                                                         precision)
        counts = torch.ops.simt.counts()
    blocks = c * -(-B // tile)
    mma, step, once = forward_product_counts(rows, width, tile, parts, k_step)
    assert counts["mma"] == blocks * T * mma
    assert counts["fragment_load"] == blocks * (once + T * step)
    assert counts["arrive_release"] + counts["arrive_relaxed"] == 2 * blocks * 256
    assert counts["bank_conflict"] == 0  # the padded rows


@pytest.mark.parametrize("optin, forward_bytes, backward_bytes", [
    (24576, 17296, 19216),  # neither direction has room for the cell's operands a step ahead
    (30000, 25488, 19216),  # the forward has (8 KiB of xg slots), the backward (14 KiB) has not
    (emulation.H100_SHARED_OPTIN, 25488, 33552),  # both prefetch (the table's other cases)
])
def test_the_cell_reads_global_memory_where_no_prefetch_fits(simt, optin, forward_bytes, backward_bytes):
    """(T, B, H) = (3, 17, 37), clusters of 4, tiles of 16 (rows 48, width 48, pitch 52 floats, 10
    units, one pair a thread, K whole: 6 k-steps): forward 16 + 4 (48 + 16) 52 + 4 x 16 x (48 + 4) +
    4 x 16 x 10 = 17296 bytes, backward 16 + 4 (48 + 32) 52 + 4 x 4 x 16 x 10 = 19216, the prefetch
    slots 2 x 4 x 256 (xg) and 2 x 7 x 256 floats (4 saved, 2 states, grad_h) more. Each plan is
    exact against the reference in both thread orders."""
    emulation.emulate(4, 0, optin)
    with simt.forced(4, 16):
        assert config("lstm", 37, 17, "tf32")[4:6] == [forward_bytes, backward_bytes]
    for seed in SEEDS:
        case = cluster.Case("lstm", (3, 17, 3, 37), 4, 16, "tf32", False, seed, "prefetch or not", shared_optin=optin)
        result = simt.check(case)
        assert result.ok, result.failures()


def test_the_plan_picks_a_cluster_per_the_cost_model(simt):
    """On an emulated H100 (132 SMs, 227 KiB of shared memory a block): W_hh of the LSTM at H = 400
    in TF32 (2.56 MB) needs all 16 blocks of a cluster; B = 20 in tiles of 8 rows (3 clusters, one
    pair a thread; a 24-row tile would make 3), the forward's 50 k-steps in 7 parts (segments of at
    most 8), the backward's 14 (rows 112) whole: 2 parts' sums and the cell's operands a step ahead
    do not both fit. At H = 128 the pLSTM's bf16 W_hh (98 KB) would fit one block, but its 128 units
    x 8 rows make 4 cell pairs a thread: the fitted model (bench/cost_model.py) takes clusters of
    16 blocks, one pair a thread."""
    emulation.emulate(132, 0)
    cluster_size, tile, clusters, units, forward_bytes, backward_bytes, forward_parts, backward_parts = \
        config("lstm", 400, 20, "tf32")
    assert (cluster_size, tile, clusters, units, forward_parts, backward_parts) == (16, 8, 3, 25, 7, 1)
    assert max(forward_bytes, backward_bytes) <= emulation.H100_SHARED_OPTIN
    assert config("plstm_coupled", 128, 128, "bf16")[:4] == [16, 8, 16, 8]


def test_the_plan_refuses_what_does_not_fit(simt):
    """W_hh over 16 blocks' shared memory, a cluster larger than the device, or a forced
    configuration that does not fit: no plan, so the path is not offered, and the operator itself
    refuses with the plan's reason."""
    emulation.emulate(4, 0)
    with simt.registered("tf32") as path:  # 16 blocks of 207 KB are not co-resident on 4 SMs
        assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 400), torch.float32, "cpu")
    emulation.emulate(16, 0)
    with simt.registered("tf32") as path:
        assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 1200), torch.float32, "cpu")
        assert testing.why_not(path, "lstm", (2, 2, 3, 400), torch.float32, "cpu") is None
        with simt.forced(1, 16):  # one block cannot hold H = 400's W_hh
            assert "does not fit" in testing.why_not(path, "lstm", (2, 2, 3, 400), torch.float32, "cpu")
            xg, w_hh, h0 = torch.zeros(2, 2, 4 * 400), torch.zeros(4 * 400, 400), torch.zeros(2, 400)
            with pytest.raises(RuntimeError, match="cluster-resident CUDA kernel does not take H=400.*forced"):
                torch.ops.tsrnn_simt_cluster.recurrence_forward("lstm", xg, w_hh, h0, h0[None], None, None, [],
                                                                 False, None, "tf32")
    with pytest.raises(RuntimeError, match="unknown precision 'tf16'"):
        torch.ops.tsrnn_simt_cluster.recurrence_forward("lstm", xg[:, :, :8], w_hh[:8, :2], h0[:, :2], h0[None, :, :2],
                                                         None, None, [], False, None, "tf16")


# A subset of the table for the sanitized and planted-bug runs: every cell form at the 4-block
# cluster in TF32 and bf16, and the packed rows; the planted-bug runs also at H = 150 in bf16, whose
# backward splits K (its parts summed after a block barrier of their own).
SUBSET = "(3, 17, 3, 37)-c4-t16-tf32"
DROP_CASES = [f"lstm-(3, 17, 3, 37)-c4-t16-{precision}" for precision in ("tf32", "bf16")] + \
             ["lstm-(2, 20, 3, 150)-c4-t24-bf16"]  # bf16 pushes pairs of units


def test_sanitized_run_of_the_table():
    """AddressSanitizer (every global, shared and distributed shared memory access in bounds) and
    UBSan over the 4-block cluster's TF32 cases of the LSTM (one state, four saved activations)
    and the separate pLSTM with variable Δt (two states, five saved, p and Δt read), and their
    packed cases (TF32 rows unsorted, bf16 with zeros), in a process of its own (~6 s a case)."""
    done, rows = run_table(build.library(sanitize=True), [SANITIZED_SEED], match=cluster.sanitized_cases(SUBSET),
                           env=build.sanitizer_environment(), kernel="cluster")
    assert done.returncode == 0 and "ERROR: AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr[-6000:]
    assert len(rows) == 4 and all(row["ok"] for row in rows), rows


@pytest.mark.parametrize("barrier", list(cluster.barrier_lines(build.CLUSTER_KERNELS)),
                         ids=lambda name: name.split(":")[0].replace(" ", ""))
def test_a_missing_barrier_is_caught(barrier):
    line = cluster.barrier_lines(build.CLUSTER_KERNELS)[barrier]
    done, rows = run_table(build.library(), SEEDS, match=DROP_CASES, kernel="cluster",
                           drop=f"{build.CLUSTER_KERNELS.name}:{line}", until_failure=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows and not rows[-1]["ok"], f"{barrier} removed and every case still passed"
    assert all(row["ok"] for row in rows[:-1]), rows  # the table stops at the first case that fails
