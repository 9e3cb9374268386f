// The blocked, threaded driver of csrc/gemm/blocked_gemm.h.
#include "gemm/blocked_gemm.h"

#include "gemm/large_buffer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <memory>

namespace tsrnn {

namespace {

// K per block: a 32-column panel of B is then 128 KB, in L2 while a block's row tiles pass over
// it; with 384, C being read and written once per block, dx at T=200, B=128, H=128 took 19.8 ms
// against 16.1.
constexpr int64_t kDepth = 1024;
constexpr int64_t kRowBlocks = 8;  // row tiles per block of A
constexpr int64_t kPad = 16;       // floats between the rows of a copied block of A

// The block A[i0:i0+mc, k0:k0+kc] as the tile reads it, A[i0 + r, k0 + k] at
// data[r * lda + k * step]: in place where A's rows are its unit stride (dz^T: a tile's 14 rows
// are adjacent floats of a row of dz), else copied into `scratch` as mc rows of kc floats, kPad
// floats apart beyond kc. A's own rows are not read in place: at row pitches of a multiple of 4 KB
// (dz's rows at H = 256) a tile's rows fall in the same L1 sets, and dx at T=70, B=20, H=256 took
// 3.9 ms in place against 3.5 copied.
struct Block {
  const float* data;
  int64_t lda, step;
};

Block a_block(Strided a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* scratch) {
  if (a.row_stride == 1) return {a.data + i0 + k0 * a.col_stride, 1, a.col_stride};
  const int64_t pitch = kc + kPad;
  for (int64_t i = 0; i < mc; ++i) {
    for (int64_t k = 0; k < kc; ++k) scratch[i * pitch + k] = a(i0 + i, k0 + k);
  }
  return {scratch, pitch, 1};
}

// sums[i] += A[i, k] over the block's mc rows and kc columns, in order of k for each row.
void add_row_sums(Block block, int64_t mc, int64_t kc, float* sums) {
  if (block.lda == 1) {  // a row of the block's columns at a time (dz^T: a row of dz)
    for (int64_t k = 0; k < kc; ++k) {
      const float* column = block.data + k * block.step;
      for (int64_t i = 0; i < mc; ++i) sums[i] += column[i];
    }
    return;
  }
  for (int64_t i = 0; i < mc; ++i) {
    float sum = sums[i];
    for (int64_t k = 0; k < kc; ++k) sum += block.data[i * block.lda + k * block.step];
    sums[i] = sum;
  }
}

}  // namespace

void blocked_gemm(const PanelKernel& kernel, int64_t M, int64_t N, int64_t K, Strided a, Strided b,
                  float* c, int64_t ldc, const float* init, int64_t ld_init, float* row_sums) {
  if (row_sums) std::fill(row_sums, row_sums + M, 0.0f);
  const int64_t blocks = std::max<int64_t>(1, (K + kDepth - 1) / kDepth);
  const int64_t nr = kernel.panel_width, panels = (N + nr - 1) / nr, rows_per_block = kRowBlocks * kernel.max_rows;
  auto k_begin = [&](int64_t kb) { return K * kb / blocks; };  // near-equal blocks
  // All of B packed once, by all threads: block kb's panels at k_begin(kb) * panels * nr, panel p
  // of it p * kc * nr further.
  const at::Tensor packed = empty_large({std::max<int64_t>(1, K * panels * nr)}, at::TensorOptions(at::kFloat));
  float* const packed_b = packed.data_ptr<float>();
  at::parallel_for(0, blocks * panels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t kb = unit / panels, p = unit % panels, k0 = k_begin(kb), kc = k_begin(kb + 1) - k0;
      pack_panels(kernel, Strided{b.data + p * nr * b.col_stride, b.row_stride, b.col_stride}, k0, kc,
                  std::min(nr, N - p * nr), packed_b + k0 * panels * nr + p * kc * nr);
    }
  });
  // The threads split C's rows, a tile's worth at least each (so dW's 4H rows feed up to 4H / 14
  // threads); each element's sum runs in order of k, whoever computes it.
  at::parallel_for(0, M, kernel.max_rows, [&](int64_t m0, int64_t m1) {
    std::unique_ptr<float[]> scratch;  // a block of A, unless A is read in place
    if (a.row_stride != 1) scratch.reset(new float[rows_per_block * (kDepth + kPad)]);
    const int64_t row_blocks = (m1 - m0 + rows_per_block - 1) / rows_per_block;  // near-equal
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t k0 = k_begin(kb), kc = k_begin(kb + 1) - k0;
      const float* block_b = packed_b + k0 * panels * nr;
      for (int64_t ib = 0; ib < row_blocks; ++ib) {
        const int64_t i0 = m0 + (m1 - m0) * ib / row_blocks, mc = m0 + (m1 - m0) * (ib + 1) / row_blocks - i0;
        const Block block = a_block(a, i0, mc, k0, kc, scratch.get());
        if (row_sums) add_row_sums(block, mc, kc, row_sums + i0);
        for (int64_t p = 0; p < panels; ++p) {
          const int cols = static_cast<int>(std::min(nr, N - p * nr));
          for_row_tiles(kernel, mc, [&](int64_t r0, int64_t mr) {
            float* out = c + (i0 + r0) * ldc + p * nr;
            const float* start = kb > 0 ? out : init ? init + (i0 + r0) * ld_init + p * nr : nullptr;
            kernel.tile[mr](kc, block.data + r0 * block.lda, block.lda, block.step, block_b + p * kc * nr, out,
                            ldc, cols, start, kb > 0 ? ldc : ld_init);
          });
        }
      }
    }
  });
}

bool runs_blocked(int64_t rows, std::initializer_list<at::Tensor> tensors) {
  const PanelKernel* kernel = default_panel_kernel();
  if (kernel == nullptr || rows < kernel->max_rows) return false;
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.scalar_type() != at::kFloat) return false;
  }
  return true;
}

bool blocked_gemm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const float* init,
                  int64_t ld_init, float* row_sums) {
  if (!runs_blocked(a.size(0), {out, a, b})) return false;
  const PanelKernel* kernel = default_panel_kernel();
  TORCH_INTERNAL_ASSERT(out.size(1) <= 1 || out.stride(1) == 1, "blocked_gemm: out's columns must be contiguous");
  blocked_gemm(*kernel, a.size(0), b.size(1), a.size(1), Strided{a.data_ptr<float>(), a.stride(0), a.stride(1)},
               Strided{b.data_ptr<float>(), b.stride(0), b.stride(1)}, out.data_ptr<float>(), out.stride(0), init,
               ld_init, row_sums);
  return true;
}

}  // namespace tsrnn
