"""The CUDA extension's tensor-core GEMMs (csrc/gemm/cuda/tensor_core_gemm.h: cuBLAS with TF32 or
bf16 products, and the one-kernel TF32 rounding of round_tf32.cu) compiled against the SIMT
emulation (tests/simt: the rounding kernel's threads as fibers, cuBLAS as its documented
column-major contract with a check that TF32 operands are rounded): the rounding against
tsrnn.precision's, the row-major to column-major mapping of every operand layout against float64
products, the argument checks, and the input projection through them (forward and backward); on a
GPU the same tests run the installed tsrnn._cuda's ops on real cuBLAS. The recurrences' dW_hh GEMM
goes through the same header in the emulated tables (test_cluster_kernel.py, test_grid_kernel.py)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass

import pytest
import torch

from tsrnn import precision
from tsrnn.ops import projection

pytestmark = [pytest.mark.slow,  # compiles the emulation (cached after)
              pytest.mark.skipif(shutil.which("g++") is None, reason="the SIMT emulation is built with g++")]

from simt import build, emulation  # noqa: E402

U32 = 2.0 ** -24  # float32's unit roundoff: the products of rounded operands are exact, the sums round


@dataclass
class Gemms:
    """The tensor-core GEMM ops of one build (their namespace) and the device of their tensors."""

    namespace: str
    device: str

    def __getattr__(self, name):
        return getattr(getattr(torch.ops, self.namespace), name)


@pytest.fixture(scope="module", params=["emulated", "cuda"])
def ops(request):
    """The emulated build on CPU tensors where no GPU is, and on a GPU the installed tsrnn._cuda's
    (real cuBLAS; the GPU report's test job runs this file)."""
    if request.param == "cuda":
        if not torch.cuda.is_available() or not projection._has_tensor_cores(projection.TENSOR_CORE, "cuda"):
            pytest.skip("needs a GPU and tsrnn._cuda")
        return Gemms(projection.TENSOR_CORE, "cuda")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the real cuBLAS runs these tests")
    emulation.load(build.library())
    emulation.emulate(4, 0)
    return Gemms(emulation.TENSOR_CORE_NAMESPACE, "cpu")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit but NaN, which must be NaN in both (the GPU's cvt.rna makes every NaN its
    canonical one)."""
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    nan = torch.isnan(a)
    return (a.shape == b.shape and torch.equal(nan, torch.isnan(b))
            and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32)))


SPECIAL = [float("nan"), float("inf"), -float("inf"), 3.4028235e38, -3.4028235e38, 1e-45, -1e-40, 0.0, -0.0,
           1.0 + 2.0 ** -11, 1.0 + 2.0 ** -12, 1.0 + 3 * 2.0 ** -12, -(1.0 + 2.0 ** -11), 65504.0, 2.0 ** -126]


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 1023, 4097])
def test_the_rounding_kernel_rounds_as_torch_does(ops, n):
    """Every length over the 16-byte loads' edge, aligned and one float off (the scalar loop), and
    the values where rounding decides: ties (away from zero), overflow to infinity, subnormals, NaN."""
    g = torch.Generator().manual_seed(n)
    values = torch.cat([torch.tensor(SPECIAL), torch.randn(n, generator=g) * 10.0 ** torch.randint(-30, 30, (n,), generator=g)])[:n]
    want = precision.round_operands(values, "tf32")
    assert same_bits(ops.round_tf32(values.to(ops.device)), want)
    shifted = torch.cat([torch.zeros(1), values]).to(ops.device)[1:]  # 4 bytes past a 16-byte boundary
    assert same_bits(ops.round_tf32(shifted), want)


def test_the_rounding_kernel_takes_any_strides(ops):
    x = torch.randn(6, 10).t()
    assert same_bits(ops.round_tf32(x.to(ops.device)), precision.round_operands(x, "tf32"))


def layouts(t: torch.Tensor) -> dict[str, torch.Tensor]:
    """``t``'s values as each kind of operand cuBLAS is given: rows contiguous, columns contiguous
    (a transposed view), rows with a leading dimension past the row, and neither (copied first)."""
    rows, cols = t.shape
    return {"rows": t.contiguous(), "columns": t.t().contiguous().t(),
            "padded": torch.cat([t, torch.zeros(rows, 3)], 1)[:, :cols],
            "strided": torch.stack([t, t], 2)[:, :, 0]}


SHAPES = [(1, 1, 1), (1, 7, 1), (5, 7, 3), (16, 33, 9), (3, 1, 8), (2, 0, 3), (0, 4, 2)]  # (M, K, N)


def bound(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The float32 accumulation's error bound of bias + a b: (K + 1) u (sum_k |a_ik||b_kj| + |bias_j|)
    (the products are exact; K + 1 roundings at most, in any order of the sums)."""
    magnitude = a.double().abs() @ b.double().abs() + (0.0 if bias is None else bias.double().abs())
    return (a.shape[1] + 1) * U32 * magnitude + 1e-300


@pytest.mark.parametrize("products", ["tf32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_operand_layout_gives_the_product(ops, products, shape):
    M, K, N = shape
    g = torch.Generator().manual_seed(M * 100 + K * 10 + N)
    a, b, bias = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g), torch.randn(N, generator=g)
    a, b = precision.round_operands(a, products), precision.round_operands(b, products)
    dtype = torch.float32 if products == "tf32" else torch.bfloat16
    for with_bias in (False, True):
        want = a.double() @ b.double() + (bias.double() if with_bias else 0.0)
        for a_kind, a_in in layouts(a).items():
            for b_kind, b_in in layouts(b).items():
                got = ops.mm(a_in.to(ops.device, dtype), b_in.to(ops.device, dtype),
                             bias.to(ops.device) if with_bias else None)
                assert got.dtype == torch.float32 and got.shape == (M, N)
                error = (got.cpu().double() - want).abs()
                assert (error <= bound(a, b, bias if with_bias else None)).all(), (a_kind, b_kind, with_bias)


def test_a_bias_is_never_written(ops):
    """A one-row product's out starts as a copy of the bias, never the bias itself."""
    bias = torch.randn(5, device=ops.device)
    kept = bias.clone()
    out = ops.mm(torch.ones(1, 2, device=ops.device), torch.ones(2, 5, device=ops.device), bias)
    assert torch.equal(bias, kept) and torch.equal(out[0], kept + 2.0)


def test_an_unrounded_tf32_operand_is_refused(ops):
    """The emulated cuBLAS refuses what the real one would round its own way: the GEMMs' callers
    round first, and this is the check that says so when one does not."""
    if ops.device != "cpu":
        pytest.skip("a check of the emulated cuBLAS")
    with pytest.raises(RuntimeError, match="not rounded to TF32"):
        ops.mm(torch.full((2, 3), 1.0 + 2.0 ** -20), torch.ones(3, 2), None)


@pytest.mark.parametrize("args, message", [
    ((torch.ones(2, 3), torch.ones(4, 2), None), "takes a \\[M, K\\] and b \\[K, N\\]"),
    ((torch.ones(2, 3), torch.ones(3, 2, dtype=torch.bfloat16), None), "float32 \\(TF32 values\\) or bfloat16 operands"),
    ((torch.ones(2, 3, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64), None), "float32 \\(TF32 values\\)"),
    ((torch.ones(2, 3), torch.ones(3, 2), torch.ones(3)), "bias \\[N\\] with N=2"),
    ((torch.ones(2, 3), torch.ones(3, 2), torch.ones(2, dtype=torch.float64)), "float32 bias"),
    ((torch.ones(3), torch.ones(3, 2), None), "takes a \\[M, K\\]"),
])
def test_bad_arguments_get_a_clear_error(ops, args, message):
    with pytest.raises(RuntimeError, match=message):
        ops.mm(*(None if t is None else t.to(ops.device) for t in args))


@pytest.mark.parametrize("products", ["tf32", "bf16"])
def test_the_projection_runs_its_three_gemms_on_the_ops(ops, products):
    """x W^T + b and its gradients through tensor_core_projection: on the emulated ops (the profiler
    sees three GEMMs and, for TF32, the roundings), equal to float64 products of rounded operands."""
    g = torch.Generator().manual_seed(1)
    draw = lambda *shape: torch.randn(*shape, generator=g).to(ops.device)  # noqa: E731
    x = draw(3, 5, 7).transpose(0, 1).reshape(15, 7).requires_grad_()  # a copy: contiguous
    w, b, grad = draw(12, 7).requires_grad_(), draw(12).requires_grad_(), draw(15, 12)
    namespace = ops.namespace
    run = projection.tensor_core_projection(namespace)
    with torch.autograd.profiler.profile() as prof:
        out = run(x, w, b, products)
        out.backward(grad)
    names = [event.name for event in prof.function_events]
    assert names.count(f"{namespace}::mm") == 3
    assert (names.count(f"{namespace}::round_tf32") >= 3) == (products == "tf32")
    r = {name: precision.round_operands(t.detach().cpu(), products).double() for name, t in (("x", x), ("w", w), ("g", grad))}
    checks = [(out, r["x"] @ r["w"].t() + b.detach().cpu().double(), bound(r["x"], r["w"].t(), b.detach().cpu())),
              (x.grad, r["g"] @ r["w"], bound(r["g"], r["w"])),
              (w.grad, r["g"].t() @ r["x"], bound(r["g"].t(), r["x"]))]
    for got, want, limit in checks:
        assert ((got.detach().cpu().double() - want).abs() <= limit).all()
    assert torch.allclose(b.grad, grad.sum(0), rtol=1e-6, atol=1e-6)


def test_a_weight_is_rounded_once_a_version_by_the_kernel(ops):
    w = torch.randn(8, 4, device=ops.device)
    round_kernel = ops.round_tf32
    first = precision.rounded_weight(w, "tf32", round_kernel)
    assert precision.rounded_weight(w, "tf32", round_kernel) is first
    assert precision.rounded_weight(w, "tf32") is not first  # torch's rounding keeps its own copy
    w.add_(1.0)
    assert same_bits(precision.rounded_weight(w, "tf32", round_kernel), precision.round_operands(w, "tf32"))
