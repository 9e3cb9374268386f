"""The CPU time loops' per-step GEMM kernels (csrc/cpu/panel_gemm.h): each kernel this CPU runs
against a float64 product on the edges of its tiles and panels, the run-time choice against the
CPU's features, the TSRNN_CPU_GEMM override, and the recurrence through them in float32."""
import os
import subprocess
import sys

import pytest
import torch

from tsrnn import cells, testing
from conftest import needs_native

pytestmark = needs_native

# (M, N, K): one element; M over a tile's rows (AVX-512 14, AVX2 6) into uneven blocks; N under,
# at and over a panel (32, 16) by one, and none (a thread's empty slice); K of 0 (C = 0), 1 and the
# recurrent sizes.
GEMM_SHAPES = [(1, 1, 1), (6, 16, 3), (7, 17, 5), (14, 32, 8), (15, 33, 9), (20, 4 * 67, 67), (29, 31, 256),
               (128, 100, 40), (3, 5, 0), (5, 0, 3), (37, 2, 130)]


def kernels():
    return list(torch.ops.tsrnn.cpu_gemm_kernels())


def expected_kernels():
    """The kernels the CPU's flags promise (Linux x86-64: /proc/cpuinfo), widest first."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags to check against")
    return [name for name, need in (("avx512", {"avx512f"}), ("avx2", {"avx2", "fma"})) if need <= set(flags)]


def test_the_kernels_are_those_the_cpu_runs():
    if os.uname().machine != "x86_64":
        assert kernels() == []
        return
    assert kernels() == expected_kernels()


@pytest.mark.parametrize("trans_b", [False, True], ids=["b", "b.t()"])
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=str)
def test_kernel_matches_a_float64_product(shape, trans_b):
    """|C - A op(B)| within the bound of a K-term float32 dot product, K u (|A| |op(B)|)."""
    if not kernels():
        pytest.skip("this CPU runs none of the kernels (ATen's GEMM is used)")
    M, N, K = shape
    g = torch.Generator().manual_seed(M * 1000 + N * 10 + K)
    a = torch.randn(M, K, generator=g)
    b = torch.randn(N, K, generator=g) if trans_b else torch.randn(K, N, generator=g)
    op_b = (b.t() if trans_b else b).double()
    want = a.double() @ op_b
    bound = max(K, 1) * 2.0**-24 * (a.double().abs() @ op_b.abs()) + 1e-30
    for name in kernels():
        got = torch.ops.tsrnn.cpu_gemm(a, b, trans_b, name)
        assert got.shape == (M, N) and got.dtype == torch.float32
        excess = ((got.double() - want).abs() - bound).max().item() if M * N else 0.0
        assert excess <= 0, f"{name} {shape} trans_b={trans_b}: past the rounding bound by {excess:.3e}"


def test_kernel_takes_row_strides():
    """A read with its own row stride and C written with one wider than N, as the loops call the
    kernel on slices; a non-contiguous b is packed from a copy."""
    if not kernels():
        pytest.skip("this CPU runs none of the kernels (ATen's GEMM is used)")
    a = torch.randn(40, 9)[::2]  # 20 rows, row stride 18
    b = torch.randn(9, 70).t()  # op(b) = b.t() with b non-contiguous
    for name in kernels():
        c = torch.ops.tsrnn.cpu_gemm(a, b, True, name)
        assert c.stride(0) > c.shape[1]
        torch.testing.assert_close(c, a @ b.t(), rtol=1e-5, atol=1e-5)


def test_bad_calls_say_what_is_wrong():
    with pytest.raises(RuntimeError, match="does not run the 'sse' kernel"):
        torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2), torch.ones(2, 2), False, "sse")
    with pytest.raises(RuntimeError, match="takes float32"):
        torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2), False, "avx2")
    with pytest.raises(RuntimeError, match="do not multiply"):
        torch.ops.tsrnn.cpu_gemm(torch.ones(2, 3), torch.ones(2, 2), False, "avx2")


@pytest.mark.parametrize("lengths", [None, "unsorted"])
@pytest.mark.parametrize("shape", testing.CPU_GEMM_SHAPES, ids=str)
@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_recurrence_through_the_kernel(cell, shape, lengths):
    """The cpu path in float32 (the kernel's dtype) on the tiles' and panels' edges, with two
    threads; with lengths, the rows of a step, and so its tiles, shrink as the rows end."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = testing.compare("cpu", cell, shape, torch.float32, dt=cells.get(cell).has_p, seed=shape[1],
                                 lengths=lengths)
    finally:
        torch.set_num_threads(before)
    assert result.ok, result.failures()


def run_with(setting: str):
    """A fresh process whose CPU loops use TSRNN_CPU_GEMM=setting: the LSTM and the separate pLSTM
    in float32 on the last of CPU_GEMM_SHAPES against the reference; prints the kernel in use."""
    code = ("import torch\n"
            "from tsrnn import testing\n"
            "for cell in ('lstm', 'plstm_separate'):\n"
            "    r = testing.compare('cpu', cell, testing.CPU_GEMM_SHAPES[-1], __import__('torch').float32,\n"
            "                        dt=cell != 'lstm')\n"
            "    assert r.ok, r.failures()\n"
            "print(torch.ops.tsrnn.cpu_gemm_in_use())\n")
    env = {**os.environ, "TSRNN_CPU_GEMM": setting}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("setting", ["aten", "avx2", "avx512"])
def test_override_picks_the_kernel(setting):
    if setting != "aten" and setting not in kernels():
        pytest.skip(f"this CPU does not run {setting}")
    done = run_with(setting)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == setting


def test_the_loops_use_the_widest_kernel_by_default():
    if os.environ.get("TSRNN_CPU_GEMM"):
        pytest.skip("TSRNN_CPU_GEMM is set in this process")
    assert torch.ops.tsrnn.cpu_gemm_in_use() == (kernels() or ["aten"])[0]


def test_override_refuses_an_unknown_kernel():
    done = run_with("avx1024")
    assert done.returncode != 0
    assert "TSRNN_CPU_GEMM must be 'avx512', 'avx2' or 'aten', got 'avx1024'" in done.stderr
