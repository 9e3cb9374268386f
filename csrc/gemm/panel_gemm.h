// The per-step GEMM of the CPU time loops on weights packed once per call:
//
//   C[m, N] = A[m, K] B[K, N],  B packed into panels of NR columns, panel p = B[:, p*NR : p*NR + NR]
//   stored [K][NR] (columns past N zero).
//
// Each step, a register-blocked micro-kernel computes C one MR x NR tile at a time: for each k,
// NR/W vector loads of the panel row, MR broadcasts of A[r, k] and 2 MR fused multiply-adds into
// MR x NR accumulators that stay in registers over the whole K, written once. A step's A (the
// previous h or dz) has few rows (the batch), so a tile spans as many rows as the registers
// hold: on AVX-512 NR = 32 (two 16-float vectors) and MR <= 14 (28 accumulators of 32 registers),
// on AVX2+FMA NR = 16 and MR <= 6 (12 of 16). The rows of A are split into the fewest blocks of
// at most MR rows, of near-equal size (20 rows: two tiles of 10). Each kernel is compiled for its
// ISA in its own file (panel_avx512.cpp, panel_avx2.cpp) and chosen at run time by the CPU's
// features; without either (another architecture, clang, or an older CPU), the caller falls back
// to ATen.
//
// Sums run over k in order, one FMA per term: the result differs from another GEMM's by rounding
// only (tests/test_cpu_gemm.py compares every kernel with a float64 product on odd shapes). The
// same tiles also run the layer's large GEMMs, through csrc/gemm/blocked_gemm.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tsrnn {

// One ISA's micro-kernels. tile[mr] computes C[0:mr, 0:cols] = init + A[0:mr, 0:K] panel
// (cols <= NR) for 1 <= mr <= max_rows; A[r, k] at a[r * lda + k * a_step] (a_step 1: A's rows;
// lda 1 and a_step dz's row stride: dz^T read in place, csrc/gemm/blocked_gemm.h), c: row stride
// ldc, panel: [K][NR],
// init: [mr, cols] with row stride ld_init (0: one row for all), or null for zero. Each sum
// starts at init and adds the K products in order, one FMA each.
struct PanelKernel {
  using Tile = void (*)(int64_t K, const float* a, int64_t lda, int64_t a_step, const float* panel, float* c,
                        int64_t ldc, int cols, const float* init, int64_t ld_init);
  const char* name;
  int panel_width;  // NR
  int max_rows;     // MR's upper bound
  Tile tile[15];    // tile[1..max_rows]
};

// The kernels this build has (per file, null where the compiler or architecture lacks the ISA).
const PanelKernel* avx512_panel_kernel();
const PanelKernel* avx2_panel_kernel();

// The kernel named `name` ("avx512" or "avx2") if this build has it and this CPU runs it, else
// null.
const PanelKernel* panel_kernel_named(const std::string& name);

// The kernel the CPU loops use: the widest this CPU runs, or as TSRNN_CPU_GEMM says ("avx512",
// "avx2", or "aten" for ATen's GEMM: null); read once. An unknown value or a kernel this CPU
// cannot run is an error.
const PanelKernel* default_panel_kernel();

// Names of the kernels this CPU runs, widest first.
std::vector<std::string> panel_kernel_names();

// A float32 matrix view: element (i, j) at data[i * row_stride + j * col_stride].
struct Strided {
  const float* data;
  int64_t row_stride, col_stride;
  float operator()(int64_t i, int64_t j) const { return data[i * row_stride + j * col_stride]; }
};

// Floats that pack_panels writes for N columns and K rows.
inline int64_t packed_size(const PanelKernel& kernel, int64_t N, int64_t K) {
  const int64_t nr = kernel.panel_width;
  return (N + nr - 1) / nr * nr * K;
}

// Packs rows [k0, k0 + K) of B [., N] into out (packed_size(kernel, N, K) floats), reading along
// B's unit stride.
void pack_panels(const PanelKernel& kernel, Strided b, int64_t k0, int64_t K, int64_t N, float* out);

// Calls f(r0, rows) over m rows split into the fewest tiles of at most kernel.max_rows rows, of
// near-equal size (20 rows: two tiles of 10).
template <typename F>
void for_row_tiles(const PanelKernel& kernel, int64_t m, F&& f) {
  const int64_t tiles = (m + kernel.max_rows - 1) / kernel.max_rows;
  int64_t r0 = 0;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t rows = (m - r0 + tiles - tile - 1) / (tiles - tile);
    f(r0, rows);
    r0 += rows;
  }
}

// C[m, N] = A[m, K] B with B packed by pack_panels; a: row stride lda, c: row stride ldc.
void panel_gemm(const PanelKernel& kernel, int64_t m, int64_t N, int64_t K, const float* a,
                int64_t lda, const float* packed, float* c, int64_t ldc);

}  // namespace tsrnn
