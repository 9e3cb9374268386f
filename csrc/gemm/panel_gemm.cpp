// Packing, the tile loop and the run-time choice of csrc/gemm/panel_gemm.h's kernels, and the
// operators that expose them to the tests and benchmarks: torch.ops.tsrnn.cpu_gemm (C = init + A B
// through one named kernel, by the time loops' driver or csrc/gemm/blocked_gemm.h's), cpu_gemm_kernels (the kernels this CPU runs) and cpu_gemm_in_use
// (the one the time loops use, or "aten"); schemas in tsrnn/ops/projection.py.
#include "gemm/panel_gemm.h"

#include "gemm/blocked_gemm.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include "check_message.h"

namespace tsrnn {

namespace {

constexpr const char* kNames[] = {"avx512", "avx2"};  // widest first

// Whether this CPU runs the kernel named `name`.
bool cpu_runs(const std::string& name) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (name == "avx512") return __builtin_cpu_supports("avx512f");
  if (name == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  (void)name;
  return false;
}

const PanelKernel* compiled(const std::string& name) {
  if (name == "avx512") return avx512_panel_kernel();
  if (name == "avx2") return avx2_panel_kernel();
  return nullptr;
}

const PanelKernel* choose_default() {
  const char* env = std::getenv("TSRNN_CPU_GEMM");
  if (env == nullptr || *env == '\0') {
    const std::vector<std::string> names = panel_kernel_names();
    return names.empty() ? nullptr : panel_kernel_named(names.front());
  }
  const std::string wanted(env);
  if (wanted == "aten") return nullptr;
  TSRNN_CHECK(wanted == "avx512" || wanted == "avx2",
              "tsrnn: TSRNN_CPU_GEMM must be 'avx512', 'avx2' or 'aten', got '", wanted, "'");
  const PanelKernel* kernel = panel_kernel_named(wanted);
  TSRNN_CHECK(kernel != nullptr, "tsrnn: TSRNN_CPU_GEMM=", wanted,
              " but this CPU or build does not run it; it runs: ", tsrnn::join(", ", panel_kernel_names()),
              " (or 'aten')");
  return kernel;
}

}  // namespace

const PanelKernel* panel_kernel_named(const std::string& name) {
  return cpu_runs(name) ? compiled(name) : nullptr;
}

const PanelKernel* default_panel_kernel() {
  static const PanelKernel* const kernel = choose_default();
  return kernel;
}

std::vector<std::string> panel_kernel_names() {
  std::vector<std::string> names;
  for (const char* name : kNames) {
    if (panel_kernel_named(name)) names.emplace_back(name);
  }
  return names;
}

void pack_panels(const PanelKernel& kernel, Strided b, int64_t k0, int64_t K, int64_t N, float* out) {
  const int64_t nr = kernel.panel_width;
  for (int64_t n0 = 0; n0 < N; n0 += nr) {
    float* panel = out + n0 * K;  // panel n0 / nr starts at (n0 / nr) * K * nr
    const int64_t cols = std::min(nr, N - n0);
    if (b.col_stride != 1 && b.row_stride == 1) {  // columns contiguous: read each along k
      for (int64_t j = 0; j < nr; ++j) {
        for (int64_t k = 0; k < K; ++k) panel[k * nr + j] = j < cols ? b(k0 + k, n0 + j) : 0.0f;
      }
    } else {
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t j = 0; j < nr; ++j) panel[k * nr + j] = j < cols ? b(k0 + k, n0 + j) : 0.0f;
      }
    }
  }
}

void panel_gemm(const PanelKernel& kernel, int64_t m, int64_t N, int64_t K, const float* a,
                int64_t lda, const float* packed, float* c, int64_t ldc) {
  for (int64_t n0 = 0; n0 < N; n0 += kernel.panel_width) {
    const int cols = static_cast<int>(std::min<int64_t>(kernel.panel_width, N - n0));
    for_row_tiles(kernel, m, [&](int64_t r0, int64_t rows) {
      kernel.tile[rows](K, a + r0 * lda, lda, 1, packed + n0 * K, c + r0 * ldc + n0, ldc, cols, nullptr, 0);
    });
  }
}

