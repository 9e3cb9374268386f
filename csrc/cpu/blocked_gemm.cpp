// The blocked, threaded driver of csrc/cpu/blocked_gemm.h.
#include "cpu/blocked_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <memory>

namespace tsrnn {

namespace {

constexpr int64_t kDepth = 384;  // K per block: an A block of kRowBlocks * 14 rows is 168 KB, in L2
constexpr int64_t kRowBlocks = 8;

// A[i0:i0+mc, k0:k0+kc] into out as mc rows of kc floats; row_sums[i0 + i] += A[i0 + i, k] over
// the block in order of k. Reads along A's unit stride: a transposed A (row_stride 1) by columns.
void pack_rows(Strided a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out, float* row_sums) {
  if (a.row_stride == 1 && a.col_stride != 1) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* column = a.data + (k0 + k) * a.col_stride + i0;
      for (int64_t i = 0; i < mc; ++i) out[i * kc + k] = column[i];
      if (row_sums) {
        for (int64_t i = 0; i < mc; ++i) row_sums[i0 + i] += column[i];
      }
    }
    return;
  }
  for (int64_t i = 0; i < mc; ++i) {
    float* row = out + i * kc;
    for (int64_t k = 0; k < kc; ++k) row[k] = a(i0 + i, k0 + k);
    if (row_sums) {
      float sum = row_sums[i0 + i];
      for (int64_t k = 0; k < kc; ++k) sum += row[k];
      row_sums[i0 + i] = sum;
    }
  }
}

}  // namespace

void blocked_gemm(const PanelKernel& kernel, int64_t M, int64_t N, int64_t K, Strided a, Strided b,
                  float* c, int64_t ldc, const float* init, int64_t ld_init, float* row_sums) {
  if (row_sums) std::fill(row_sums, row_sums + M, 0.0f);
  const int64_t blocks = std::max<int64_t>(1, (K + kDepth - 1) / kDepth);
  const int64_t depth = (K + blocks - 1) / blocks;  // the deepest of near-equal blocks
  const int64_t nr = kernel.panel_width, rows_per_block = kRowBlocks * kernel.max_rows;
  at::parallel_for(0, M, rows_per_block, [&](int64_t m0, int64_t m1) {
    const std::unique_ptr<float[]> panels(new float[packed_size(kernel, N, depth)]);
    const std::unique_ptr<float[]> rows(new float[rows_per_block * depth]);
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t k0 = K * kb / blocks, kc = K * (kb + 1) / blocks - k0;
      pack_panels(kernel, b, k0, kc, N, panels.get());
      for (int64_t i0 = m0; i0 < m1; i0 += rows_per_block) {
        const int64_t mc = std::min(rows_per_block, m1 - i0);
        pack_rows(a, i0, mc, k0, kc, rows.get(), row_sums);
        for (int64_t n0 = 0; n0 < N; n0 += nr) {
          const int cols = static_cast<int>(std::min(nr, N - n0));
          for_row_tiles(kernel, mc, [&](int64_t r0, int64_t mr) {
            float* out = c + (i0 + r0) * ldc + n0;
            const float* start = kb > 0 ? out : init ? init + (i0 + r0) * ld_init + n0 : nullptr;
            kernel.tile[mr](kc, rows.get() + r0 * kc, kc, panels.get() + n0 * kc, out, ldc, cols, start,
                            kb > 0 ? ldc : ld_init);
          });
        }
      }
    }
  });
}

bool blocked_gemm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const float* init,
                  int64_t ld_init, float* row_sums) {
  const PanelKernel* kernel = default_panel_kernel();
  if (kernel == nullptr || out.scalar_type() != at::kFloat || a.scalar_type() != at::kFloat ||
      b.scalar_type() != at::kFloat) {
    return false;
  }
  TORCH_INTERNAL_ASSERT(out.size(1) <= 1 || out.stride(1) == 1, "blocked_gemm: out's columns must be contiguous");
  blocked_gemm(*kernel, a.size(0), b.size(1), a.size(1), Strided{a.data_ptr<float>(), a.stride(0), a.stride(1)},
               Strided{b.data_ptr<float>(), b.stride(0), b.stride(1)}, out.data_ptr<float>(), out.stride(0), init,
               ld_init, row_sums);
  return true;
}

}  // namespace tsrnn
