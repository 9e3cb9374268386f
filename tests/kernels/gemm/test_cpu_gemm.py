"""The CPU engine's GEMM kernels (csrc/gemm/panel_gemm.h) and their two drivers, the time loops'
per step and the blocked one of the large GEMMs (csrc/gemm/blocked_gemm.h): each kernel this CPU
runs against a float64 product on the edges of its tiles, panels and blocks, the run-time choice
against the CPU's features, the TSRNN_CPU_GEMM override, and the recurrence through them in
float32."""
import os
import subprocess
import sys

import pytest
import torch

from tsrnn import testing
from tsrnn.ops.recurrence import cells
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


# The blocked driver's edges besides GEMM_SHAPES': K over one 1024-deep block (1025, and 2100 in
# three of 700), M over its 112-row blocks (AVX2: 48) and split between threads, B's packing split
# over (k block, panel) units ((40, 300, 1030): 2 x 10).
BLOCKED_SHAPES = GEMM_SHAPES + [(113, 65, 1025), (300, 47, 800), (2, 3, 2100), (250, 33, 20), (40, 300, 1030)]


def operands(shape, a_layout, b_transposed):
    """a [M, K] ("rows", "transposed": a view of a [K, M] tensor, or "strided": every other column
    of a [M, 2K] one, neither stride 1) and b [K, N], a transposed view if asked."""
    M, N, K = shape
    g = torch.Generator().manual_seed(M * 1000 + N * 10 + K)
    a = {"rows": lambda: torch.randn(M, K, generator=g),
         "transposed": lambda: torch.randn(K, M, generator=g).t(),
         "strided": lambda: torch.randn(M, 2 * K, generator=g)[:, ::2]}[a_layout]()
    b = torch.randn(N, K, generator=g).t() if b_transposed else torch.randn(K, N, generator=g)
    return a, b


def assert_within_rounding(got, want, bound, what):
    """|got - want| <= bound elementwise (bound: a K-term float32 sum's, K u sum|terms|)."""
    excess = ((got.double() - want).abs() - bound - 1e-30).max().item() if got.numel() else 0.0
    assert excess <= 0, f"{what}: past the rounding bound by {excess:.3e}"


@pytest.mark.parametrize("b_transposed", [False, True], ids=["b", "b.t()"])
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=str)
def test_step_driver_matches_a_float64_product(shape, b_transposed):
    """|C - A B| within the bound of a K-term float32 dot product, K u (|A| |B|)."""
    if not kernels():
        pytest.skip("this CPU runs none of the kernels (ATen's GEMM is used)")
    a, b = operands(shape, "rows", b_transposed)
    want = a.double() @ b.double()
    bound = max(shape[2], 1) * 2.0**-24 * (a.double().abs() @ b.double().abs())
    for name in kernels():
        got, sums = torch.ops.tsrnn.cpu_gemm(a, b, name)
        assert got.shape == shape[:2] and got.dtype == torch.float32 and sums.numel() == 0
        assert_within_rounding(got, want, bound, f"{name} {shape} b_transposed={b_transposed}")


@pytest.mark.parametrize("init", [None, "row", "matrix"])
@pytest.mark.parametrize("a_layout,b_transposed", [("rows", False), ("rows", True), ("transposed", False),
                                                   ("strided", False)],
                         ids=["a b", "a b.t()", "a.t() b", "a[:, ::2] b"])
@pytest.mark.parametrize("shape", BLOCKED_SHAPES, ids=str)
def test_blocked_driver_matches_a_float64_product(shape, a_layout, b_transposed, init):
    """C = init + A B (init: none, a bias row, or C itself added to) and A's row sums, each within
    the rounding bound of its sum; A read in place as the weight gradients' dz^T, or copied by
    blocks (its rows contiguous or neither stride 1); two threads."""
    if not kernels():
        pytest.skip("this CPU runs none of the kernels (ATen's GEMM is used)")
    M, N, K = shape
    a, b = operands(shape, a_layout, b_transposed)
    start = {None: None, "row": torch.randn(N), "matrix": torch.randn(M, N)}[init]
    start64 = torch.zeros(()) if start is None else start.double()
    want = start64 + a.double() @ b.double()
    bound = max(K, 1) * 2.0**-24 * (start64.abs() + a.double().abs() @ b.double().abs())
    sum_bound = max(K, 1) * 2.0**-24 * a.double().abs().sum(1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for name in kernels():
            got, sums = torch.ops.tsrnn.cpu_gemm(a, b, name, True, start, True)
            assert got.shape == (M, N) and sums.shape == (M,)
            assert_within_rounding(got, want, bound, f"{name} {shape} init={init}")
            assert_within_rounding(sums, a.double().sum(1), sum_bound, f"{name} {shape} row sums")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("shape", [(300, 47, 2100), (40, 300, 2100)], ids=str)
def test_blocked_driver_gives_the_same_bits_on_any_thread_count(shape):
    """Each element adds its K products in order of k whoever computes it: one thread and two give
    the same bits (so a result does not depend on the machine's core count)."""
    if not kernels():
        pytest.skip("this CPU runs none of the kernels (ATen's GEMM is used)")
    a, b = operands(shape, "transposed", False)
    bias = torch.randn(shape[1], generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(torch.ops.tsrnn.cpu_gemm(a, b, kernels()[0], True, bias, True))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_kernel_takes_row_strides():
    """A read with its own row stride and C written with one wider than N, as the loops call the
    kernel on slices; a b with its columns contiguous is packed along them."""
    if not kernels():
        pytest.skip("this CPU runs none of the kernels (ATen's GEMM is used)")
    a = torch.randn(40, 9)[::2]  # 20 rows, row stride 18
    b = torch.randn(70, 9).t()  # b [9, 70] with column stride 9
    for name in kernels():
        for blocked in (False, True):
            c, _ = torch.ops.tsrnn.cpu_gemm(a, b, name, blocked)
            assert c.stride(0) > c.shape[1]
            torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_bad_calls_say_what_is_wrong():
    with pytest.raises(RuntimeError, match="does not run the 'sse' kernel"):
        torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2), torch.ones(2, 2), "sse")
    with pytest.raises(RuntimeError, match="takes float32"):
        torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2), "avx2")
    with pytest.raises(RuntimeError, match="do not multiply"):
        torch.ops.tsrnn.cpu_gemm(torch.ones(2, 3), torch.ones(2, 2), "avx2")
    if kernels():
        name = kernels()[0]
        with pytest.raises(RuntimeError, match="init and row_sums only with blocked=True"):
            torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2), torch.ones(2, 2), name, False, torch.ones(2))
        with pytest.raises(RuntimeError, match="init and row_sums only with blocked=True"):
            torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2), torch.ones(2, 2), name, False, None, True)
        with pytest.raises(RuntimeError, match=r"init must be float32 \[2\] or \[2, 2\]"):
            torch.ops.tsrnn.cpu_gemm(torch.ones(2, 2), torch.ones(2, 2), name, True, torch.ones(3))