namespace {

// C = init + a b through the kernel named `name`, by the time loops' driver (panel_gemm: a's rows
// read in place, b packed once, init must be None) or, if `blocked`, by blocked_gemm (a and b any
// strides; init None, a bias row [N], or [M, N], which C starts as and the driver then adds to in
// place). Returns C and, from blocked_gemm with `row_sums`, a's row sums ([0] otherwise).
std::tuple<at::Tensor, at::Tensor> cpu_gemm(const at::Tensor& a, const at::Tensor& b, const std::string& name,
                                            bool blocked, const c10::optional<at::Tensor>& init, bool row_sums) {
  TSRNN_CHECK(a.dim() == 2 && b.dim() == 2, "tsrnn: cpu_gemm takes 2-D a and b, got ", a.sizes(), " and ",
              b.sizes());
  TSRNN_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "tsrnn: cpu_gemm takes float32, got ", a.scalar_type(), " and ", b.scalar_type());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TSRNN_CHECK(b.size(0) == K, "tsrnn: cpu_gemm: a ", a.sizes(), " and b ", b.sizes(), " do not multiply");
  const PanelKernel* kernel = panel_kernel_named(name);
  TSRNN_CHECK(kernel != nullptr, "tsrnn: this CPU or build does not run the '", name, "' kernel; it runs: ",
              tsrnn::join(", ", panel_kernel_names()));
  TSRNN_CHECK(blocked || (!init && !row_sums), "tsrnn: cpu_gemm takes init and row_sums only with blocked=True");
  const Strided b_view{b.data_ptr<float>(), b.stride(0), b.stride(1)};
  // C a view of rows wider than N, so its row stride differs from its width as in the callers'.
  const at::Tensor c = at::empty({M, N + 3}, a.options()).narrow(1, 0, N);
  if (!blocked) {
    const at::Tensor a_rows = a.stride(1) == 1 && a.stride(0) >= std::max<int64_t>(K, 1) ? a : a.contiguous();
    const at::Tensor packed = at::empty({packed_size(*kernel, N, K)}, a.options());
    pack_panels(*kernel, b_view, 0, K, N, packed.data_ptr<float>());
    panel_gemm(*kernel, M, N, K, a_rows.data_ptr<float>(), a_rows.stride(0), packed.data_ptr<float>(),
               c.data_ptr<float>(), c.stride(0));
    return {c, at::empty({0}, a.options())};
  }
  const float* start = nullptr;
  int64_t ld_start = 0;
  at::Tensor bias;
  if (init) {
    TSRNN_CHECK(init->scalar_type() == at::kFloat && (init->sizes() == at::IntArrayRef{N} ||
                                                      init->sizes() == at::IntArrayRef{M, N}),
                "tsrnn: cpu_gemm: init must be float32 [", N, "] or [", M, ", ", N, "], got ", init->sizes());
    if (init->dim() == 1) {
      bias = init->contiguous();
      start = bias.data_ptr<float>();
    } else {
      c.copy_(*init);
      start = c.data_ptr<float>();
      ld_start = c.stride(0);
    }
  }
  const at::Tensor sums = at::empty({row_sums ? M : 0}, a.options());
  blocked_gemm(*kernel, M, N, K, Strided{a.data_ptr<float>(), a.stride(0), a.stride(1)}, b_view,
               c.data_ptr<float>(), c.stride(0), start, ld_start, row_sums ? sums.data_ptr<float>() : nullptr);
  return {c, sums};
}

std::vector<std::string> cpu_gemm_kernels() { return panel_kernel_names(); }

std::string cpu_gemm_in_use() {
  const PanelKernel* kernel = default_panel_kernel();
  return kernel ? kernel->name : "aten";
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CPU, m) { m.impl("cpu_gemm", &cpu_gemm); }

TORCH_LIBRARY_IMPL(tsrnn, CompositeExplicitAutograd, m) {
  m.impl("cpu_gemm_kernels", &cpu_gemm_kernels);
  m.impl("cpu_gemm_in_use", &cpu_gemm_in_use);
}

}  // namespace tsrnn
