// Packing, the tile loop and the run-time choice of csrc/cpu/panel_gemm.h's kernels, and the
// operators that expose them to the tests and benchmarks: torch.ops.tsrnn.cpu_gemm (C = A op(B)
// through one named kernel), cpu_gemm_kernels (the kernels this CPU runs) and cpu_gemm_in_use
// (the one the time loops use, or "aten"); schemas in tsrnn/ops.py.
#include "cpu/panel_gemm.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>

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
  TORCH_CHECK(wanted == "avx512" || wanted == "avx2",
              "tsrnn: TSRNN_CPU_GEMM must be 'avx512', 'avx2' or 'aten', got '", wanted, "'");
  const PanelKernel* kernel = panel_kernel_named(wanted);
  TORCH_CHECK(kernel != nullptr, "tsrnn: TSRNN_CPU_GEMM=", wanted,
              " but this CPU or build does not run it; it runs: ", c10::Join(", ", panel_kernel_names()),
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

void pack_panels(const PanelKernel& kernel, const float* b, bool trans_b, int64_t ldb, int64_t N,
                 int64_t K, float* out) {
  const int64_t nr = kernel.panel_width;
  for (int64_t n0 = 0; n0 < N; n0 += nr) {
    float* panel = out + n0 * K;  // panel n0 / nr starts at (n0 / nr) * K * nr
    const int64_t cols = std::min(nr, N - n0);
    if (trans_b) {  // column n of B is row n of b: read it along k
      for (int64_t j = 0; j < nr; ++j) {
        if (j < cols) {
          const float* column = b + (n0 + j) * ldb;
          for (int64_t k = 0; k < K; ++k) panel[k * nr + j] = column[k];
        } else {
          for (int64_t k = 0; k < K; ++k) panel[k * nr + j] = 0.0f;
        }
      }
    } else {
      for (int64_t k = 0; k < K; ++k) {
        const float* row = b + k * ldb + n0;
        for (int64_t j = 0; j < nr; ++j) panel[k * nr + j] = j < cols ? row[j] : 0.0f;
      }
    }
  }
}

void panel_gemm(const PanelKernel& kernel, int64_t m, int64_t N, int64_t K, const float* a,
                int64_t lda, const float* packed, float* c, int64_t ldc) {
  const int64_t nr = kernel.panel_width, blocks = (m + kernel.max_rows - 1) / kernel.max_rows;
  for (int64_t n0 = 0; n0 < N; n0 += nr) {
    const int cols = static_cast<int>(std::min(nr, N - n0));
    int64_t r0 = 0;
    for (int64_t block = 0; block < blocks; ++block) {  // near-equal blocks of at most max_rows
      const int64_t left = blocks - block, rows = (m - r0 + left - 1) / left;
      kernel.tile[rows](K, a + r0 * lda, lda, packed + n0 * K, c + r0 * ldc + n0, ldc, cols);
      r0 += rows;
    }
  }
}

namespace {

at::Tensor cpu_gemm(const at::Tensor& a, const at::Tensor& b, bool trans_b, const std::string& name) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "tsrnn: cpu_gemm takes 2-D a and b, got ", a.sizes(), " and ",
              b.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "tsrnn: cpu_gemm takes float32, got ", a.scalar_type(), " and ", b.scalar_type());
  const int64_t K = a.size(1), N = trans_b ? b.size(0) : b.size(1);
  TORCH_CHECK((trans_b ? b.size(1) : b.size(0)) == K, "tsrnn: cpu_gemm: a ", a.sizes(), " and op(b) of ",
              b.sizes(), " do not multiply");
  const PanelKernel* kernel = panel_kernel_named(name);
  TORCH_CHECK(kernel != nullptr, "tsrnn: this CPU or build does not run the '", name, "' kernel; it runs: ",
              c10::Join(", ", panel_kernel_names()));
  // A with its own row stride where its rows are contiguous; C a view of rows wider than N, so
  // both strides differ from the widths as in the time loops' calls on slices.
  const at::Tensor a_rows = a.stride(1) == 1 && a.stride(0) >= std::max<int64_t>(K, 1) ? a : a.contiguous();
  const at::Tensor b_c = b.contiguous();
  const at::Tensor packed = at::empty({packed_size(*kernel, N, K)}, a.options());
  pack_panels(*kernel, b_c.data_ptr<float>(), trans_b, b_c.size(1), N, K, packed.data_ptr<float>());
  const at::Tensor c = at::empty({a.size(0), N + 3}, a.options()).narrow(1, 0, N);
  panel_gemm(*kernel, a.size(0), N, K, a_rows.data_ptr<float>(), a_rows.stride(0), packed.data_ptr<float>(),
             c.data_ptr<float>(), c.stride(0));
  return c;
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