@pytest.mark.parametrize("lengths", [None, "unsorted"])
@pytest.mark.parametrize("shape", testing.CPU_GEMM_SHAPES, ids=str)
@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_recurrence_through_the_kernel(cell, shape, lengths):
    """The cpu path in float32 (the kernel's dtype) on the tiles' and panels' edges, with two
    threads; with lengths, the rows of a step, and so its tiles, shrink as the rows end."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = testing.compare("cpu", cell, shape, torch.float32, dt=cells.get(cell).params != (), seed=shape[1],
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


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 130, 21), (1110, 36, 9)], ids=str)
def test_projection_matches_addmm_forward_and_backward(shape, bias):
    """cpu_projection (the "cpu" path's x W^T + b; ATen's GEMM below one tile of rows) and its
    backward against torch.addmm's in float64, within the rounding bounds in float32, on a
    non-contiguous x (every other row of a float32 tensor)."""
    M, N, I = shape
    g = torch.Generator().manual_seed(M + N + I)
    x = torch.randn(2 * M, I, generator=g)[::2]
    w, b = torch.randn(N, I, generator=g), torch.randn(N, generator=g)
    grad = torch.randn(M, N, generator=g)
    assert M == 1 or not x.is_contiguous()
    x64, w64, b64, grad64 = (t.double() for t in (x, w, b, grad))
    args64 = [t.clone().requires_grad_() for t in (x64, w64, b64)]
    want = torch.addmm(args64[2], args64[0], args64[1].t()) if bias else args64[0] @ args64[1].t()
    want.backward(grad64)
    args = [t.requires_grad_() for t in (x, w, b)]
    got = torch.ops.tsrnn.cpu_projection(args[0], args[1], args[2] if bias else None)
    got.backward(grad)
    u = 2.0**-24
    bounds = {"y": I * u * ((b64.abs() if bias else 0) + x64.abs() @ w64.abs().t()),
              "dx": N * u * (grad64.abs() @ w64.abs()), "dW": M * u * (grad64.abs().t() @ x64.abs()),
              "db": M * u * grad64.abs().sum(0)}
    pairs = {"y": (got, want), "dx": (args[0].grad, args64[0].grad), "dW": (args[1].grad, args64[1].grad)}
    if bias:
        pairs["db"] = (args[2].grad, args64[2].grad)
    for name, (value, expected) in pairs.items():
        expected = expected.detach()
        assert_within_rounding(value, expected, bounds[name] + u * expected.abs() + 1e-6, name)


def test_projection_gradcheck_and_its_checks():
    """float64 runs ATen's GEMMs behind the same op: gradcheck; opcheck in both dtypes; a wrong
    shape is a one-line error."""
    g = torch.Generator().manual_seed(3)
    args = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in ((5, 3), (4, 3), (4,))]
    assert torch.autograd.gradcheck(torch.ops.tsrnn.cpu_projection, args)
    for dtype in (torch.float32, torch.float64):  # the fake kernel and the autograd formula against the kernel
        torch.library.opcheck(torch.ops.tsrnn.cpu_projection, [a.detach().to(dtype).requires_grad_() for a in args])
        torch.library.opcheck(torch.ops.tsrnn.cpu_projection, [a.detach().to(dtype) for a in args[:2]] + [None])
    with pytest.raises(RuntimeError, match=r"takes x \[M, I\] and w \[N, I\]"):
        torch.ops.tsrnn.cpu_projection(torch.ones(5, 3), torch.ones(4, 2), None)
    with pytest.raises(RuntimeError, match=r"bias must be \[4\]"):
        torch.ops.tsrnn.cpu_projection(torch.ones(5, 3), torch.ones(4, 3), torch.ones(5))
