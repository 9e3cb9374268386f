// The large GEMMs around the CPU time loops (the input projection, dx, dW_ih, dW_hh), on all
// threads, through csrc/gemm/panel_gemm.h's micro-kernels:
//
//   C[M, N] = init + A[M, K] B[K, N]        (init: C itself, a bias row, or zero)
//
// blocked as BLIS does (Van Zee & van de Geijn, 2015): K in blocks of at most 1024, B packed into
// the kernel's panels once, by all threads, and each panel stays in L2 while the row tiles of a
// block of A pass over it; the threads then split the rows of C. A and B are strided views (any
// row and column strides): A is read in place where its rows are its unit stride (dz^T for the
// weight gradients, a tile's rows being 14 adjacent floats of a row of dz), else copied by blocks
// into rows that do not alias in L1; B is packed along its unit stride. Each element of C starts at init and adds its K products in order of
// k, one FMA each, whatever the thread count and blocking: the result is the same bits on every
// run, within K·u·(|init| + Σ|A||B|) of the exact sum.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <initializer_list>

#include "gemm/panel_gemm.h"

namespace tsrnn {

// C[M, N] (row stride ldc) = init + A B. init: [M, N] with row stride ld_init (ld_init = 0: one
// row broadcast to every row, e.g. a bias; init == c: C += A B), or null for zero. With row_sums
// (M floats), also row_sums[i] = sum_k A[i, k] in order of k (a bias gradient from the same pass
// over A).
void blocked_gemm(const PanelKernel& kernel, int64_t M, int64_t N, int64_t K, Strided a, Strided b,
                  float* c, int64_t ldc, const float* init, int64_t ld_init, float* row_sums);

// Whether the tensor form below runs for `tensors` (undefined ones aside) and an A of `rows`
// rows: all float32, where the time loops have a panel kernel, and at least one tile of rows
// (fewer would pack all of B for a product that reads each of its elements fewer than 14 times:
// ATen's GEMM packs nothing). A caller asks first, to allocate its output for one GEMM or the
// other, not both.
bool runs_blocked(int64_t rows, std::initializer_list<at::Tensor> tensors);

// The same on tensors through the time loops' kernel (default_panel_kernel()): out [M, N] (unit
// column stride) = init + a [M, K] b [K, N] (any strides), init and row_sums as above. Returns
// false, having done nothing, where that kernel is ATen's (float64, TSRNN_CPU_GEMM=aten, a CPU
// with neither AVX2 nor AVX-512): the caller then uses ATen's GEMM.
bool blocked_gemm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const float* init,
                  int64_t ld_init, float* row_sums);

}  // namespace tsrnn
